"""torch.autograd.Variable, legacy constructors and x.new(...), tensors and sizes from Python
values, and Python values of tensors made from constants (old and new tutorials' code)."""
import torch
import torch.nn as nn
from torch.autograd import Variable

from . import snippet


@snippet
def variable_wrap_input():
    fc = nn.Linear(3, 2)
    def f(x):
        x = Variable(x)
        return fc(x)
    return f, (torch.randn(4, 3),)


@snippet
def variable_zeros_hidden_state():
    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden_size = 6
            self.rnn = nn.GRU(4, 6, batch_first=True)

        def init_hidden(self, bsz):
            return Variable(torch.zeros(1, bsz, self.hidden_size))

        def forward(self, x):
            h0 = self.init_hidden(x.size(0))
            out, h = self.rnn(x, h0)
            return out[:, -1]
    return RNNModel(), (torch.randn(2, 3, 4),)


@snippet
def variable_requires_grad_false_of_data():
    def f(x, target):
        target = Variable(target.data, requires_grad=False)
        return ((x - target) ** 2).mean()
    return f, (torch.randn(5), torch.randn(5))


@snippet
def variable_new_zeros_h0():
    lstm = nn.LSTM(3, 5)
    def f(x):
        h0 = Variable(x.data.new(1, x.size(1), 5).zero_())
        c0 = Variable(x.data.new(1, x.size(1), 5).zero_())
        out, _ = lstm(x, (h0, c0))
        return out
    return f, (torch.randn(4, 2, 3),)


@snippet
def variable_positional_requires_grad():
    def f(x):
        w = Variable(torch.ones(3), True)
        return x * w, w.requires_grad
    return f, (torch.randn(3),)


@snippet
def float_tensor_zero_buffer():
    def f(x):
        buf = torch.FloatTensor(x.size(0), 4).zero_()
        return torch.cat([x, buf], dim=1)
    return f, (torch.randn(3, 2),)


@snippet
def long_tensor_from_list_index():
    def f(x):
        idx = torch.LongTensor([0, 2])
        return x.index_select(1, idx)
    return f, (torch.randn(3, 4),)


@snippet
def tensor_from_mean_std_lists():
    def f(img):
        mean = torch.Tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.Tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return (img - mean) / std
    return f, (torch.rand(2, 3, 4, 4),)


@snippet
def new_of_size_fill():
    def f(x):
        ones = x.new(x.size()).fill_(1)
        return x + ones
    return f, (torch.randn(2, 2),)


@snippet
def new_with_ints_zero():
    def f(x):
        pad = x.new(x.size(0), 1).zero_()
        return torch.cat([pad, x], 1)
    return f, (torch.randn(3, 3),)


@snippet
def new_from_list_data():
    def f(x):
        w = x.new([0.25, 0.5, 0.25])
        return (x * w).sum(-1)
    return f, (torch.randn(2, 3),)


@snippet
def new_tensor_and_new_zeros():
    def f(x):
        a = x.new_tensor([1.0, 2.0])
        b = x.new_zeros(x.shape[0], 2)
        return b + a, x.new_full((2,), 3.0), x.new_ones(2)
    return f, (torch.randn(4, 2),)


@snippet
def torch_size_from_list():
    def f(x):
        b, c = x.shape[:2]
        size = torch.Size([b, c, 1, 1])
        return x.mean((2, 3)).view(size)
    return f, (torch.randn(2, 3, 4, 4),)


@snippet
def torch_tensor_of_shape_values():
    def f(x):
        hw = torch.tensor([x.shape[2], x.shape[3]], dtype=torch.float32)
        return x.flatten(2).sum(-1) / hw.prod()
    return f, (torch.randn(1, 2, 3, 5),)


@snippet
def sqrt_dk_as_tensor():
    def f(q, k):
        d_k = torch.tensor(q.size(-1), dtype=torch.float32)
        return q @ k.transpose(-2, -1) / torch.sqrt(d_k)
    return f, (torch.randn(2, 4, 8), torch.randn(2, 4, 8))


@snippet
def item_of_tensor_made_from_size():
    def f(x):
        n = torch.tensor(x.shape[0]).item()
        return x.sum(0) / n
    return f, (torch.randn(6, 2),)


@snippet
def int_of_tensor_made_from_size():
    def f(x):
        half = int(torch.tensor(x.shape[1]) // 2)
        return x[:, :half] - x[:, half:]
    return f, (torch.randn(2, 8),)


@snippet
def tolist_of_arange():
    def f(x):
        out = []
        for i in torch.arange(3).tolist():
            out.append(x * i)
        return torch.stack(out)
    return f, (torch.randn(2),)


@snippet
def float_of_scalar_tensor_constant():
    def f(x):
        temperature = float(torch.tensor(0.07))
        return x / temperature
    return f, (torch.randn(4),)


@snippet(breaks="Tensor.item() needs the tensor's data")
def item_of_input_data():
    def f(x):
        return x / x.max().item()
    return f, (torch.randn(4),)


@snippet(breaks="int() of a tensor")
def int_of_data_dependent_tensor():
    def f(x):
        k = int(x.sum() > 0)
        return x * k
    return f, (torch.randn(4),)


@snippet
def double_tensor_and_byte_mask():
    def f(x):
        m = torch.ByteTensor([1, 0, 1]).bool()
        w = torch.DoubleTensor([0.5, 1.0, 2.0])
        return x.masked_fill(~m, 0.0) * w.float()
    return f, (torch.randn(2, 3),)


@snippet
def tensor_type_legacy_cast():
    def f(x):
        return x.type(torch.FloatTensor) * 2
    return f, (torch.randn(3, dtype=torch.float64),)
