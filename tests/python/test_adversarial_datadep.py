"""Adversarial pass (issue #7), category d: data-dependent Python values (torch.equal,
torch.allclose, bool(t), .any() in `if`, .item() arithmetic, .tolist() loops, len(t)), sizes
(torch.Size type, numel, returned sizes) and identity / storage facts (`x.add_(1) is x`,
data_ptr, storage_offset)."""
import pytest
import torch
import torch.nn as nn

from adversarial_harness import check_case, params, registry

CASES, case = registry()


@case
def torch_equal_in_if():
    def fn(a, b):
        if torch.equal(a, b):
            return a * 2, "same"
        return a - b, "diff"
    a = torch.arange(3.0)
    bs = [a.clone(), a + 1, a.clone()]
    return fn, lambda f, i: f(a, bs[i])


@case
def torch_allclose_in_if():
    def fn(a, b):
        close = torch.allclose(a, b, atol=1e-3)
        return (a + b) / 2 if close else a, close
    a = torch.ones(3)
    bs = [a + 1e-5, a + 1, a - 1e-4]
    return fn, lambda f, i: f(a, bs[i])


@case
def bool_of_any_and_all():
    def fn(x):
        flags = []
        if bool(x.any()):
            flags.append("any")
        if x.all():
            flags.append("all")
        if not (x == 0).all():
            flags.append("notzero")
        return flags
    xs = [torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([0, 0])]
    return fn, lambda f, i: f(xs[i])


@case
def if_sum_greater_than_zero():
    def fn(x):
        if x.sum() > 0:
            y = x.relu()
        elif x.sum() == 0:
            y = x + 1
        else:
            y = -x
        return y
    xs = [torch.tensor([1.0, -0.5]), torch.tensor([0.0, 0.0]), torch.tensor([-1.0, -2.0])]
    return fn, lambda f, i: f(xs[i])


@case
def item_in_arithmetic_and_types():
    def fn(x, n):
        a = x.sum().item()
        b = n.item()
        return a * 2 + b, type(a), type(b), x * b
    xs = [torch.tensor([1.5, 2.0]), torch.tensor([1.0, 2.0]), torch.tensor([3.0])]
    ns = [torch.tensor(3), torch.tensor(3), torch.tensor(4)]
    return fn, lambda f, i: f(xs[i], ns[i])


@case
def tolist_loop_builds_python_values():
    def fn(boxes, labels):
        out = []
        for (x1, y1, x2, y2), lab in zip(boxes.tolist(), labels.tolist()):
            if x2 - x1 > 1:
                out.append((lab, round((x2 - x1) * (y2 - y1), 3)))
        return out
    boxes = torch.tensor([[0.0, 0.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.0], [0.0, 1.0, 4.0, 2.0]])
    labels = torch.tensor([3, 1, 2])
    return fn, lambda f, i: f(boxes[i:], labels[i:])


