"""torchvision 0.14 segmentation, detection, video and optical-flow models compile with
dynamo.compile(model) in default mode (graph breaks allowed) and match eager bitwise, in eval mode:
the cheapest builder of each family (issue #7). Detection runs with its score threshold at 0 so
that random weights still produce boxes, and its backbone's feature maps are compared too.

Every builder of these families (26) runs in scripts/torchvision_all.py; its last results are in
docs/models.md. Builders and inputs: torchvision_cases.py.
"""
import copy

import pytest
import torch

import dynamo
from capture_harness import Recorder, clone, same
from torchvision_cases import (FAMILY_CHEAPEST, FAMILY_MODELS, backbone_input, build_family_model,
                               family_inputs)
from stacks import only_on_stack1

torch.set_num_threads(1)

# What fails today, with the reason ("model", or "model/backbone" for the backbone test): strict,
# so that a fix turns the entry into a failure to remove from here.
XFAIL = {
    # none today. Earlier fixed: segmentation results came back as OrderedDict([]) (stores into an
    # OrderedDict after a break were lost); fasterrcnn raised "value not built" (two containers
    # appended to a list made before a break)
}


# Cases whose inputs are torchvision 0.14's and do not apply to stack 2's torchvision 0.26.
ONLY_STACK1 = {
    "raft_small": "torchvision 0.26's RAFT needs images of at least 128x128 (feature maps of 16); "
                  "the inputs here are sized for torchvision 0.14",
}


def cases(names, suffix=""):
    def marks(n):
        m = [pytest.mark.xfail(strict=True, reason=XFAIL[n + suffix])] if n + suffix in XFAIL else []
        return m + ([only_on_stack1(ONLY_STACK1[n])] if n in ONLY_STACK1 else [])
    return [pytest.param(n, marks=marks(n)) for n in names]


def same_ordered(got, expected):
    """same() of the harness, plus the order of dict keys (OrderedDict results)."""
    if isinstance(expected, dict):
        return list(got.keys()) == list(expected.keys()) and \
            all(same_ordered(got[k], expected[k]) for k in expected)
    if isinstance(expected, (list, tuple)):
        return type(got) is type(expected) and len(got) == len(expected) and \
            all(same_ordered(g, e) for g, e in zip(got, expected))
    return True


def compare(eager_fn, compiled_fn, calls):
    """Eager and compiled over the same calls, every result bitwise equal; returns the recorder."""
    dynamo.reset()
    compiled = dynamo.compile(compiled_fn)
    with torch.no_grad(), Recorder() as rec:
        for i, (args, kwargs) in enumerate(calls):
            expected = eager_fn(*clone(args), **kwargs)
            got = compiled(*clone(args), **kwargs)
            assert same(got, expected) and same_ordered(got, expected), f"call {i + 1} differs from eager"
    assert rec.graphs, "nothing was captured"
    return rec


@only_on_stack1("the family lists are torchvision 0.14's (0.26 adds swin3d and more builders)")
def test_family_lists_match_this_torchvision():
    """Every public builder function of each submodule is in the full run, and nothing else."""
    import inspect

    import torchvision.models as tvm
    for family, module in (("segmentation", tvm.segmentation), ("detection", tvm.detection),
                           ("video", tvm.video), ("optical_flow", tvm.optical_flow)):
        builders = sorted(n for n, f in vars(module).items() if inspect.isfunction(f) and not n.startswith("_"))
        assert builders == sorted(FAMILY_MODELS[family]), family
    assert all(FAMILY_CHEAPEST[f] in FAMILY_MODELS[f] for f in FAMILY_CHEAPEST)


@pytest.mark.parametrize("name", cases(FAMILY_CHEAPEST.values()))
def test_default_mode_identical_outputs(name):
    eager = build_family_model(name)
    model = copy.deepcopy(eager)
    # two calls of one shape (the second runs the cached code), then another shape
    calls = [c for c in (family_inputs(name, v) for v in range(3)) if c is not None]
    compare(eager, model, calls)


# Models without data-dependent code: one graph, as the classifiers with fullgraph=True.
@pytest.mark.parametrize("name", cases([FAMILY_CHEAPEST[f] for f in ("segmentation", "video", "optical_flow")],
                                       "/one_graph"))
def test_one_graph_without_breaks(name):
    eager = build_family_model(name)
    rec = compare(eager, copy.deepcopy(eager), [family_inputs(name, 0)])
    assert len(rec.graphs) == 1 and not rec.breaks, [f"{b['kind']} at {b['file']}:{b['line']}" for b in rec.breaks]


def test_detection_produces_boxes_with_random_weights():
    name = FAMILY_CHEAPEST["detection"]
    with torch.no_grad():
        out = build_family_model(name)(*family_inputs(name)[0])
    assert all(len(d["boxes"]) > 0 and d["boxes"].shape == (len(d["scores"]), 4) for d in out)


@pytest.mark.parametrize("name", cases([FAMILY_CHEAPEST["detection"]], "/backbone"))
def test_detection_backbone_features_identical(name):
    eager = build_family_model(name)
    model = copy.deepcopy(eager)
    calls = [((backbone_input(name, v),), {}) for v in range(2)]
    rec = compare(eager.backbone, model.backbone, calls)
    # IntermediateLayerGetter + FeaturePyramidNetwork: no data-dependent code, one graph
    assert len(rec.graphs) == 1 and not rec.breaks, [f"{b['kind']} at {b['file']}:{b['line']}" for b in rec.breaks]
