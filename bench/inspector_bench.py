"""bench/inspector_bench.py: how fast dynamo-inspect shows large graphs, on the real window.

    /usr/bin/python3 bench/inspector_bench.py [--build build] [--models vit_b_16,densenet201] [--synthetic 10000]
                                      [--xvfb] [--anchor-timeout 60]

Records each torchvision model's compile into a trace store (DYNAMO_TRACE, eval, batch 1), makes
a synthetic model of about N nodes, and runs build/tests/gui/inspect_bench (bench/inspect_bench.cpp)
on each: first paint of the graph (cold and warm layout cache), three clicks expanding the
largest module on screen, a regex search, and the longest the UI thread went without serving its
event loop (5 ms timer watchdog). The anchor in the same run is Graphviz laying the whole graph
out at once, as a viewer without grouping must before it draws anything. Prints a Markdown table
(docs/inspector.md keeps the figures). Targets: first paint < 1 s, expand < 200 ms, UI thread
never blocked > 50 ms.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

RECORD = """
import sys, torch, torchvision, dynamo
name = sys.argv[1]
model = getattr(torchvision.models, name)().eval()
size = 299 if name == "inception_v3" else 224
with torch.no_grad():
    dynamo.compile(model)(torch.randn(1, 3, size, size))
"""


def record(model, path, build):
    env = dict(os.environ, DYNAMO_TRACE=path, PYTHONPATH=os.path.join(build, "python"))
    subprocess.run([sys.executable, "-c", RECORD, model], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def run_bench(build, args, xvfb):
    exe = os.path.join(build, "tests", "gui", "inspect_bench")
    cmd = [exe] + args
    env = dict(os.environ)
    if xvfb and shutil.which("xvfb-run"):
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24"] + cmd
    else:
        env["QT_QPA_PLATFORM"] = "offscreen"
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def row(label, rows):
    cold = next(r for r in rows if r.get("cache") == "cold")
    warm = next(r for r in rows if r.get("cache") == "warm")
    anchor = next((r for r in rows if "anchor" in r), None)
    # shown (the first paint showing the module open: provisional when marked *) / Graphviz's
    expands = ", ".join(f"{e['shown_ms']:.0f}{'*' if e['provisional'] else ''} / {e['ms']:.0f}"
                        for e in cold["expand"]) or "-"
    block = max(cold["max_ui_block_ms"], warm["max_ui_block_ms"])
    if anchor is None:
        anchor_text, ratio = "-", "-"
    elif anchor["finished"]:
        ms = anchor["layout_ms"]
        anchor_text = f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"
        ratio = f"{anchor['layout_ms'] / cold['first_paint_ms']:.0f}x"
    else:
        anchor_text = f"> {anchor['layout_ms'] / 1000:.0f} s (stopped)"
        ratio = f"> {anchor['layout_ms'] / cold['first_paint_ms']:.0f}x"
    return (f"| {label} | {cold['nodes']} | {cold['boxes']} | {cold['first_paint_ms']:.0f} | "
            f"{warm['first_paint_ms']:.0f} | {expands} | {cold['search_ms']:.0f} | {block:.0f} | "
            f"{anchor_text} | {ratio} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("DYNAMO_BUILD_DIR", "build"))
    p.add_argument("--models", default="vit_b_16,densenet201")
    p.add_argument("--synthetic", type=int, default=10000)
    p.add_argument("--xvfb", action="store_true", help="run under xvfb-run (default: offscreen)")
    p.add_argument("--anchor-timeout", type=int, default=60)
    a = p.parse_args(argv)
    build = os.path.abspath(a.build)
    lines = ["| graph | nodes | boxes drawn | first paint, cold (ms) | first paint, warm (ms) | "
             "3 expands, cold: shown / Graphviz (ms; * provisional) | search (ms) | max UI block (ms) | Graphviz, all nodes | ratio |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    timeout = ["--anchor-timeout", str(a.anchor_timeout)]
    with tempfile.TemporaryDirectory() as tmp:
        if a.synthetic:
            rows = run_bench(build, ["--synthetic", str(a.synthetic)] + timeout, a.xvfb)
            lines.append(row(f"synthetic ({a.synthetic})", rows))
        for model in filter(None, a.models.split(",")):
            path = os.path.join(tmp, model + ".db")
            record(model, path, build)
            lines.append(row(model, run_bench(build, [path] + timeout, a.xvfb)))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
