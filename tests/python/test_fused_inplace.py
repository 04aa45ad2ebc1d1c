"""In-place memory planning of the fused backend (codegen/inplace.h): a kernel output written over an
intermediate that dies in that kernel, when every element is read before it is overwritten (a row's
statistics, then the row rewritten; a pointwise read and write of one element). The safe shapes
alias (" in bN" in the program, no arena) and match eager; the unsafe ones (a transposed, broadcast
or neighbouring read of the intermediate) keep their own memory and match eager too."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import fused, reference, tolerance  # noqa: E402

torch.manual_seed(0)


def run(fn, *inputs, cuda_host_shim=False):
    """The fused function, after checking it against eager within the fp64 reference's tolerance."""
    f = fused(fn, *inputs, cuda_host_shim=cuda_host_shim)
    got, want, ref = f(*inputs), fn(*inputs), reference(fn, *inputs)
    got_l = got if isinstance(got, (tuple, list)) else [got]
    want_l = want if isinstance(want, (tuple, list)) else [want]
    ref_l = ref if isinstance(ref, (tuple, list)) else [ref]
    for g, w, r in zip(got_l, want_l, ref_l):
        rtol, atol = tolerance(w.dtype)
        err_eager = (w.double() - r.double()).abs().max().item()
        torch.testing.assert_close(g.double(), r.double(), rtol=rtol * 10, atol=atol * 10 + 2 * err_eager)
    return f


def in_place(f):
    """The program's buffer lines that live in another buffer's memory."""
    return [line for line in f.report["program"].splitlines() if " in b" in line]


def softmax_layer_norm(t):
    return F.layer_norm(torch.softmax(t, -1), (t.shape[-1],))


def test_softmax_layer_norm_writes_its_output_over_the_softmax():
    x = torch.randn(64, 96)
    f = run(softmax_layer_norm, x)
    assert len(f.report["kernels"]) == 1, f.report["program"]
    assert len(in_place(f)) == 1 and "intermediate" in in_place(f)[0], f.report["program"]
    assert f.report["arena_bytes"] == 0
    assert "// in place: the same memory" in f.report["kernels"][0]["source"]


def test_a_returned_output_is_not_overwritten_by_the_next_call():
    f = run(softmax_layer_norm, torch.randn(32, 48))
    a, b = torch.randn(32, 48), torch.randn(32, 48)
    first = f(a)
    kept = first.clone()
    f(b)
    assert torch.equal(first, kept)
    torch.testing.assert_close(first, softmax_layer_norm(a), rtol=1e-5, atol=1e-5)


def test_the_cuda_bodies_share_the_pointer_through_the_host_shim():
    f = run(softmax_layer_norm, torch.randn(16, 40), cuda_host_shim=True)
    assert in_place(f), f.report["program"]
    assert "const void* dyn_same_b" in f.report["kernels"][0]["cuda_source"]


def test_softmax_over_the_columns_then_a_row_layer_norm_in_the_next_kernel():
    # the softmax is stored column by column by one kernel; the next reads each row fully before
    # writing it: the output takes the softmax's memory across the two kernels
    f = run(lambda t: F.layer_norm(torch.softmax(t, 0), (t.shape[-1],)), torch.randn(24, 40))
    assert len(f.report["kernels"]) == 2 and in_place(f), f.report["program"]
    # a column reduction of the stored softmax in the same kernel as the store: column by column
    run(lambda t: (lambda s: s - s.mean(0))(torch.softmax(t, -1)), torch.randn(24, 40))
    run(lambda t: (lambda s: s * s.sum(0))(torch.softmax(t, -1)), torch.randn(24, 40))


def test_transposed_broadcast_and_neighbour_reads_keep_their_own_memory():
    x = torch.randn(48, 48)
    for fn in [lambda t: (lambda s: s + s.t())(torch.softmax(t, -1)),          # transposed
               lambda t: (lambda s: s * s[:, :1])(torch.softmax(t, -1)),       # the first column, broadcast
               lambda t: (lambda s: s[:, 1:] - s[:, :-1])(torch.softmax(t, -1)),  # the neighbour
               lambda t: (lambda s: s - s[:1])(torch.softmax(t, -1))]:         # the first row, broadcast
        f = run(fn, x)
        assert in_place(f) == [], f.report["program"]


def test_a_returned_intermediate_is_never_written_over():
    # the softmax escapes (an output): it is not an intermediate, so the layer_norm has its own block
    f = run(lambda t: (lambda s: (s, F.layer_norm(s, (t.shape[-1],))))(torch.softmax(t, -1)), torch.randn(32, 64))
    assert in_place(f) == [], f.report["program"]
