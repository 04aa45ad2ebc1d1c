"""torchvision 0.14 classification builders and the inputs the capture tests use for them."""
import torch
import torchvision.models as tvm

# Builders taken out of torchvision.models' namespace: every public lowercase function whose
# name starts with a classification family (detection/segmentation/video live in submodules).
FAMILIES = ("resnet", "resnext", "wide_resnet", "densenet", "mobilenet", "mnasnet", "efficientnet",
            "regnet", "shufflenet", "squeezenet", "googlenet", "inception", "vgg", "alexnet",
            "convnext", "vit", "swin", "maxvit")


def all_builders():
    return sorted(n for n, f in vars(tvm).items()
                  if callable(f) and not isinstance(f, type) and n.islower() and n.startswith(FAMILIES))


#: The smallest builder of every family and the second generation of a few (test_torchvision.py's
#: eval and train sweeps).
FAMILY_REPRESENTATIVES = [
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
    "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf",
    "regnet_y_400mf", "resnet18", "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_1",
    "swin_t", "swin_v2_t", "vgg11_bn", "vit_b_32", "wide_resnet50_2",
]

#: One builder of each of the 18 FAMILIES (FAMILY_REPRESENTATIVES less the second generation of
#: efficientnet, mobilenet, regnet and swin): what stack 2's default run (CI) sweeps in eval mode,
#: the guide's floor "CI runs one per family" (test_torchvision.py).
ONE_PER_FAMILY = [n for n in FAMILY_REPRESENTATIVES
                  if n not in ("efficientnet_v2_s", "mobilenet_v2", "regnet_y_400mf", "swin_v2_t")]

#: The train-mode models of stack 2's default run (test_torchvision.py, eager and aot_eager): one
#: of each kind of train-mode state the classifiers have. BatchNorm statistics (resnet18),
#: dropout's random numbers and hardswish + squeeze-excitation (mobilenet_v3_small), channel
#: shuffle (shufflenet), stochastic depth and SiLU (efficientnet_b0), the auxiliary outputs of
#: a tuple result (googlenet). The other families' train steps run the same autograd paths
#: through the same captured graphs; stack 1 runs them all, DYNAMO_STACK2_FULL=1 on stack 2 too.
STACK2_TRAIN = ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "efficientnet_b0", "googlenet"]

#: The aot_eager train-step sweep (docs/aot.md): one model per family (the cheapest to compile),
#: plus the other generation of mobilenet and efficientnet. test_torchvision.py checks the models
#: it also sweeps against its own eager step (one eager reference for both backends);
#: test_aot_torchvision.py checks the rest.
AOT_TRAIN_SET = ["resnet18", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "mobilenet_v2",
                 "mobilenet_v3_small", "mnasnet0_5", "efficientnet_b0", "efficientnet_v2_s",
                 "regnet_x_400mf", "shufflenet_v2_x0_5", "squeezenet1_1", "googlenet", "inception_v3",
                 "vgg11", "alexnet", "convnext_tiny", "vit_b_32", "swin_t", "maxvit_t"]

def input_for(name, batch=2):
    """The smallest input the model accepts, to keep CPU time down."""
    if name.startswith(("vit", "maxvit")):
        size = 224
    elif name.startswith("inception"):
        size = 299  # the auxiliary head (train mode) needs the full size
    elif name.startswith(("swin",)):
        size = 64
    else:
        size = 64
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, 3, size, size, generator=g)


def build(name):
    torch.manual_seed(0)
    kwargs = {}
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False  # the default init uses scipy, slow; any weights do
    return getattr(tvm, name)(**kwargs)


