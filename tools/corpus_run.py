"""Run `debugkit run M --engine --onnxrt` on every public corpus model with the manifest's feeds, save the outputs,
then reload and re-compare them; print one row per model (exit codes, seconds, what reached stderr, warnings and
tactic refusals printed at default verbosity).

    python tools/corpus_run.py [--models NAME ...] [--workdir DIR] [--device cuda] [--fp16] [--json FILE]

--fp16 builds FP16 engines and passes a model when every output's cosine against ONNX Runtime FP32 is >= 0.999
(the elementwise check is opened up; cosine gates). --no-reload skips the reload-and-compare half.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from native.files.output import write_json  # noqa: E402
from tests.corpus.corpus import CorpusUnavailable, find_path, manifest  # noqa: E402


def feed_args(entry):
    shapes, ranges = [], []
    for name, spec in entry["feeds"].items():
        shapes.append(f"{name}:{json.dumps(spec['shape']).replace(' ', '')}")
        lo, hi = (spec["value"], spec["value"]) if "value" in spec else spec["range"]
        ranges.append(f"{name}:[{lo},{hi}]")
    return ["--input-shapes", *shapes, "--val-range", *ranges]


# Sorted detection outputs swap rows whose scores tie to ~1e-6 under any change of float rounding (tv-ssdlite's
# 300 boxes include two at 0.7620649 / 0.7620643): compare its boxes and labels by the 99th-percentile error, the
# scores elementwise. Everything else is compared element by element.
EXTRA_ARGS = {
    "tv-ssdlite320_mobilenet_v3_large": ["--check-error-stat", "4209:quantile", "4179:quantile",
                                         "--error-quantile", "0.99"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--no-reload", action="store_true")
    ap.add_argument("--json", help="also write the rows as JSON")
    args = ap.parse_args()
    extra = ["--device", args.device] + (["--fp16", "--compare", "cosine", "--atol", "1e30", "--rtol", "1e30"]
                                         if args.fp16 else [])
    work = args.workdir or tempfile.mkdtemp(prefix="dk_corpus_run_")
    rows, bad = [], 0
    for entry in manifest():
        if args.models and entry["name"] not in args.models:
            continue
        try:
            path = find_path(entry)
        except CorpusUnavailable as why:
            print(f"skip {entry['name']}: {why}")
            continue
        outs, ins = os.path.join(work, entry["name"] + "_out.h5"), os.path.join(work, entry["name"] + "_in.h5")
        cmd = [sys.executable, "-m", "debugkit", "run", path, "--engine", "--onnxrt", *feed_args(entry),
               "--save-inputs", ins, "--save-outputs", outs, *extra,
               *([] if args.fp16 else EXTRA_ARGS.get(entry["name"], []))]
        t0 = time.time()
        first = subprocess.run(cmd, capture_output=True, text=True)
        t1 = time.time()
        again = subprocess.CompletedProcess([], 0, "", "") if args.no_reload else subprocess.run([sys.executable, "-m", "debugkit", "run", path, "--engine", "--load-inputs", ins,
                                "--load-outputs", outs, *extra, *([] if args.fp16 else EXTRA_ARGS.get(entry["name"], []))],
                               capture_output=True, text=True)
        t2 = time.time()
        ok = first.returncode == 0 and again.returncode == 0
        bad += not ok
        both = [first, again]
        stderr_lines = sum(len(p.stderr.splitlines()) for p in both)
        text = "".join(p.stdout + p.stderr for p in both).splitlines()
        warnings = sum(line.lstrip().startswith("[W]") for line in text)
        refusals = sum(("refus" in line.lower() or " instead" in line) for line in text)
        rows.append((entry["name"], first.returncode, again.returncode, t1 - t0, t2 - t1, stderr_lines, warnings,
                     refusals))
        noted = [line for p in both for line in p.stderr.splitlines()] + \
            [line for line in text if line.lstrip().startswith("[W]")]
        if ok and noted:   # a passing model's warnings and stderr are what the user sees too
            print(f"--- {entry['name']} passed, printing:\n" + "\n".join(dict.fromkeys(x[:400] for x in noted)))
        if not ok:
            print(f"--- {entry['name']} failed:\n{first.stdout[-1500:]}{first.stderr[-1500:]}{again.stderr[-800:]}")
    print(f"{'model':36s} {'run':>4s} {'reload':>6s} {'run s':>7s} {'reload s':>8s} {'stderr':>6s} {'[W]':>4s} "
          f"{'refusals':>8s}")
    for name, a, b, ta, tb, err, warn, ref in rows:
        print(f"{name:36s} {a:4d} {b:6d} {ta:7.1f} {tb:8.1f} {err:6d} {warn:4d} {ref:8d}")
    if args.json:
        keys = ("model", "run_rc", "reload_rc", "run_s", "reload_s", "stderr_lines", "warnings", "refusals")
        write_json(args.json, [dict(zip(keys, r)) for r in rows], what="corpus rows", indent=1)
    print(f"{len(rows) - bad} of {len(rows)} models exit 0 on run and on reload")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
