"""The delta engine of dynamo-minify: one loop for every reduction pass (llvm-reduce's Delta).

For a pass with N candidates, the engine asks the pass to drop chunks of candidates, starting
with one chunk of the largest power of two >= N and halving the granularity down to single
candidates. Each result goes to the interestingness test (`test(unit) -> bool`: "the same
failure", see fingerprint.py); a success is kept, checkpointed, and the pass restarts at the same
granularity on the smaller unit. The whole list of passes repeats while the unit gets smaller.

    engine = Engine(test, passes=["truncate_suffix", ...], on_progress=print)
    smallest = engine.run(unit)
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Optional

from dynamo.minifier import defs, passes as _passes


class Oracle:
    """Answers a pass's should_keep() for its candidates in order: keep unless the candidate's
    index is in `drop`. Counts the candidates it was asked about."""

    def __init__(self, drop=frozenset()):
        self._drop = drop
        self.count = 0

    def should_keep(self) -> bool:
        i = self.count
        self.count += 1
        return i not in self._drop


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


class Engine:
    """Runs the reduction passes against an interestingness test.

    test(unit) -> bool: True when the unit still shows the failure.
    on_progress(dict): after every query (pass, granularity, size, start_size, queries, elapsed).
    on_success(unit, step): after every accepted step (the checkpoint).
    """

    def __init__(self, test: Callable, passes: Optional[Iterable[str]] = None,
                 on_progress: Optional[Callable] = None, on_success: Optional[Callable] = None,
                 max_rounds: int = 8):
        self._test = test
        self.pass_names = list(passes) if passes else defs.stage_passes("dynamo")
        self._on_progress = on_progress or (lambda info: None)
        self._on_success = on_success or (lambda unit, step: None)
        self._max_rounds = max_rounds
        self.queries = 0
        self.steps = []            # one dict per accepted step
        self._start = time.monotonic()
        self._start_size = 0

    def _query(self, unit, pass_name, granularity) -> bool:
        self.queries += 1
        ok = self._test(unit)
        self._on_progress({"pass": pass_name, "granularity": granularity, "size": unit.size(),
                           "start_size": self._start_size, "queries": self.queries,
                           "elapsed": time.monotonic() - self._start, "accepted": ok})
        return ok

    def _accept(self, unit, pass_name, granularity):
        step = {"pass": pass_name, "granularity": granularity, "size": unit.size(),
                "queries": self.queries, "elapsed_s": round(time.monotonic() - self._start, 3)}
        self.steps.append(step)
        self._on_success(unit, step)

    def run_pass(self, name: str, unit):
        """The smallest unit this pass reaches from unit."""
        module = _passes.load(name)
        counter = Oracle()
        first = module.reduce(unit, counter)
        n = counter.count
        if n == 0:
            if first is not None and first.key() != unit.key() and self._query(first, name, 0):
                self._accept(first, name, 0)
                return first
            return unit
        chunk = _pow2_at_least(n)
        while chunk >= 1:
            progressed = False
            for start in range(0, n, chunk):
                cand = module.reduce(unit, Oracle(frozenset(range(start, min(start + chunk, n)))))
                if cand is None or cand.key() == unit.key():
                    continue
                if self._query(cand, name, chunk):
                    unit = cand
                    self._accept(unit, name, chunk)
                    counter = Oracle()
                    module.reduce(unit, counter)
                    n = counter.count
                    progressed = True
                    break
            if n == 0:
                break
            if progressed:
                chunk = min(chunk, _pow2_at_least(n))
            else:
                chunk //= 2
        return unit

    def run(self, unit):
        """Repeats the passes while the unit gets smaller (in nodes, then in input elements, then
        in input elements holding real values)."""
        self._start_size = unit.size()
        for _ in range(self._max_rounds):
            before = _complexity(unit)
            for name in self.pass_names:
                unit = self.run_pass(name, unit)
            if _complexity(unit) >= before:
                break
        return unit


def _complexity(unit):
    import torch
    from dynamo.minifier.unit import is_generated
    tensors = [v for v in unit.inputs if isinstance(v, torch.Tensor)]
    numel = sum(v.numel() for v in tensors)
    real = sum(v.numel() for v in tensors if not is_generated(v))
    return (unit.size(), len(unit.inputs), numel, real)
