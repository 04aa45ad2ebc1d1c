"""Modules with forward hooks and forward pre-hooks (feature extraction, input checks)."""
import torch
import torch.nn as nn

from . import snippet


def _net():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


@snippet
def forward_hook_scales_output():
    net = _net()
    net[0].register_forward_hook(lambda mod, inp, out: out * 0.5)
    return net, (torch.randn(2, 4),)


@snippet
def forward_hook_returns_none():
    net = _net()
    def hook(module, inputs, output):
        return None
    net[2].register_forward_hook(hook)
    return net, (torch.randn(2, 4),)


@snippet
def forward_pre_hook_normalises_input():
    net = _net()
    def pre(module, inputs):
        (x,) = inputs
        return (x - x.mean(dim=-1, keepdim=True),)
    net[0].register_forward_pre_hook(pre)
    return net, (torch.randn(3, 4),)


@snippet
def pre_hook_returning_a_tensor():
    net = _net()
    net[2].register_forward_pre_hook(lambda m, inp: inp[0] * 2)
    return net, (torch.randn(3, 4),)


@snippet
def feature_extraction_hook_into_dict():
    net = _net()
    features = {}
    def get_activation(name):
        def hook(model, input, output):
            features[name] = output.detach()
        return hook
    net[1].register_forward_hook(get_activation("relu"))
    def f(x):
        out = net(x)
        return out, features["relu"]
    return f, (torch.randn(2, 4),)


@snippet
def hook_on_top_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()
    net = Net()
    net.fc.register_forward_hook(lambda m, i, o: o + 1)
    return net, (torch.randn(2, 4),)


@snippet
def two_hooks_in_order():
    net = _net()
    net[0].register_forward_hook(lambda m, i, o: o * 2)
    net[0].register_forward_hook(lambda m, i, o: o - 1)
    return net, (torch.randn(2, 4),)


@snippet
def hook_reading_module_attribute():
    class Scaled(nn.Linear):
        def __init__(self):
            super().__init__(4, 4)
            self.scale = 3.0
    lin = Scaled()
    lin.register_forward_hook(lambda m, i, o: o * m.scale)
    return nn.Sequential(lin, nn.Tanh()), (torch.randn(2, 4),)


@snippet
def hook_appending_to_list():
    net = _net()
    outs = []
    net[0].register_forward_hook(lambda m, i, o: outs.append(o.shape[-1]))
    def f(x):
        return net(x), len(outs)
    return f, (torch.randn(2, 4),)


@snippet
def pre_hook_with_kwargs_free_module():
    conv = nn.Conv2d(3, 3, 1)
    conv.register_forward_pre_hook(lambda m, inp: (inp[0].clamp(-1, 1),))
    return nn.Sequential(conv, nn.ReLU()), (torch.randn(1, 3, 4, 4),)


@snippet(breaks="call of a module with backward hooks")
def backward_hook_registered():
    net = _net()
    net[0].register_full_backward_hook(lambda m, gi, go: None)
    return net, (torch.randn(2, 4),)


@snippet(breaks="call to print()")
def hook_that_prints():
    net = _net()
    net[0].register_forward_hook(lambda m, i, o: print(o.shape))
    return net, (torch.randn(2, 4),)


@snippet(breaks="Tensor.register_hook() inside the compiled function")
def gradient_hook_in_forward():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if h.requires_grad:
                h.register_hook(lambda grad: grad.clamp(-1.0, 1.0))  # gradient clipping per activation
            return h.tanh()

    return Block(), (torch.randn(2, 4),)


@snippet(breaks="call of a module with backward hooks")
def old_style_backward_hook_for_saliency():
    net = _net()
    grads = []
    net[0].register_backward_hook(lambda m, gin, gout: grads.append(gout[0]))
    return net, (torch.randn(2, 4),)
