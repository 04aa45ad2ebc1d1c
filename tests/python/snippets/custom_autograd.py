"""torch.autograd.Function subclasses, called the ways projects call them."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function

from . import snippet


class GradReverse(Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


def grad_reverse(x, lambd=1.0):
    return GradReverse.apply(x, lambd)


class RoundSTE(Function):
    @staticmethod
    def forward(ctx, input):
        return torch.round(input)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.clone()


round_ste = RoundSTE.apply


class SwishImplementation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, i):
        result = i * torch.sigmoid(i)
        ctx.save_for_backward(i)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        i = ctx.saved_tensors[0]
        sigmoid_i = torch.sigmoid(i)
        return grad_output * (sigmoid_i * (1 + i * (1 - sigmoid_i)))


class MemoryEfficientSwish(nn.Module):
    def forward(self, x):
        return SwishImplementation.apply(x)


class BinaryQuantize(Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        out = torch.sign(input)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input.abs() > 1] = 0
        return grad_input


class ClampWithGrad(Function):
    @staticmethod
    def forward(ctx, input, min, max):
        ctx.min = min
        ctx.max = max
        ctx.save_for_backward(input)
        return input.clamp(min, max)

    @staticmethod
    def backward(ctx, grad_in):
        input, = ctx.saved_tensors
        return grad_in * (grad_in * (input - input.clamp(ctx.min, ctx.max)) >= 0), None, None


class ScaleGrad(Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class MishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul(torch.tanh(F.softplus(x)))

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        sx = torch.sigmoid(x)
        fx = F.softplus(x).tanh()
        return grad_output * (fx + x * sx * (1 - fx * fx))


class LinearFunction(Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias


class MyLinear(nn.Module):
    def __init__(self, input_features, output_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(output_features, input_features) * 0.1)
        self.bias = nn.Parameter(torch.zeros(output_features))

    def forward(self, input):
        return LinearFunction.apply(input, self.weight, self.bias)


class TopKMask(Function):
    @staticmethod
    def forward(ctx, scores, k):
        idx = scores.topk(k, dim=-1).indices
        mask = torch.zeros_like(scores).scatter_(-1, idx, 1.0)
        ctx.mark_non_differentiable(idx)
        return mask, idx

    @staticmethod
    def backward(ctx, g, gi):
        return g, None


class PrintingFn(Function):
    @staticmethod
    def forward(ctx, x):
        print("shape", x.shape)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class ItemFn(Function):
    @staticmethod
    def forward(ctx, x):
        m = x.abs().max().item()
        return x / (m + 1e-6)

    @staticmethod
    def backward(ctx, g):
        return g


@snippet
def dann_domain_classifier():
    class DomainHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 2)

        def forward(self, feat, alpha=0.5):
            reverse_feature = GradReverse.apply(feat, alpha)
            return self.fc(reverse_feature)
    return DomainHead(), (torch.randn(4, 8, requires_grad=True),)


@snippet
def grad_reverse_helper():
    fc = nn.Linear(6, 3)
    def f(x):
        return fc(grad_reverse(x, 0.1)).log_softmax(-1)
    return f, (torch.randn(5, 6),)


@snippet
def ste_quantizer():
    class Quant(nn.Module):
        def __init__(self, bits=4):
            super().__init__()
            self.scale = 2 ** bits - 1

        def forward(self, x):
            x = torch.clamp(x, 0, 1)
            return round_ste(x * self.scale) / self.scale
    return Quant(), (torch.rand(3, 5, requires_grad=True),)


@snippet
def efficientnet_swish():
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), MemoryEfficientSwish())
    return m.eval(), (torch.randn(1, 3, 8, 8),)


@snippet
def binary_net_activation():
    class BinaryConv(nn.Conv2d):
        def forward(self, input):
            bw = BinaryQuantize.apply(self.weight)
            ba = BinaryQuantize.apply(input)
            return F.conv2d(ba, bw, self.bias, self.stride, self.padding)
    return BinaryConv(4, 4, 3, padding=1), (torch.randn(1, 4, 6, 6),)


@snippet
def clamp_with_passthrough_grad():
    def f(x):
        return ClampWithGrad.apply(x, -1.0, 1.0) * 2
    return f, (torch.randn(10, requires_grad=True),)


@snippet
def scale_gradient_of_branch():
    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x) + ScaleGrad.apply(self.b(x), 0.1)
    return Branch(), (torch.randn(2, 4),)


@snippet
def mish_autograd():
    class Mish(nn.Module):
        def forward(self, x):
            return MishFn.apply(x)
    return nn.Sequential(nn.Linear(5, 5), Mish()), (torch.randn(3, 5),)


@snippet
def tutorial_linear_function():
    return MyLinear(6, 4), (torch.randn(3, 6),)


@snippet
def topk_mask_two_outputs():
    def f(scores):
        mask, idx = TopKMask.apply(scores, 2)
        return scores * mask, idx
    return f, (torch.randn(4, 6),)


@snippet
def autograd_fn_under_no_grad():
    def f(x):
        with torch.no_grad():
            q = RoundSTE.apply(x * 4) / 4
        return x + q
    return f, (torch.randn(7),)


@snippet
def autograd_fn_in_loop_over_layers():
    layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    def f(x):
        for i, layer in enumerate(layers):
            x = layer(x)
            if i < len(layers) - 1:
                x = SwishImplementation.apply(x)
        return x
    return f, (torch.randn(2, 4),)


@snippet(breaks="call to print()")
def autograd_fn_that_prints():
    def f(x):
        return PrintingFn.apply(x) + 1
    return f, (torch.randn(3),)


@snippet(breaks="Tensor.item() needs the tensor's data")
def autograd_fn_reading_item():
    def f(x):
        return ItemFn.apply(x).sum(0)
    return f, (torch.randn(3, 3),)


@snippet
def autograd_fn_kw_default_bias():
    w = torch.randn(3, 5)
    def f(x):
        return LinearFunction.apply(x, w)
    return f, (torch.randn(2, 5),)


@snippet
def autograd_fn_two_calls_shared():
    def f(x, y):
        return RoundSTE.apply(x) + RoundSTE.apply(y * 3)
    return f, (torch.randn(4), torch.randn(4))
