"""Adversarial pass, session 8: training steps and numerics through the fused and aot_eager
backends, written the way people write them (optimizer.step() inside and outside the compiled
function, zero_grad with and without set_to_none, gradient accumulation, loss scaling,
clip_grad_norm_, tied and frozen weights, detach / no_grad in forward, a custom autograd.Function,
torch.utils.checkpoint, BatchNorm running statistics, losses with every reduction, mixed dtypes,
input gradients, outputs that alias, autograd errors) and numerics at the edges (huge, denormal,
inf and NaN values through reductions, integer wrap-around, NaN comparisons, fmod / remainder
signs, bool arithmetic). Each case runs through both backends and is compared call by call with
eager by adversarial_harness.fp_check:
- aot_eager: bitwise (results, gradients, parameters, optimizer state, buffers);
- fused: floating values within the kernels' tolerance of a float64 reference run of the same
  program, integer / bool / Python values exactly;
- exceptions: the same type and message as eager.
Cases failing today are strict xfails (XFAIL below) naming the cause."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from adversarial_harness import fp_check, fp_params, fp_registry, randn

# A case that dynamo cannot compile at all (it warns and runs eagerly) fails instead of passing
# trivially.
pytestmark = pytest.mark.filterwarnings("error:dynamo. could not compile")
CASES, case = fp_registry()
BACKENDS = ("aot_eager", "fused")


def _grads(m):
    return [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def _state(opt):
    return [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in st.items()}
            for st in opt.state.values()]


def _mlp(d_in=6, d_h=12, d_out=3):
    return nn.Sequential(nn.Linear(d_in, d_h), nn.Tanh(), nn.Linear(d_h, d_out))


# ----------------------------------------------------------------------------------------------
# Training steps


@case(calls=3)
def sgd_step_and_zero_grad_set_to_none_inside_the_compiled_step():
    m = _mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def drive(f, i, c):
        return f(c(randn(5, 6)), c(randn(5, 3))), _params(m), _state(opt), _grads(m)
    return step, drive, None, (m,)


@case(calls=3)
def adam_amsgrad_step_outside_and_zero_grad_keeping_the_grad_tensors():
    m = _mlp()
    opt = torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True, weight_decay=0.1)
    first = {}

    def drive(f, i, c):
        opt.zero_grad(set_to_none=False)
        loss = F.smooth_l1_loss(f(c(randn(4, 6))), c(randn(4, 3)), beta=0.5)
        loss.backward()
        if i == 0:
            first.update({k: p.grad for k, p in m.named_parameters()})
        same_grad_objects = [first[k] is p.grad for k, p in m.named_parameters()]
        opt.step()
        return loss.detach(), same_grad_objects, _params(m), _state(opt)
    return m, drive


@case(calls=4)
def gradient_accumulation_over_two_calls_with_loss_divided_by_steps():
    m = _mlp()
    opt = torch.optim.RMSprop(m.parameters(), lr=0.01, momentum=0.5, centered=True)

    def fwd_bwd(x, t):
        loss = F.cross_entropy(m(x), t) / 2
        loss.backward()
        return loss.detach()

    def drive(f, i, c):
        loss = f(c(randn(3, 6)), torch.randint(0, 3, (3,)))
        g = _grads(m)
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()
        return loss, g, _params(m), _state(opt)
    return fwd_bwd, drive, None, (m,)


@case(calls=3)
def static_loss_scaling_unscale_and_clip_grad_norm_inside_the_step():
    m = _mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    scale = 1024.0

    def step(x, y):
        loss = F.l1_loss(m(x), y)
        (loss * scale).backward()
        for p in m.parameters():
            p.grad.div_(scale)
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm

    def drive(f, i, c):
        return f(c(randn(5, 6)), c(randn(5, 3))), _params(m)
    return step, drive, None, (m,)


@case()
def clip_grad_norm_inf_and_clip_grad_value_outside_the_compiled_function():
    m = _mlp()

    def drive(f, i, c):
        out = f(c(randn(4, 6)) * 10)
        out.pow(2).sum().backward()
        n_inf = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0, norm_type="inf")
        torch.nn.utils.clip_grad_value_(m.parameters(), 0.01)
        g = _grads(m)
        m.zero_grad()
        return out.detach(), n_inf, g
    return m, drive


class TiedAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 4)
        self.dec_bias = nn.Parameter(torch.zeros(8))
        self.shared = nn.Linear(4, 4)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        h = self.shared(torch.tanh(self.shared(h)))  # the same Linear twice
        return F.linear(h, self.enc.weight.t(), self.dec_bias)  # the encoder's weight again


@case(calls=3)
def tied_weights_one_parameter_used_twice_and_transposed():
    m = TiedAutoencoder()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)

    def drive(f, i, c):
        x = c(randn(5, 8))
        loss = F.mse_loss(f(x), x)
        opt.zero_grad()
        loss.backward()
        g = _grads(m)
        opt.step()
        return loss.detach(), g, _params(m)
    return m, drive


@case(calls=3)
def frozen_first_layer_and_frozen_bias_get_no_gradient():
    m = nn.Sequential(nn.Linear(6, 10), nn.GELU(), nn.Linear(10, 10), nn.SiLU(), nn.Linear(10, 2))
    for p in m[0].parameters():
        p.requires_grad_(False)
    m[2].bias.requires_grad_(False)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)

    def drive(f, i, c):
        out = f(c(randn(4, 6)))
        out.logsumexp(-1).mean().backward()
        g = _grads(m)
        opt.step()
        opt.zero_grad()
        return out.detach(), g, _params(m)
    return m, drive


@case(calls=3)
def layer_frozen_between_calls_recompiles_or_guards():
    m = _mlp()

    def drive(f, i, c):
        if i == 1:
            m[0].weight.requires_grad_(False)
        if i == 2:
            m[0].weight.requires_grad_(True)
        out = f(c(randn(3, 6)))
        out.sum().backward()
        g = _grads(m)
        m.zero_grad(set_to_none=True)
        return out, g
    return m, drive


class StopGradHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.head = nn.Linear(8, 2)
        self.target = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        with torch.no_grad():
            t = self.target(h)  # no gradient to target nor to body through it
        p = self.head(h.detach()) + self.head(h)  # head twice, one branch stops at h
        return p, t, (p - t).pow(2).mean()


@case()
def detach_and_no_grad_regions_inside_forward():
    m = StopGradHead()

    def drive(f, i, c):
        p, t, loss = f(c(randn(5, 6)))
        loss.backward()
        g = _grads(m)
        m.zero_grad()
        return p, t, loss, t.requires_grad, g
    return m, drive


class ScaledSquare(torch.autograd.Function):
    """A custom Function with saved tensors, a non-tensor argument and a straight-through grad."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g * ctx.scale, None


