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