def with_nonzero_heads(model):
    """The model with every all-zero Linear weight (ViT's classification head: torchvision
    initialises it to zeros) drawn from N(0, 0.02) (seed 0), so that its outputs are not zeros
    whatever the layers before compute: a tolerance on them then checks something."""
    g = torch.Generator().manual_seed(0)
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear) and not mod.weight.any():
            with torch.no_grad():
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g) * 0.02)
    return model


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def fused_comparison(got, eager, ref):
    """The fused backend's tolerance on a classifier's outputs: got (fused) against eager and a
    float64 reference (scripts/torchvision_fused.py's docstring states it).
    (within tolerance, max |got - ref|, max |eager - ref|, max |got - eager|, max |ref|) over
    the outputs. Every bound scales with the output's magnitude: with random weights some
    models' logits are tiny (efficientnet's about 1e-19), where an absolute floor would pass
    anything."""
    ok, err_f, err_e, diff, scale = True, 0.0, 0.0, 0.0, 0.0
    for g, e, r in zip(_flat(got), _flat(eager), _flat(ref)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return False, float("inf"), 0.0, float("inf"), 0.0
        gd, ed, rd = g.double(), e.double(), r.double()
        d = (gd - ed).abs()
        ok &= bool((d <= 1e-4 * ed.abs() + 1e-4 * ed.abs().max().item()).all())
        f, e_, m = (gd - rd).abs().max().item(), (ed - rd).abs().max().item(), rd.abs().max().item()
        ok &= f <= 4 * e_ + 1e-6 * m
        err_f, err_e, diff, scale = max(err_f, f), max(err_e, e_), max(diff, d.max().item()), max(scale, m)
    return ok, err_f, err_e, diff, scale


# ---- segmentation, detection, video and optical flow (issue #7) -----------------------------
# Every builder of these families in torchvision 0.14.1 (swin3d_t came in 0.15), with random
# weights (weights=None, weights_backbone=None), in eval mode, and the smallest inputs that keep
# them meaningful.

FAMILY_MODELS = {
    "segmentation": ["deeplabv3_mobilenet_v3_large", "deeplabv3_resnet101", "deeplabv3_resnet50",
                     "fcn_resnet101", "fcn_resnet50", "lraspp_mobilenet_v3_large"],
    "detection": ["fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
                  "fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fcos_resnet50_fpn",
                  "keypointrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2",
                  "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "ssd300_vgg16",
                  "ssdlite320_mobilenet_v3_large"],
    "video": ["mc3_18", "mvit_v1_b", "mvit_v2_s", "r2plus1d_18", "r3d_18", "s3d"],
    "optical_flow": ["raft_large", "raft_small"],
}

# The cheapest builder of each family: what CI runs.
FAMILY_CHEAPEST = {"segmentation": "lraspp_mobilenet_v3_large",
                   "detection": "fasterrcnn_mobilenet_v3_large_320_fpn",
                   "video": "r3d_18", "optical_flow": "raft_small"}

RAFT_FLOW_UPDATES = 2


def family_of(name):
    for family, names in FAMILY_MODELS.items():
        if name in names:
            return family
    if name in all_builders():
        return "classification"
    raise KeyError(f"not a torchvision 0.14 builder: {name}")


def build_family_model(name):
    """The model in eval mode, random weights (seed 0). Detection models keep every box: the score
    thresholds are 0 (random weights score low), and the R-CNN/RetinaNet/FCOS transforms resize to
    128..160 pixels instead of 800..1333 (SSD resizes to its fixed 300/320); the R-CNNs keep 200
    proposals and 50 detections per image (instead of 1000 and 100)."""
    family = family_of(name)
    if family == "classification":
        return build(name).eval()
    torch.manual_seed(0)
    if family == "segmentation":
        kwargs = {"weights": None, "weights_backbone": None}
        if not name.startswith("lraspp"):
            kwargs["aux_loss"] = True  # outputs 'out' and 'aux'
        model = getattr(tvm.segmentation, name)(**kwargs)
    elif family == "detection":
        kwargs = {"weights": None, "weights_backbone": None}
        if "rcnn" in name:
            kwargs.update(box_score_thresh=0.0, min_size=128, max_size=160,
                          # fewer proposals and detections: the heads dominate the time otherwise
                          rpn_post_nms_top_n_test=200, box_detections_per_img=50)
        elif name.startswith(("retinanet", "fcos")):
            kwargs.update(score_thresh=0.0, min_size=128, max_size=160)
        elif name == "ssd300_vgg16":
            kwargs.update(score_thresh=0.0)
        model = getattr(tvm.detection, name)(**kwargs)
        if name.startswith("ssdlite"):
            # its builder passes unknown kwargs on to mobilenet_v3_large too: set it afterwards
            model.score_thresh = 0.0
    elif family == "video":
        model = getattr(tvm.video, name)(weights=None)
    else:
        model = getattr(tvm.optical_flow, name)(weights=None)
    return model.eval()


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rand(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def family_inputs(name, variant=0):
    """(args, kwargs) of call number `variant`: 0 and 1 have the same shapes and new values,
    2 another shape (None where the model takes one shape only, or where it would be slow)."""
    family = family_of(name)
    seed = 100 + variant
    if family == "classification":
        if variant == 2:
            return None
        return (_randn(*input_for(name).shape, seed=seed),), {}
    if family == "segmentation":
        size = (64, 64) if variant < 2 else (48, 80)
        return (_randn(2, 3, *size, seed=seed),), {}
    if family == "detection":
        sizes = [(128, 160), (128, 160)] if variant < 2 else [(96, 128), (128, 112)]
        return ([_rand(3, h, w, seed=seed + i) for i, (h, w) in enumerate(sizes)],), {}
    if family == "video":
        if name.startswith("mvit"):
            if variant == 2:
                return None  # positional embeddings fix the clip size
            # the builders fix spatial_size=(224, 224), temporal_size=16 (no kwarg can change it)
            return (_randn(1, 3, 16, 224, 224, seed=seed),), {}
        if name == "s3d":
            if variant == 2:
                return None  # its last pooling needs at least 16x224x224: slow
            return (_randn(1, 3, 16, 224, 224, seed=seed),), {}
        size = (4, 32, 32) if variant < 2 else (2, 48, 40)
        return (_randn(1, 3, *size, seed=seed),), {}
    size = (64, 64) if variant < 2 else (64, 96)  # multiples of 8; 1/8 of it pooled 3 times
    return (_rand(1, 3, *size, seed=seed) * 2 - 1, _rand(1, 3, *size, seed=seed + 50) * 2 - 1), \
        {"num_flow_updates": RAFT_FLOW_UPDATES}


def backbone_input(name, variant=0):
    """The batched image tensor a detection backbone is called with (already transformed)."""
    size = {"ssd300_vgg16": (300, 300), "ssdlite320_mobilenet_v3_large": (320, 320)}.get(name, (128, 160))
    if variant == 2:
        return None
    return _randn(2, 3, *size, seed=200 + variant)