@case()
def custom_autograd_function_in_a_model():
    lin = nn.Linear(5, 5)

    def fn(x):
        return ScaledSquare.apply(lin(x), 0.5).sum(-1)

    def drive(f, i, c):
        x = c(randn(3, 5)).requires_grad_()
        y = f(x)
        y.sum().backward()
        g = (x.grad, lin.weight.grad.clone(), lin.bias.grad.clone())
        lin.zero_grad()
        return y, g
    return fn, drive, None, (lin,)


class CheckpointedBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(6, 6), nn.GELU())
        self.b = nn.Sequential(nn.Linear(6, 6), nn.Tanh())

    def forward(self, x):
        x = torch.utils.checkpoint.checkpoint(self.a, x, use_reentrant=False)
        return self.b(x) + x


@case()
def torch_utils_checkpoint_non_reentrant_in_forward():
    m = CheckpointedBlocks()

    def drive(f, i, c):
        x = c(randn(4, 6)).requires_grad_()
        y = f(x)
        y.square().sum().backward()
        g = _grads(m) + [x.grad]
        m.zero_grad()
        return y.detach(), g
    return m, drive


@case(calls=4)
def batchnorm1d_train_eval_train_counts_batches_and_momentum():
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3), nn.ReLU(), nn.Linear(6, 2))

    def drive(f, i, c):
        m.train(i != 2)
        out = f(c(randn(5 + i, 4)))
        out.sum().backward()
        g = _grads(m)
        m.zero_grad()
        bn = m[1]
        return out.detach(), g, bn.running_mean, bn.running_var, bn.num_batches_tracked
    return m, drive


@case(calls=3)
def batchnorm2d_channels_last_train_with_sgd_step():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def drive(f, i, c):
        x = c(randn(2, 3, 5, 5)).contiguous(memory_format=torch.channels_last)
        out = f(x)
        out.mean().backward()
        g = _grads(m)
        opt.step()
        opt.zero_grad()
        return out.detach(), g, _params(m), m[1].running_mean, m[1].running_var, m[1].num_batches_tracked
    return m, drive


