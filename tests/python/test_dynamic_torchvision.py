"""torchvision classifiers with a dynamic batch dimension (dynamo.mark_dynamic before the first
call): one compile serves three batch sizes, exact against eager in eval mode (outputs) and
train mode (outputs, BatchNorm statistics, gradients), with the eager and aot_eager backends."""
import pytest
import torch

import dynamo
from capture_harness import same
from stacks import full_set_on_stack1
from torchvision_cases import build

# Stack 2's default run keeps resnet18: the symbolic batch goes through the same kinds of nodes in
# mobilenet_v2 (convolutions, depthwise ones included, BatchNorm, pooling, flatten, linear).
MODELS = ["resnet18", pytest.param("mobilenet_v2", marks=full_set_on_stack1(
    "resnet18 takes the symbolic batch through the same kinds of nodes"))]
BATCHES = [2, 3, 5]


def pair(name, train):
    eager, compiled = build(name), build(name)
    compiled.load_state_dict(eager.state_dict())
    eager.train(train)
    compiled.train(train)
    return eager, compiled


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_dynamic_batch_one_compile_exact(name, train, backend):
    # aot_eager: one compile of the model; its entry AOT-compiles the graph per batch size.
    dynamo.reset()
    compiles = []
    listener = lambda r: compiles.append(r) if r["status"] == "compiled" else None  # noqa: E731
    dynamo.add_compile_listener(listener)
    try:
        eager, compiled = pair(name, train)
        f = dynamo.compile(compiled, fullgraph=True, backend=backend)
        for i, b in enumerate(BATCHES):
            torch.manual_seed(100 + i)
            x = torch.randn(b, 3, 64, 64)
            dynamo.mark_dynamic(x, 0)
            with torch.set_grad_enabled(train):
                torch.manual_seed(7)  # dropout in train mode draws the same numbers
                ref = eager(x)
                torch.manual_seed(7)
                out = f(x)
            assert same(out, ref), (name, b)
            if train:
                ref.sum().backward()
                out.sum().backward()
                for (n, p1), p2 in zip(eager.named_parameters(), compiled.parameters()):
                    assert same(p1.grad, p2.grad), (name, b, n)
                for (n, b1), b2 in zip(eager.named_buffers(), compiled.buffers()):
                    assert same(b1, b2), (name, b, n)
        assert len(compiles) == 1, [r["reason"] for r in compiles]
        assert "x.size()[0] is dynamic (s0): mark_dynamic" in compiles[0]["dynamic_shapes"]
    finally:
        dynamo.remove_compile_listener(listener)
        dynamo.reset()