@case
def len_of_tensor():
    def fn(x):
        n = len(x)
        return x[n // 2], n, [len(t) for t in x[:2]]
    xs = [torch.randn(4, 3), torch.randn(5, 2), torch.randn(4, 3)]
    return fn, lambda f, i: f(xs[i])


@case
def shape_is_torch_size_and_numel():
    def fn(x):
        s = x.shape
        z = x.size()
        return s, z, isinstance(s, torch.Size), type(z[0]), x.numel(), z.numel(), s[1:], x.size(-1)
    xs = [torch.randn(2, 3), torch.randn(2, 3), torch.randn(4, 1, 2)]
    return fn, lambda f, i: f(xs[i])


@case
def inplace_returns_self_identity():
    def fn(x):
        y = x.add_(1)
        z = y.mul_(2).clamp_(max=5)
        return y is x, z is x, x

    def drive(f, i):
        x = torch.arange(3.0) + i
        r = f(x)
        return r, x
    return fn, drive


@case
def data_ptr_and_storage_offset():
    def fn(x):
        v = x.reshape(-1)
        s = x[1:]
        return v.data_ptr() == x.data_ptr(), s.storage_offset(), x.t().is_contiguous(), s.stride()
    xs = [torch.randn(3, 4), torch.randn(3, 4).t(), torch.randn(5, 2)]
    return fn, lambda f, i: f(xs[i])


@case
def truthiness_of_one_element_tensor():
    def fn(flag, x):
        if flag:
            return x + 1
        return x - 1
    flags = [torch.tensor(True), torch.tensor(False), torch.tensor([1])]
    x = torch.zeros(2)
    return fn, lambda f, i: f(flags[i], x)


@case
def int_of_argmax_indexes_list():
    names = ["cat", "dog", "bird"]

    def fn(logits):
        k = int(logits.argmax())
        return names[k], logits[k], k
    xs = [torch.tensor([0.1, 0.9, 0.0]), torch.tensor([2.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 3.0])]
    return fn, lambda f, i: f(xs[i])


@case
def while_norm_loop():
    def fn(x):
        n = 0
        while x.norm() > 1:
            x = x / 2
            n += 1
        return x, n
    xs = [torch.tensor([3.0, 4.0]), torch.tensor([0.1]), torch.tensor([30.0, 40.0])]
    return fn, lambda f, i: f(xs[i])


@case
def max_of_tolist():
    def fn(lengths, x):
        L = max(lengths.tolist())
        return x[:, :L], L
    x = torch.randn(2, 10)
    ls = [torch.tensor([3, 5]), torch.tensor([7, 2]), torch.tensor([5, 3])]
    return fn, lambda f, i: f(ls[i], x)


@case
def empty_batch_early_return():
    def fn(x):
        if x.shape[0] == 0:
            return x.new_zeros((0, 4)), "empty"
        return x @ torch.ones(3, 4), "full"
    xs = [torch.randn(2, 3), torch.randn(0, 3), torch.randn(2, 3)]
    return fn, lambda f, i: f(xs[i])


@case
def is_contiguous_branch():
    def fn(x):
        if not x.is_contiguous():
            x = x.contiguous()
            tag = "made"
        else:
            tag = "was"
        return x.view(-1), tag, x.stride()
    base = torch.randn(3, 4)
    xs = [base, base.t(), base.t().contiguous()]
    return fn, lambda f, i: f(xs[i])


@case
def dtype_branch_half_vs_float():
    def fn(x):
        if x.dtype == torch.float16:
            x = x.float()
            tag = 1
        elif x.dtype in (torch.int64, torch.int32):
            x = x.to(torch.float64)
            tag = 2
        else:
            tag = 3
        return x * 2, tag
    xs = [torch.randn(2), torch.randn(2).half(), torch.arange(2)]
    return fn, lambda f, i: f(xs[i])


@case
def torch_size_arithmetic_for_view():
    def fn(x, heads=2):
        new_shape = x.size()[:-1] + (heads, x.size(-1) // heads)
        y = x.view(new_shape)
        return y.permute(0, 2, 1, 3), new_shape, type(new_shape)
    xs = [torch.randn(1, 3, 4), torch.randn(1, 3, 4), torch.randn(2, 2, 6)]
    return fn, lambda f, i: f(xs[i])


@case
def item_of_int_tensor_returned():
    def fn(x):
        return x.sum().item(), x.float().mean().item(), (x > 1).sum().item(), x.max().item() == 3
    xs = [torch.tensor([1, 2]), torch.tensor([3, 0]), torch.tensor([True, True])]
    return fn, lambda f, i: f(xs[i])


@case
def requires_grad_flag_branch():
    def fn(x):
        if x.requires_grad:
            return x * 2, x.is_leaf
        return x.detach() + 1, x.is_leaf
    xs = [torch.ones(2, requires_grad=True), torch.ones(2), torch.ones(2, requires_grad=True) * 3]
    return fn, lambda f, i: f(xs[i])


@case
def nonzero_count_drives_python_loop():
    def fn(mask, x):
        idx = mask.nonzero(as_tuple=True)[0]
        parts = []
        for j in idx.tolist():
            parts.append(x[j] * j)
        return torch.stack(parts) if parts else x.new_zeros(0), len(parts)
    x = torch.randn(4, 2)
    ms = [torch.tensor([1, 0, 1, 0]), torch.tensor([0, 0, 0, 0]), torch.tensor([1, 1, 1, 1])]
    return fn, lambda f, i: f(ms[i].bool(), x)


@case
def comparison_of_tensor_with_python_number_as_key():
    def fn(x):
        buckets = {True: [], False: []}
        for v in x:
            buckets[bool(v > 0)].append(v)
        return {k: len(v) for k, v in buckets.items()}
    xs = [torch.randn(5), torch.randn(3), -torch.ones(2)]
    return fn, lambda f, i: f(xs[i])


@case
def float_of_tensor_and_format():
    def fn(loss):
        v = float(loss)
        msg = f"loss={v:.3f}"
        return msg, v, int(loss * 10)
    xs = [torch.tensor(0.12345), torch.tensor(1.5), torch.tensor(-0.25)]
    return fn, lambda f, i: f(xs[i])


class EarlyExit(nn.Module):
    """Adaptive-depth pattern (e.g. DeeBERT / PABEE): stop when confident."""
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        self.exit_layer = None

    def forward(self, x):
        for j, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            if x.softmax(-1).max() > 0.5:
                self.exit_layer = j
                return x, j
        self.exit_layer = -1
        return x, -1


@case
def early_exit_loop_over_layers():
    m = EarlyExit()
    xs = [torch.randn(1, 4), torch.randn(1, 4) * 10, torch.randn(1, 4)]
    return m, lambda f, i: f(xs[i]), lambda: m.exit_layer


@case
def any_all_over_generators_of_tensor_bools():
    def fn(xs):
        return any(t.sum() > 0 for t in xs), all(t.sum() > 0 for t in xs), any([t.max() > 1 for t in xs])
    P, N = torch.ones(2), -torch.ones(2)
    sets = [[N, N], [N, P], [P, P * 2]]
    return fn, lambda f, i: f(sets[i])


@case
def builtin_max_min_sorted_on_tensors():
    def fn(xs):
        return max(xs), min(xs, key=lambda t: t.sum()), sorted(xs), xs[0] in xs[1:]
    sets = [[torch.tensor(1.0), torch.tensor(3.0)], [torch.tensor(5.0), torch.tensor(3.0)],
            [torch.tensor(2.0), torch.tensor(2.0)]]
    return fn, lambda f, i: f(sets[i])


@case
def tensor_and_or_and_chained_compare():
    def fn(x, y):
        a = x and y
        b = (x or y) * 2
        c = 0 < x.sum() < 5
        return a, b, c, (not x)
    args = [(torch.tensor(0.0), torch.tensor(5.0)), (torch.tensor(2.0), torch.tensor(5.0)),
            (torch.tensor(9.0), torch.tensor(0.0))]
    return fn, lambda f, i: f(*args[i])


@case
def tensor_equals_python_number_branch():
    def fn(x):
        if x == 3:
            return "three", x + 1
        return "other", x - 1
    xs = [torch.tensor(3), torch.tensor(4), torch.tensor(3)]
    return fn, lambda f, i: f(xs[i])


XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_datadep(case):
    check_case(case)
