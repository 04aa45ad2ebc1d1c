"""Where a fused compile of a bench/fused.py case spends its time: the AOT layer's phases.

Run from the repository root (docs/performance.md has the figures and the load):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_compile_phases.py mlp_train cnn_train

One process, one fresh kernel cache ($DYNAMO_KERNEL_CACHE, a new temporary directory). Each case
is compiled three times: cold (its kernels compiled), warm without the whole-graph cache
(DYNAMO_GRAPH_CACHE=0: a new module and a new compiled function, the kernels found in the cache,
the AOT trace redone) and warm (the AOT layer's result read back from the whole-graph cache). The one-time imports of the trace (functorch's make_fx pulls in
sympy on torch 1.13) are done before any timing. Prints, per compile, the first call's time and
the AOT phases of the training cases (the record's phases_ms: trace, import, partition,
compile_forward; inference cases run without autograd and skip the AOT layer). Nothing is
asserted: figures only.
"""
import os
import sys
import tempfile
import time

os.environ["DYNAMO_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="dynamo-phases-")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.fx.experimental.proxy_tensor  # noqa: E402,F401  (the trace's one-time import)

import dynamo  # noqa: E402
from dynamo import aot  # noqa: E402
import fused  # noqa: E402

_phases = []
_orig_phase = aot._phase


def _phase(rec, name, start):
    _orig_phase(rec, name, start)
    _phases.append((name, rec["phases_ms"][name]))


aot._phase = _phase


def main(cases):
    for case in cases:
        eager, inputs, *train = fused.CASES[case]
        torch.set_grad_enabled(bool(train))  # as bench/fused.py: inference cases without autograd
        for kind, graph_cache in (("cold", "1"), ("warm, no graph cache", "0"), ("warm", "1")):
            os.environ["DYNAMO_GRAPH_CACHE"] = graph_cache
            args = inputs()
            fn = train[0]() if train else dynamo.optimize("fused")(eager)
            _phases.clear()
            start = time.perf_counter()
            fn(*args)
            ms = (time.perf_counter() - start) * 1e3
            phases = ", ".join(f"{n} {v:.0f}" for n, v in _phases)
            print(f"{case} {kind}: first call {ms:.0f} ms; {phases}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mlp_train", "cnn_train"])
