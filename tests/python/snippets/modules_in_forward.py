"""torch.nn modules built inside forward and called at once (nn.Softmax(dim=1)(x))."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import snippet


@snippet
def attention_softmax_module():
    class Attn(nn.Module):
        def __init__(self, d=8):
            super().__init__()
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)

        def forward(self, x):
            scores = torch.bmm(self.q(x), self.k(x).transpose(1, 2)) / 8 ** 0.5
            attn = nn.Softmax(dim=-1)(scores)
            return torch.bmm(attn, x)
    return Attn(), (torch.randn(2, 5, 8),)


@snippet
def relu_module_inline():
    conv = nn.Conv2d(3, 4, 3)
    def f(x):
        return nn.ReLU()(conv(x))
    return f, (torch.randn(1, 3, 6, 6),)


@snippet
def relu_inplace_module_inline():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            out = self.fc(x)
            out = nn.ReLU(inplace=True)(out)
            return out
    return Block(), (torch.randn(3, 4),)


@snippet
def upsample_bilinear_module():
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 2, 1)

        def forward(self, x):
            x = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)(x)
            return self.conv(x)
    return Decoder(), (torch.randn(1, 4, 5, 5),)


@snippet
def upsample_to_size_of_skip():
    def f(x, skip):
        up = nn.Upsample(size=skip.shape[2:], mode="nearest")(x)
        return torch.cat([up, skip], dim=1)
    return f, (torch.randn(1, 2, 4, 4), torch.randn(1, 3, 8, 8))


@snippet
def maxpool_module_inline():
    def f(x):
        return nn.MaxPool2d(kernel_size=2, stride=2)(x).flatten(1)
    return f, (torch.randn(2, 3, 8, 8),)


@snippet
def sigmoid_tanh_modules():
    class Gate(nn.Module):
        def forward(self, a, b):
            return nn.Sigmoid()(a) * nn.Tanh()(b)
    return Gate(), (torch.randn(3, 4), torch.randn(3, 4))


@snippet
def leaky_relu_with_slope():
    def f(x, slope=0.2):
        return nn.LeakyReLU(slope, inplace=False)(x * 3)
    return f, (torch.randn(10),)


@snippet
def log_softmax_module_classifier():
    fc = nn.Linear(10, 5)
    def f(x):
        return nn.LogSoftmax(dim=1)(fc(x))
    return f, (torch.randn(4, 10),)


@snippet
def cross_entropy_loss_made_in_step():
    model = nn.Linear(6, 3)
    def step(x, y):
        logits = model(x)
        loss = nn.CrossEntropyLoss()(logits, y)
        return loss
    return step, (torch.randn(5, 6), torch.tensor([0, 2, 1, 1, 0]))


@snippet
def mse_loss_reduction_sum():
    def f(pred, target):
        return nn.MSELoss(reduction="sum")(pred, target) / pred.shape[0]
    return f, (torch.randn(4, 3), torch.randn(4, 3))


@snippet
def bce_with_logits_pos_weight_const():
    def f(logits, labels):
        criterion = nn.BCEWithLogitsLoss()
        return criterion(logits, labels)
    return f, (torch.randn(6), torch.rand(6).round())


@snippet
def adaptive_pool_and_flatten_modules():
    def f(x):
        x = nn.AdaptiveAvgPool2d((1, 1))(x)
        return nn.Flatten()(x)
    return f, (torch.randn(2, 5, 7, 7),)


@snippet
def pixel_shuffle_module():
    conv = nn.Conv2d(2, 8, 3, padding=1)
    def f(x):
        return nn.PixelShuffle(2)(conv(x))
    return f, (torch.randn(1, 2, 4, 4),)


@snippet
def zero_pad_then_conv():
    conv = nn.Conv2d(1, 1, 3)
    def f(x):
        return conv(nn.ZeroPad2d((1, 1, 1, 1))(x))
    return f, (torch.randn(1, 1, 5, 5),)


@snippet
def gelu_softplus_modules():
    def f(x):
        return nn.GELU()(x) + nn.Softplus(beta=2)(x)
    return f, (torch.randn(8),)


@snippet
def cosine_similarity_module():
    def f(a, b):
        return nn.CosineSimilarity(dim=1, eps=1e-6)(a, b)
    return f, (torch.randn(3, 5), torch.randn(3, 5))


@snippet
def dropout_module_eval_free():
    def f(x):
        return nn.Dropout(p=0.0)(x) + nn.Identity()(x)
    return f, (torch.randn(4),)


@snippet
def activation_chosen_by_name():
    acts = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}
    class MLP(nn.Module):
        def __init__(self, act="gelu"):
            super().__init__()
            self.act = act
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return acts[self.act]()(self.fc(x))
    return MLP(), (torch.randn(2, 4),)


@snippet
def softmax2d_module():
    def f(x):
        return nn.Softmax2d()(x).sum(1)
    return f, (torch.randn(1, 3, 4, 4),)


@snippet(breaks="creating a module with parameters")
def linear_made_in_forward():
    def f(x):
        return nn.Linear(x.shape[-1], 2)(x)
    return f, (torch.randn(3, 4),)


@snippet(breaks="creating a module with parameters (BatchNorm1d)")
def batchnorm_made_in_forward():
    def f(x):
        return nn.BatchNorm1d(x.shape[1])(x)
    return f, (torch.randn(4, 3),)
