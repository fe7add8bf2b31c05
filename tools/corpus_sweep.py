"""Issue 27 acceptance 3: `debugkit sweep` of the public corpus serially and on N local workers; the verdicts must
be equal. Writes a manifest of the corpus models present (each with its feeds from public_models.json as
--input-shapes / --val-range), runs both sweeps one after the other (each a fresh process, wall time from start to
exit) and prints one row per model.

    DEBUGKIT_CORPUS=CORPUS_DIR python tools/corpus_sweep.py [-o DIR] [--workers 2] [--ray ADDRESS]

The task is `run --onnxrt --engine` with the corpus's tolerances (rtol 1e-3, atol 1e-4 in FP32; detector boxes are
in pixels, so tv-ssdlite320's boxes output gets atol 1e-3, a thousandth of a pixel). Exit 0 when the verdicts agree.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK_ARGS = "--onnxrt --engine --atol 1e-4 --rtol 1e-3"
EXTRA = {"tv-ssdlite320_mobilenet_v3_large": ["--atol", "1e-4", "4209:1e-3"]}   # boxes (output 4209) in pixels


def manifest(corpus: str) -> list:
    """[{"path", "args"}] for every model of public_models.json present under the corpus."""
    doc = json.load(open(os.path.join(corpus, "public_models.json")))
    jobs = []
    for m in doc["models"]:
        path = os.path.join(corpus, m["path"])
        if not os.path.exists(path):
            continue
        shapes, ranges = [], []
        for name, f in m.get("feeds", {}).items():
            shapes.append(f"{name}:{json.dumps(f['shape']).replace(' ', '')}")
            lo, hi = f["range"] if "range" in f else (f["value"], f["value"])
            ranges.append(f"{name}:[{lo},{hi}]")
        args = (["--input-shapes", *shapes] if shapes else []) + (["--val-range", *ranges] if ranges else [])
        jobs.append({"path": path, "args": args + EXTRA.get(m["name"], [])})
    return jobs


def sweep(manifest_path, out, extra) -> tuple:
    cmd = [sys.executable, "-m", "debugkit", "sweep", "--models-file", manifest_path, "--task", "run",
           "--task-args", TASK_ARGS, "-o", out, *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    took = time.perf_counter() - t0
    rows = json.load(open(os.path.join(out, "sweep.json")))["results"]
    return r.returncode, took, rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="corpus_sweep", help="where both sweeps go (default ./corpus_sweep)")
    p.add_argument("--workers", default="2")
    p.add_argument("--ray", default=None, help="sweep on this Ray address instead of local workers")
    args = p.parse_args(argv)
    corpus = os.environ.get("DEBUGKIT_CORPUS")
    if not corpus:
        sys.exit("set DEBUGKIT_CORPUS to the corpus directory (public_models.json and models/)")
    os.makedirs(args.output, exist_ok=True)
    man = os.path.join(args.output, "manifest.json")
    with open(man, "w") as f:
        json.dump(manifest(corpus), f, indent=1)
    parallel = ["--ray", args.ray] if args.ray else ["--workers", args.workers]
    rc1, t1, serial = sweep(man, os.path.join(args.output, "serial"), [])
    rc2, t2, other = sweep(man, os.path.join(args.output, "parallel"), parallel)
    by = {r["model"]: r for r in other}
    print(f"{'model':36} {'serial':8} {' '.join(parallel):12} seconds (serial / parallel)")
    same = len(serial) == len(other)
    for r in serial:
        o = by.get(r["model"], {})
        same &= o.get("status") == r["status"]
        print(f"{r['model']:36} {r['status']:8} {o.get('status', '-'):12} "
              f"{r['seconds']:.1f} / {o.get('seconds', 0):.1f}")
    print(f"{len(serial)} models; serial {t1:.1f} s (exit {rc1}), {' '.join(parallel)} {t2:.1f} s (exit {rc2}); "
          f"verdicts {'equal' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
