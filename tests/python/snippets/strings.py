"""Names built from strings: str.join, %, format and f-strings over constants."""
import torch
import torch.nn as nn

from . import snippet


class Stages(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, "layer%d" % (i + 1), nn.Linear(3, 3))
            setattr(self, "norm_{}".format(i), nn.LayerNorm(3))

    def forward(self, x):
        for i in range(3):
            x = getattr(self, "layer%d" % (i + 1))(x)
            x = getattr(self, "norm_{}".format(i))(x)
        return x


@snippet
def getattr_layer_percent_format():
    return Stages(), (torch.randn(2, 3),)


@snippet
def fstring_keys_in_dict():
    def f(x):
        outs = {}
        for i in range(3):
            outs[f"stage{i}"] = x * i
        return outs["stage2"] + outs["stage1"]
    return f, (torch.randn(2),)


@snippet
def join_names_for_lookup():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleDict({"enc_0": nn.Linear(2, 2), "enc_1": nn.Linear(2, 2)})

        def forward(self, x):
            for i in range(2):
                x = self.blocks["_".join(["enc", str(i)])](x)
            return x
    return Net(), (torch.randn(3, 2),)


@snippet
def format_with_kwargs_key():
    def f(feats):
        return feats["{name}_{lvl}".format(name="p", lvl=3)] * 2
    return f, ({"p_3": torch.randn(2)},)


@snippet
def str_methods_on_mode():
    def f(x, mode="Bilinear"):
        if mode.lower().startswith("bi"):
            return torch.nn.functional.interpolate(x, scale_factor=2, mode=mode.lower(), align_corners=False)
        return x
    return f, (torch.randn(1, 1, 3, 3),)


@snippet
def percent_tuple_format_key():
    def f(d):
        return d["%s.%d" % ("w", 1)] + 1
    return f, ({"w.1": torch.randn(2)},)


@snippet
def split_string_config():
    def f(x, spec="2,3"):
        a, b = (int(s) for s in spec.split(","))
        return x.repeat(a, b)
    return f, (torch.randn(1, 2),)


@snippet
def string_concat_in_loop():
    def f(x):
        key = ""
        for ch in ["a", "b"]:
            key = key + ch
        return x * len(key)
    return f, (torch.randn(2),)


@snippet
def upper_and_replace():
    def f(x, act="leaky-relu"):
        if act.replace("-", "_").upper() == "LEAKY_RELU":
            return torch.nn.functional.leaky_relu(x, 0.1)
        return x
    return f, (torch.randn(4),)
