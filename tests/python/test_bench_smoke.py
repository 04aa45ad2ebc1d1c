"""Smoke test of the benchmarks in bench/: they run in --quick mode and print one JSON object per
line with the expected keys, then a table. Timings are printed by the benchmarks, never asserted
here (speed goals are read from bench/ output, see docs/performance.md).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stacks import only_on_stack1, only_on_stack2

SOURCE = Path(os.environ.get("DYNAMO_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BENCH = SOURCE / "bench"


def run_bench(script, *args):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows and rows[0]["bench"] == "environment", proc.stdout
    for key in ("python", "torch", "torch_threads"):
        assert key in rows[0]
    return rows[1:], proc.stdout


def test_overhead_quick_prints_json_rows():
    # one repeat of 500 calls per variant: the smoke test checks the rows and the table, not speed
    rows, out = run_bench("overhead.py", "--quick", "--repeats", "1", "--calls", "500")
    assert [r["case"] for r in rows] == ["add_1elem", "mlp3_no_grad", "mlp3_grad", "mlp3_bt_static",
                                        "mlp3_bt_dynamic"]
    for r in rows:
        assert r["bench"] == "overhead"
        for key in ("eager_us", "compiled_us", "added_us", "ratio", "hooked_us", "graph_us",
                    "wrapper_us", "hook_guards_us", "calls", "repeats", "clock"):
            assert key in r, key
        assert (r["calls"], r["repeats"]) == (500, 1)
        assert r["compiles"] == 1  # the timed calls were cache hits, not recompiles
        assert r["graph_us"] is not None  # the CompiledGraph was found in the transformed code
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("case") and "added" in line)
    assert [line.split()[0] for line in lines[header + 1:header + 6]] == [r["case"] for r in rows]
    # the mlp3_bt pair also times its guard check alone, as a dynamic / static ratio
    assert any(line.startswith("guard evaluation alone (mlp3_bt") and "ratio" in line
               for line in lines[header + 6:])


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
def test_capture_time_quick_prints_json_rows():
    rows, out = run_bench("capture_time.py", "--quick")
    assert [r["model"] for r in rows] == ["resnet18"]
    r = rows[0]
    for key in ("eager_ms", "first_call_ms", "compile_ms", "capture_ms", "guard_ms", "backend_ms",
                "total_ms", "steady_ms", "nodes", "breaks", "guards"):
        assert key in r, key
    assert r["statuses"] == ["compiled"] and r["nodes"] > 0
    assert "resnet18" in out.splitlines()[-1]


def test_commit_cost_runs_its_three_modes():
    # Text, not JSON: one line per workload with the batch baseline and the two other modes.
    proc = subprocess.run([sys.executable, str(BENCH / "commit_cost.py"), "--models", "small50",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("small50: batch wall ") and "; commit wall " in line and "; journal wall " in line


@pytest.mark.skipif(importlib.util.find_spec("networkx") is None,
                    reason="functorch's min-cut partitioner needs networkx (python3-networkx)")
@only_on_stack1("the anchor is torch 1.13's functorch default partitioner, which ours follows; torch "
                "2.11's saves less on transformer_layer (13.262 MiB against our 16.262)")
def test_aot_eager_quick_prints_json_rows():
    rows, out = run_bench("aot_eager.py", "--quick", "--workloads", "transformer_layer")
    assert [(r["bench"], r["workload"]) for r in rows] == [("aot_eager", "transformer_layer")]
    r = rows[0]
    for key in ("compile_ms_ours", "compile_ms_functorch_mincut", "compile_ratio", "step_ms_eager",
                "step_ms_aot_eager", "step_ratio", "held_MiB_eager", "held_MiB_aot_eager",
                "peak_MiB_eager", "peak_MiB_aot_eager", "peak_ratio", "graph_peak_MiB_eager",
                "graph_peak_MiB_ours", "graph_peak_MiB_functorch_mincut"):
        assert r[key] > 0, key
    # Byte counts are not timings: the partitions are deterministic. Ours never saves more than
    # save-all, which saves what functorch's default partitioner saves.
    assert r["saved_MiB_ours_aot_eager"] <= r["saved_MiB_ours_default_partitioner"]
    assert r["saved_MiB_ours_default_partitioner"] == r["saved_MiB_functorch_default"]
    assert "transformer_layer" in out.splitlines()[-1]


@only_on_stack2("torch 1.13 has no torch.compile to compare with")
def test_side_by_side_compares_dynamo_with_torch_compile():
    rows, out = run_bench("side_by_side.py", "--quick")
    assert [r["case"] for r in rows] == ["tiny_add", "mlp3"]
    for r in rows:
        for key in ("eager_us", "dynamo_us", "torch_compile_eager_us"):
            assert r[key] > 0, key
        # the ratio is of the unrounded medians; the printed times are rounded to 1 ns
        assert abs(r["dynamo_over_torch_compile"] - r["dynamo_us"] / r["torch_compile_eager_us"]) < 0.01
    assert out.splitlines()[-1].startswith("mlp3 ")


@only_on_stack2("torch 1.13 has no torch.compile to compare with")
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
def test_side_by_side_capture_compares_with_torch_compile_eager():
    rows, out = run_bench("side_by_side_capture.py", "--quick")
    (r,) = rows
    assert (r["bench"], r["model"], r["mode"]) == ("side_by_side_capture", "resnet18", "in_process_reset")
    for key in ("dynamo_compile_ms", "torch_compile_compile_ms", "dynamo_eager_ms"):
        assert r[key] > 0, key
    # counts, not timings: both capture resnet18 whole, and the eager backends give eager's bits
    assert (r["dynamo_graphs"], r["dynamo_breaks"], r["torch_compile_graphs"], r["torch_compile_breaks"]) == (1, 0, 1, 0)
    assert r["dynamo_bitwise"] and r["torch_compile_bitwise"]
    assert abs(r["torch_compile_over_dynamo"] - r["torch_compile_compile_ms"] / r["dynamo_compile_ms"]) < 0.01
    assert out.splitlines()[-1].startswith("resnet18 ")


@only_on_stack2("torch 1.13 has no torch.compile to compare with")
def test_side_by_side_aot_compares_with_torch_compile_aot_eager():
    rows, out = run_bench("side_by_side_aot.py", "--quick")
    (r,) = rows
    assert (r["bench"], r["workload"]) == ("side_by_side_aot", "transformer_layer")
    for key in ("compile_ms_dynamo", "compile_ms_torch_compile", "step_ms_eager", "step_ms_dynamo",
                "step_ms_torch_compile", "step_dynamo_over_torch_compile"):
        assert r[key] > 0, key
    assert out.splitlines()[-1].startswith("| transformer_layer |")


@only_on_stack2("torch 1.13 has no torch.compile to compare with")
def test_side_by_side_fused_compares_with_inductor():
    # run times only: the compile part starts eight processes per case (minutes)
    rows, out = run_bench("side_by_side_fused.py", "--cases", "chain6", "--repeats", "1", "--skip-compile")
    (r,) = rows
    assert (r["bench"], r["part"], r["case"], r["threads"]) == ("side_by_side_fused", "run", "chain6", 1)
    for key in ("eager_ms", "fused_ms", "inductor_ms", "fused_over_inductor"):
        assert r[key] > 0, key
    assert out.splitlines()[-1].startswith("| chain6 |")


def test_no_bench_script_shadows_a_standard_module():
    # `python bench/x.py` puts bench/ first on sys.path: a bench/inspect.py once hid the
    # standard `inspect` module from torch in every other benchmark.
    shadowing = sorted(p.name for p in BENCH.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert shadowing == []


def test_listing_cost_prints_both_modes():
    rows, out = run_bench("listing_cost.py", "--repeats", "1")
    (row,) = rows
    for key in ("first_call_ms_with", "first_call_ms_without", "total_ms_with", "total_ms_without",
                "first_call_ratio", "total_ratio"):
        assert key in row, key
    assert "with listings" in out


def test_dynamic_shapes_quick_prints_json_rows():
    proc = subprocess.run([sys.executable, str(BENCH / "dynamic_shapes.py"), "--quick"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    work = [r for r in rows if "workload" in r]
    assert [(r["workload"], r["mode"]) for r in work] == [
        (w, m) for w in ("mlp", "mlp-aot", "transformer", "attention", "step-int", "lr-float")
        for m in ("static", "automatic")]
    assert all(r["exact"] for r in work)
    # Compile counts are behaviour, not timings: automatic dynamic compiles at most 3 times; a
    # learning rate that changes every call at most 2 (the first value, then a symbolic float).
    assert all(r["compiles"] <= 3 for r in work if r["mode"] == "automatic")
    assert [r["compiles"] for r in work if r["workload"] == "lr-float"] == [8, 2]
    # aot_eager's dynamic entry AOT-compiles once per batch size (8 sizes, one AOT compile each).
    assert [r["aot_compiles"] for r in work if r["workload"] == "mlp-aot"] == [8, 8]
    assert [r["case"] for r in rows if "case" in r] == ["guard_cost_x_times_2", "guard_cost_int_branch"]


def test_callgrind_cases_run_without_valgrind():
    # bench/callgrind_cases.py: the workloads docs/performance.md counts instructions of.
    for case in ("call", "resnet18"):
        proc = subprocess.run([sys.executable, str(BENCH / "callgrind_cases.py"), case, "--trace"],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stderr.startswith(f"{case}: "), proc.stderr


def test_fused_peak_measures_eager_and_fused_in_fresh_processes():
    # Figures only; the one fact checked is that eager's mean_var allocates its 32 MiB centred
    # temporary (8192 x 1024 float32) at its peak, so the resident-set measure sees allocations.
    proc = subprocess.run([sys.executable, str(BENCH / "fused_peak.py"), "--cases", "mean_var"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["case"] for r in rows] == ["mean_var"]
    r = rows[0]
    for key in ("eager_peak_MiB", "fused_peak_MiB", "fused_over_eager", "eager_held_MiB", "fused_held_MiB"):
        assert key in r, key
    assert r["eager_peak_MiB"] >= 30 and r["fused_peak_MiB"] >= 0
    assert "mean_var" in proc.stdout.splitlines()[-1]


def test_fused_mm_epilogue_times_every_step_of_mlp_block():
    # Figures only; what is checked: the script's own comparisons against eager passed (it exits
    # non-zero otherwise), every step of part 1 and every row block of part 2 has a row, and each
    # table's CPU shares are relative to its base row.
    proc = subprocess.run([sys.executable, str(BENCH / "fused_mm_epilogue.py"), "--threads", "1", "--repeats", "1",
                           "--chunk-rows", "256"], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    names = ["eager block", "fused block", "fused products alone (mm #0, mm #1)", "fused k0: gelu(mm0 + b1), 512x4096",
             "fused k1: x + (mm1 + b2), 512x1024", "copy of 8 MiB (512x4096)", "mm #0 whole",
             "mm #0 whole + one epilogue pass", "mm #0 per 256 rows", "mm #0 per 256 rows + its epilogue"]
    rows = [next(line for line in lines if line.startswith(n + " ")) for n in names]
    assert rows[1].split()[-1] == "1.000" and rows[6].split()[-1] == "1.000"
    assert lines[0].startswith("threads 1, OPENBLAS_NUM_THREADS=1")