@case()
def losses_with_reductions_none_sum_and_mean():
    def fn(x, y, t, w):
        return (F.mse_loss(x, y, reduction="none"), F.l1_loss(x, y, reduction="sum"),
                F.smooth_l1_loss(x, y, reduction="none", beta=0.3),
                F.huber_loss(x, y, reduction="sum", delta=0.7),
                F.binary_cross_entropy_with_logits(x, (y > 0).to(x.dtype), pos_weight=w, reduction="none"),
                F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y), reduction="sum"),
                F.kl_div(F.log_softmax(x, -1), F.log_softmax(y, -1), reduction="batchmean", log_target=True),
                F.nll_loss(F.log_softmax(x, -1), t, reduction="none"),
                F.soft_margin_loss(x, y.sign(), reduction="sum"))

    def drive(f, i, c):
        x = c(randn(4, 5)).requires_grad_()
        y = c(randn(4, 5))
        out = f(x, y, torch.tensor([0, 4, 2, 1]), c(torch.rand(5) + 0.5))
        torch.autograd.backward([o.sum() for o in out])
        return [o.detach() for o in out], x.grad
    return fn, drive


@case()
def cross_entropy_ignore_index_label_smoothing_every_reduction():
    def fn(x, t, w):
        return (F.cross_entropy(x, t, ignore_index=2, label_smoothing=0.2, reduction="none"),
                F.cross_entropy(x, t, ignore_index=2, label_smoothing=0.1, reduction="sum"),
                F.cross_entropy(x, t, weight=w, ignore_index=-1, label_smoothing=0.3),
                F.cross_entropy(x, t, ignore_index=2))

    def drive(f, i, c):
        x = c(randn(6, 4)).requires_grad_()
        t = torch.tensor([0, 2, -1, 3, 2, 1])
        t = t.clamp(min=0) if i == 0 else t
        try:
            out = f(x, t, c(torch.rand(4) + 0.5))
        except Exception as e:  # noqa: BLE001 - a target of -1 with ignore_index 2 raises
            return type(e).__name__, str(e)
        sum(o.sum() for o in out).backward()
        return [o.detach() for o in out], x.grad
    return fn, drive


@case()
def cross_entropy_with_every_target_ignored_is_nan_with_zero_grads():
    m = nn.Linear(4, 3)

    def drive(f, i, c):
        x = c(randn(3, 4))
        loss = F.cross_entropy(f(x), torch.full((3,), -100))
        loss.backward()
        g = _grads(m)
        m.zero_grad()
        return loss.detach(), g
    return m, drive


@case(calls=3)
def float64_model_int64_targets_and_bool_masks():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5)).double()
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)

    def step(x, t, mask):
        logits = m(x).masked_fill(~mask, float("-inf"))
        loss = F.cross_entropy(logits, t, reduction="none")
        loss = (loss * mask.any(-1)).sum() / mask.any(-1).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach(), logits.argmax(-1)

    def drive(f, i, c):
        x = torch.randn(4, 4, dtype=torch.float64)
        mask = torch.rand(4, 5) > 0.3
        mask[:, 1] = True
        t = torch.ones(4, dtype=torch.int64)
        return f(x, t, mask), _params(m)
    return step, drive, None, (m,)


@case()
def input_gradients_and_outputs_that_are_views_of_inputs_and_each_other():
    w = nn.Parameter(torch.randn(4))

    def fn(x):
        y = x * w
        return y, y.t(), y[1:], x.view(-1), x[0]

    def drive(f, i, c):
        x = c(randn(3, 4)).requires_grad_()
        outs = f(x)
        torch.autograd.backward([o.sum() * (k + 1) for k, o in enumerate(outs)])
        shares = [outs[1]._base is outs[0] or outs[1].data_ptr() == outs[0].data_ptr(),
                  outs[3].data_ptr() == x.data_ptr(), outs[4].data_ptr() == x.data_ptr()]
        g = (x.grad, w.grad.clone())
        w.grad = None
        return [o.detach() for o in outs], g, shares
    return fn, drive, None, (w,)


@case()
def in_place_on_a_non_leaf_that_backward_needs_raises_as_eager():
    lin = nn.Linear(4, 4)

    def fn(x):
        y = torch.sigmoid(lin(x))
        y.mul_(2)  # sigmoid's backward needs its output: eager's backward raises
        return y

    def drive(f, i, c):
        y = f(c(randn(3, 4)))
        y.sum().backward()
        return y.detach(), lin.weight.grad
    return fn, drive, None, (lin,)


