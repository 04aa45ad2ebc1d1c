"""dynamo-minify on torchvision's resnet50 with an injected fault: wall time and query count.

    python3 bench/minify.py [--quick] [--case NAME]

Cases (each a fresh `dynamo-minify` run on a generated script, in a temporary directory):
  dynamo   forward, --after=dynamo: a backend (defined in the script itself) that raises when the
           graph holds adaptive_avg_pool2d; the whole 175-node graph is captured
  aot_fw   training step, --after=aot: the AOT forward compiler raises on aten::mean... (see FAULTS)
  aot_bw   training step, --after=aot: the backward graph fails at aten::threshold_backward
  kernel   forward, --after=kernel --accuracy: the fused backend, whose code generator gets add
           1e-2 wrong in every kernel holding one (DYNAMO_TEST_MISCOMPILE=add:value, test only:
           the residual adds fused with their relu); a kernel cache of its own, cold
--quick: resnet18 and the dynamo case only (the smoke test).

Prints one JSON object per line (an environment row, then one row per case: nodes before and
after, queries, wall seconds, whether the repro reproduced), then a table. Goal (issue 11):
under 60 s and under 200 queries per case on the development machine.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

SCRIPT = '''
import sys
import torch, torchvision
import dynamo, dynamo.aot

KIND = {kind!r}

def _hit(gm):
    return any(KIND in str(n.target) for n in gm.graph.nodes if n.op != "placeholder")

@dynamo.register_backend("raise_on_kind")
def raise_on_kind(gm, example_inputs):
    if _hit(gm):
        raise RuntimeError("fault injected: cannot compile " + KIND)
    return gm.forward

def fw_raise(graph):
    if any(n.op == "call_function" and n.target_kind == "aten" and n.schema.startswith(KIND)
           for n in graph.nodes):
        raise RuntimeError("fault injected: the forward compiler cannot compile " + KIND)
    return graph.runner()

def bw_raise(graph):
    run = graph.runner()
    if any(n.op == "call_function" and n.target_kind == "aten" and n.schema.startswith(KIND)
           for n in graph.nodes):
        def run(*args):
            raise RuntimeError("fault injected: the backward graph cannot run " + KIND)
    return run

dynamo.register_backend("aot_fw_raise")(dynamo.aot.make_backend("aot_eager", fw_compiler=fw_raise))
dynamo.register_backend("aot_bw_raise")(dynamo.aot.make_backend("aot_eager", bw_compiler=bw_raise))

if __name__ == "__main__":
    torch.manual_seed(0)
    model = getattr(torchvision.models, {model!r})()
    x = torch.randn(2, 3, 64, 64)
    if {train!r}:
        model.train()
        out = dynamo.compile(model, backend={backend!r})(x)
        out.sum().backward()
    else:
        model.eval()
        with torch.no_grad():
            dynamo.compile(model, backend={backend!r})(x)
'''

#: name -> (after, backend, op kind, train, extra flags, extra environment)
CASES = {
    "dynamo": ("dynamo", "raise_on_kind", "adaptive_avg_pool2d", False, [], {}),
    "aot_fw": ("aot", "aot_fw_raise", "aten::mean", True, [], {}),
    "aot_bw": ("aot", "aot_bw_raise", "aten::threshold_backward", True, [], {}),
    "kernel": ("kernel", "fused", "add", False, ["--accuracy", "--tol", "1e-3"],
               {"DYNAMO_TEST_MISCOMPILE": "add:value"}),
}


def run_case(name, model, tool):
    after, backend, kind, train, flags, extra_env = CASES[name]
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "script.py")
        with open(script, "w") as f:
            f.write(SCRIPT.format(kind=kind, model=model, train=train, backend=backend))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(x) for x in sys.path if x),
                   **extra_env)
        if after == "kernel":
            env["DYNAMO_KERNEL_CACHE"] = os.path.join(d, "kernels")
        start = time.perf_counter()
        proc = subprocess.run([*tool, f"--after={after}", *flags, "--quiet", "-o",
                               os.path.join(d, "repro.py"), script], cwd=d, capture_output=True,
                              text=True, env=env)
        wall = time.perf_counter() - start
        err = proc.stderr
        m = re.search(r"minified graph \d+ from (\d+) to (\d+) node\(s\) \((.*?)\) in (\d+) queries, "
                      r"([\d.]+) s", err)
        if proc.returncode != 0 or not m:
            raise SystemExit(f"case {name} failed (exit {proc.returncode}):\n{err}")
        return {"bench": "minify", "case": name, "model": model, "after": after, "fault": kind,
                "nodes_before": int(m.group(1)), "nodes_after": int(m.group(2)),
                "ops_after": m.group(3), "queries": int(m.group(4)),
                "minify_s": float(m.group(5)), "wall_s": round(wall, 2),
                "reproduces": "it reproduces the failure in a fresh process" in err,
                "one_kernel": "the minified graph is one kernel" in err}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--case", action="append", choices=sorted(CASES))
    args = p.parse_args()
    import torch
    print(json.dumps({"bench": "environment", "python": platform.python_version(),
                      "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                      "cpus": os.cpu_count()}))
    model = "resnet18" if args.quick else "resnet50"
    cases = args.case or (["dynamo"] if args.quick else list(CASES))
    tool = [sys.executable, "-m", "dynamo.minifier.minify"]
    rows = []
    for name in cases:
        row = run_case(name, model, tool)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':8} {'model':9} {'nodes':>11} {'queries':>8} {'minify s':>9} {'wall s':>7}  repro")
    for r in rows:
        print(f"{r['case']:8} {r['model']:9} {r['nodes_before']:>5} -> {r['nodes_after']:<3} "
              f"{r['queries']:>8} {r['minify_s']:>9.1f} {r['wall_s']:>7.1f}  "
              f"{'reproduces' if r['reproduces'] else 'DOES NOT reproduce'}")


if __name__ == "__main__":
    main()
