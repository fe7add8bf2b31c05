"""CPU speed against ONNX Runtime, before / after: two git revisions of this repository benchmarked side by side.

    python tools/benchmark_trees.py --before REV --after REV [--models a,b,...] [--rounds 3] [--iterations 30]

Each revision is exported (`git archive`, nothing in the repository changes) to a temporary directory; then, round by
round and model by model, each tree's own `tools/benchmark.py` functions build the engine and time it interleaved with
ONNX Runtime in a fresh process (tuned as the CLI runs it), the two trees in ABBA order, so a drifting shared machine
hits both alike. Both are timed by this checkout's interleaved loop (debugkit/benchmark.py), not each tree's own, so
the comparison measures the engines. Prints per model and round the median ms ours (ours / ORT) before and after, the machine's load
average at each run, and a summary: the median over rounds of ratio_after / ratio_before (below 1: faster relative
to ONNX Runtime). Models come from the corpus manifest (exported ones need DEBUGKIT_CORPUS). --json keeps the rows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = "timm-resnet18,bert_mini,vit_tiny,yolov8n,ppocr_v4_det"

# run inside one tree (cwd and PYTHONPATH = the tree): its own benchmark functions, as `--all-corpus` uses them,
# without the fusion-off build, but with the timing loop of the checkout running this tool (LOOP_FILE: its
# debugkit/benchmark.py, loaded under another name), so both trees are timed alike: before 2026-11-28 20:05 the loop
# timed us right after ONNX Runtime's block, beside its still-spinning workers (docs/PERFORMANCE.md)
DRIVER = r"""
import importlib.util, json, sys
sys.argv = ["benchmark"]
import debugkit.benchmark as tree_loop
spec = importlib.util.spec_from_file_location("_trees_timing_loop", LOOP_FILE)
loop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loop)
tree_loop.interleaved = loop.interleaved
import tools.benchmark as b
from native.config import cli_defaults
try:
    cli_defaults()
except Exception:
    pass
name, iterations, warmup = sys.argv_extra
e = {m["name"]: m for m in b.manifest()}[name]
path = b.find_path(e)
r = b.bench_all(path, b.make_feeds(e["feeds"]), int(iterations), int(warmup), with_off=False)
print("RESULT " + json.dumps({"ours": r["ours"]["latency_ms"], "ort": r["ort"]["latency_ms"],
                              "build_s": r["ours"]["build_s"]}))
"""


def export(rev, into):
    """`git archive` of `rev` unpacked into `into` (a plain tree: no .git, nothing changes in the repository). A
    directory given instead of a revision is used as it is (trees exported elsewhere, e.g. for a machine without
    the repository's history)."""
    if os.path.isdir(rev):
        return os.path.basename(os.path.normpath(rev)), os.path.abspath(rev)
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", rev], check=True, capture_output=True,
                         text=True).stdout.strip()
    tar_path = os.path.join(into, "tree.tar")
    with open(tar_path, "wb") as f:
        subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, stdout=f)
    dest = os.path.join(into, sha)
    with tarfile.open(tar_path) as t:
        t.extractall(dest)
    os.remove(tar_path)
    return sha, dest


def run_tree(tree, name, iterations, warmup, timeout):
    env = dict(os.environ, PYTHONPATH=tree)
    code = DRIVER.replace("sys.argv_extra", repr([name, str(iterations), str(warmup)])).replace(
        "LOOP_FILE", repr(os.path.join(ROOT, "debugkit", "benchmark.py")))
    load = os.getloadavg()[0]
    p = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                       timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["load"] = load
            return r
    return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"], "load": load}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision (or exported directory) of the 'before' tree")
    ap.add_argument("--after", default="HEAD", help="git revision of the 'after' tree (default HEAD)")
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated corpus names (default {DEFAULT_MODELS})")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run (build + timing)")
    ap.add_argument("--json", help="also write every run here")
    a = ap.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    rows = []
    with tempfile.TemporaryDirectory(prefix="dk-trees-") as tmp:
        trees = [export(a.before, tmp), export(a.after, tmp)]
        print(f"before {trees[0][0]}, after {trees[1][0]}; {a.rounds} rounds x {len(models)} models, "
              f"{a.iterations} iterations; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at "
              f"{time.strftime('%H:%M UTC', time.gmtime())}", flush=True)
        for rnd in range(a.rounds):
            for name in models:
                order = trees if rnd % 2 == 0 else trees[::-1]    # ABBA over rounds
                got = {}
                for label, (sha, tree) in zip(("before", "after") if rnd % 2 == 0 else ("after", "before"), order):
                    got[label] = run_tree(tree, name, a.iterations, a.warmup, a.timeout)
                rows.append({"round": rnd + 1, "model": name, **got})
                print(_line(rnd + 1, name, got), flush=True)
    print("\nsummary: median over rounds of (ours/ORT after) / (ours/ORT before); < 1 is faster after")
    for name in models:
        q = sorted(_ratio(r["after"]) / _ratio(r["before"]) for r in rows if r["model"] == name
                   and "error" not in r["before"] and "error" not in r["after"])
        print(f"  {name}: " + (f"{q[len(q) // 2]:.3f} (rounds: {', '.join(f'{x:.3f}' for x in q)})" if q
                                else "no complete round"))
    if a.json:
        from native.files import write_json
        write_json(a.json, rows, indent=1)
    return 0


def _ratio(r):
    return r["ours"]["median"] / r["ort"]["median"]


def _cell(r):
    if "error" in r:
        return f"failed: {r['error'][0][:80]}"
    return f"{r['ours']['median']:.2f} ms ({_ratio(r):.2f}x ORT, min {r['ours']['min']:.2f}, load {r['load']:.1f})"


def _line(rnd, name, got):
    return f"round {rnd} {name}: before {_cell(got['before'])} | after {_cell(got['after'])}"


if __name__ == "__main__":
    sys.exit(main())