@case()
def backward_twice_without_retain_graph_raises_as_eager():
    m = _mlp()

    def drive(f, i, c):
        loss = f(c(randn(3, 6))).sum()
        loss.backward()
        g = _grads(m)
        try:
            loss.backward()
        except RuntimeError as e:
            return g, str(e)
        return g, None
    return m, drive


@case()
def non_contiguous_inputs_and_a_transposed_weight_in_training():
    holder = nn.Module()
    holder.w = nn.Parameter(torch.randn(4, 6).t())  # a non-contiguous parameter

    def fn(x, b):
        return torch.tanh(x @ holder.w + b[::2])

    def drive(f, i, c):
        x = c(randn(5, 12))[:, ::2].requires_grad_()
        b = c(randn(8)).requires_grad_()
        y = f(x, b)
        y.sum().backward()
        w = holder.w
        g = (x.grad, b.grad, w.grad.clone(), w.grad.stride())
        w.grad = None
        return y.detach(), g
    return fn, drive, None, (holder,)


@case(calls=3)
def zero_size_batch_training_step():
    m = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.ReLU(), nn.Linear(6, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def drive(f, i, c):
        out = f(c(randn(0 if i != 1 else 2, 4)))
        loss = out.sum() + out.mean().nan_to_num(0.0)
        loss.backward()
        g = _grads(m)
        opt.step()
        opt.zero_grad()
        return out.detach(), loss.detach(), g, _params(m)
    return m, drive


@case(calls=4)
def dtype_and_rank_change_between_calls_in_training():
    m = nn.Linear(4, 3)

    def drive(f, i, c):
        shape = [(2, 4), (3, 2, 4), (5, 4), (1, 1, 1, 4)][i]
        x = c(randn(*shape)).requires_grad_()
        y = f(x)
        y.pow(2).sum().backward()
        g = (x.grad, m.weight.grad.clone())
        m.zero_grad()
        return y.detach(), g
    return m, drive



@case(calls=3)
def p_norm_weight_regulariser_backward():
    # norm's backward for p=3 runs the in-place x.abs().pow_(p - 2) (aten::pow_.Scalar); made
    # out-of-place it must become pow.Tensor_Scalar, not pow.Scalar (Scalar base, Tensor exponent).
    m = _mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def loss_fn(x, y):
        reg = m[0].weight.norm(p=3) + m[2].bias.norm(p=3) + m[2].weight.norm(p=1.5, dim=1).sum()
        return F.mse_loss(m(x), y) + 1e-2 * reg

    def drive(f, i, c):
        loss = f(c(randn(4, 6)), c(randn(4, 3)))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach(), _params(m)
    return loss_fn, drive, None, (m,)



def _backward_or_error(y, m):
    try:
        y.sum().backward()
    except RuntimeError as e:
        # Eager names the node that saved the tensor ("output 0 of SigmoidBackward0"), a compiled
        # graph its own node ("output 1 of CompiledFunctionBackward"): the rest is compared.
        return re.sub(r"which is output \d+ of \w+,", "which is output N of NODE,", str(e))
    g = _grads(m)
    m.zero_grad()
    return g


@case()
def user_in_place_write_to_a_returned_output_backward_saves_raises_as_eager():
    # sigmoid's backward reads its output; after decompositions the backward may read y * (1 - y)
    # computed in the forward instead, and the write would go unnoticed (fused did not raise).
    m = nn.Sequential(nn.Linear(4, 5), nn.Sigmoid())

    def drive(f, i, c):
        y = f(c(randn(3, 4)))
        y.mul_(2)
        return y.detach(), _backward_or_error(y, m)
    return m, drive


@case()
def user_in_place_write_to_outputs_the_eager_backward_saves():
    lin = nn.Linear(4, 5)

    def fn(x):
        h = lin(x)
        return h, torch.tanh(h), h.exp(), torch.relu(h)

    def drive(f, i, c):
        res = []
        for k in (1, 2, 3):  # tanh, exp and relu save their outputs (relu's backward reads its output)
            outs = f(c(randn(3, 4)))
            outs[k].add_(1)
            res.append((outs[k].detach(), _backward_or_error(sum(o.sum() for o in outs), lin)))
        return res
    return fn, drive, None, (lin,)


@case()
def user_in_place_write_to_an_output_the_compiled_backward_saves_but_eager_does_not():
    lin = nn.Linear(4, 5)

    def fn(x):
        h = lin(x)
        return h, torch.tanh(h), torch.relu(h)

    def drive(f, i, c):
        outs = f(c(randn(3, 4)))
        outs[0].add_(1)  # no eager backward reads h (tanh and relu save their outputs)
        return outs[0].detach(), _backward_or_error(sum(o.sum() for o in outs), lin)
    return fn, drive, None, (lin,)



@case()
def user_in_place_write_to_a_returned_view_of_an_intermediate():
    lin = nn.Linear(4, 5)

    def fn(x):
        return (lin(x) * 2)[:, 1:]  # mul saves nothing: eager's backward needs no value written

    def drive(f, i, c):
        y = f(c(randn(3, 4)))
        y.add_(1)
        return y.detach(), _backward_or_error(y, lin)
    return fn, drive, None, (lin,)


@case()
def two_forwards_before_their_backwards_keep_their_saved_values_apart():
    m = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 12), nn.Sigmoid(), nn.Linear(12, 3))

    def drive(f, i, c):
        ya, yb = f(c(randn(4, 6))), f(c(randn(4, 6)))
        ya.pow(2).sum().backward()
        ga = _grads(m)
        m.zero_grad()
        yb.sum().backward()
        gb = _grads(m)
        m.zero_grad()
        return ya.detach(), yb.detach(), ga, gb
    return m, drive


@case()
def binary_cross_entropy_at_zero_and_one_and_prod_backward_with_zeros():
    def fn(p, t, x):
        return (F.binary_cross_entropy(p, t, reduction="none"), F.binary_cross_entropy(p, t, weight=t + 1),
                x.prod(-1), x.cumprod(-1))

    def drive(f, i, c):
        p = c(torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5, 1e-30])).requires_grad_()
        t = c(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]))
        x = c(torch.tensor([[1.0, 0.0, 2.0, 3.0], [0.0, 2.0, 0.0, 1.0], [1.5, 2.0, -1.0, 0.5]])).requires_grad_()
        out = f(p, t, x)
        sum(o.sum() for o in out).backward()
        return [o.detach() for o in out], p.grad, x.grad
    return fn, drive

# ----------------------------------------------------------------------------------------------
# Numerics


@case()
def reductions_of_huge_denormal_inf_and_nan_values():
    def fn(big, den, special):
        return (big.sum(), big.sum(-1), big.mean(0), big.prod(-1), den.sum(), den.mean(), den * 1e10,
                special.sum(-1), special.amax(-1), special.amin(-1), special.mean(-1),
                special.logsumexp(-1), special.var(-1), special.norm(dim=-1), special.cumsum(-1))

    def drive(f, i, c):
        big = c(torch.full((3, 8), 3e38)) * torch.tensor([1.0, -1.0, 0.5]).view(3, 1)
        den = c(torch.full((16,), 1e-40))
        special = c(torch.tensor([[1.0, float("inf"), 2.0, -3.0],
                                  [float("inf"), float("-inf"), 0.0, 1.0],
                                  [float("nan"), 1.0, float("inf"), -1.0],
                                  [float("-inf")] * 4]))
        return f(big, den, special)
    return fn, drive


@case()
def softmax_log_softmax_of_inf_rows_and_large_values():
    def fn(x):
        return (torch.softmax(x, -1), torch.log_softmax(x, -1), torch.softmax(x * 1e5, 0),
                torch.log_softmax(x - 1e30, -1), F.softmin(x, -1))

    def drive(f, i, c):
        x = c(torch.tensor([[float("-inf")] * 3, [1e30, 1e30, 0.0], [float("inf"), 0.0, 1.0],
                            [-1e4, -1e4 - 1, float("-inf")]]))
        return f(x)
    return fn, drive


@case()
def int32_and_int8_arithmetic_wraps_as_eager():
    def fn(a, b, u):
        return (a + a, a * 3, a - b, -b, b.abs(), a.sum(), a.sum(dtype=torch.int32), a.cumsum(0),
                u + u, u * 200, u - 10, (u + 200).to(torch.int8), a.to(torch.int16), b // 7, b % 7)

    def drive(f, i, c):
        a = torch.tensor([2 ** 31 - 1, 2 ** 30, -2 ** 31, 7], dtype=torch.int32)
        b = torch.tensor([-2 ** 31, -(2 ** 31) + 1, -9, 9], dtype=torch.int32)
        u = torch.tensor([0, 100, 200, 255], dtype=torch.uint8)
        return f(a, b, u)
    return fn, drive


@case()
def comparisons_maximum_and_where_with_nan():
    def fn(x, y):
        return (x == y, x != y, x < y, x >= y, torch.maximum(x, y), torch.minimum(x, y),
                torch.fmax(x, y), torch.fmin(x, y), torch.where(x > y, x, y), torch.where(x != x, 0.0, x),
                x.isnan().sum(), torch.clamp(x, min=y))

    def drive(f, i, c):
        n = float("nan")
        x = c(torch.tensor([n, 1.0, n, -0.0, float("inf"), 2.0]))
        y = c(torch.tensor([n, n, 1.0, 0.0, n, 3.0]))
        return f(x, y)
    return fn, drive


@case()
def fmod_remainder_and_floor_divide_signs_floats_and_ints():
    def fn(x, y, a, b):
        return (torch.fmod(x, y), torch.remainder(x, y), x // y, torch.fmod(a, b), torch.remainder(a, b),
                a // b, torch.fmod(x, 0.0), torch.remainder(x, float("inf")), torch.floor_divide(a, -3),
                torch.remainder(a, -3))

    def drive(f, i, c):
        x = c(torch.tensor([5.5, -5.5, 5.5, -5.5, -0.0, 1e30, float("inf")]))
        y = c(torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 7.0, 2.0]))
        a = torch.tensor([7, -7, 7, -7, 0, -1, 1])
        b = torch.tensor([3, 3, -3, -3, 5, 4, -4])
        return f(x, y, a, b)
    return fn, drive


@case()
def pow_of_negative_bases_and_type_promotion_with_scalars():
    def fn(x, i, bo):
        return (x ** 2, x ** 0.5, x ** -1, x.pow(3.0), torch.pow(-2.0, x), i * 1.5, i / 2, i // 2.5,
                bo * 2, bo + bo, bo * 1.5, i ** 2, (i * 0.1).dtype, bo.sum(), bo & (i > 0), x.pow(x))

    def drive(f, i, c):
        x = c(torch.tensor([-2.0, -0.5, 0.0, -0.0, 3.0, -float("inf")]))
        iv = torch.tensor([-3, -1, 0, 2, 5, 7], dtype=torch.int32)
        bo = torch.tensor([True, False, True, True, False, True])
        return f(x, iv, bo)
    return fn, drive


@case()
def signed_zeros_and_special_unary_values():
    def fn(x):
        return (x.sign(), torch.signbit(x), x.sqrt(), x.relu(), x.neg(), x.abs(), torch.copysign(
            torch.ones_like(x), x), x.exp(), x.log(), x.reciprocal(), torch.atan2(x, -torch.ones_like(x)),
            x.floor(), x.round(), x.trunc(), x.sigmoid(), x.tanh(), torch.nan_to_num(x))

    def drive(f, i, c):
        return f(c(torch.tensor([-0.0, 0.0, float("nan"), float("inf"), float("-inf"), 1e-45, -89.0, 89.0])))
    return fn, drive


@case()
def clamp_min_above_max_with_tensor_bounds_and_integers():
    def fn(x, lo, hi, k):
        return (torch.clamp(x, lo, hi), x.clamp(min=hi, max=lo), k.clamp(5, 2), k.clamp(min=-1.5),
                torch.clamp(x, min=float("nan")), x.clamp(2.0, -2.0))

    def drive(f, i, c):
        x = c(torch.tensor([-2.0, 0.0, 1.0, float("nan"), 5.0]))
        lo = c(torch.tensor([1.0, 1.0, float("nan"), 0.0, 6.0]))
        hi = c(torch.tensor([0.0, 2.0, 0.0, 1.0, 4.0]))
        return f(x, lo, hi, torch.tensor([-3, 0, 3, 6, 9]))
    return fn, drive


XFAIL = {
    "user_in_place_write_to_a_returned_view_of_an_intermediate":
        "the output is a view made inside the compiled autograd.Function: autograd refuses the "
        "in-place write ('Output 0 of CompiledFunctionBackward is a view and is being modified "
        "inplace ...'), where eager allows it (a fix would return the base and replay the view "
        "outside the Function, as torch 2's AOTAutograd does)",
}


@pytest.mark.parametrize("name, backend", fp_params(CASES, XFAIL, BACKENDS))
def test_case(name, backend):
    fp_check(CASES, name, backend)

