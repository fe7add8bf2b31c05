"""Cold and warm build time of every corpus model (issue 24: cold <= 60 s, warm <= 10 s on the GPU).

    python tools/build_times.py [--device cuda] [--models yolov8n,timm-resnet18] [--fp16|--tf32] [--json F]

For each model of the corpus manifest (tests/corpus/models.json; exported models from DEBUGKIT_CORPUS, pypi ones
from the model cache: `python tests/corpus/fetch_models.py` first) two builds run, each in a fresh Python process
so nothing of the first (cuDNN graphs, compiled kernels, imports) helps the second: cold, `debugkit convert MODEL
--timing-cache C` with no C, then warm, the same command with the C (and C.prep) the cold build wrote. The figures
per build: the command's wall seconds (parse, build and plan write), the tactic-timing work — candidates timed
(`tactic_selection.time_candidates`: every tactic of every layer variant timed on the device), timed runs (the
device's `time()` calls) — and the layers. `--unbounded` times every candidate in the layout and precision
probes (the build before they were bounded to the first plan of each tactic family), for the before/after. A model that cannot be had or fails to build is listed with the reason.
The table ends with which models miss the limits (--cold-limit, --warm-limit).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def child(argv) -> int:
    """One build (`--child MODEL PLAN CACHE DEVICE [flags]`), counting the tactic timing; prints one JSON line."""
    model, plan, cache, device, *flags = argv
    from backends.engine.builder import tactic_selection, timed_choice
    if "--unbounded" in flags:    # layout/precision probes time every candidate (the build before the bound)
        flags.remove("--unbounded")
        timed_choice.FIRST_OF_FAMILY = False
    from native.device import get_device
    counts = {"candidates_timed": 0, "timed_runs": 0}
    real_time_candidates = tactic_selection.time_candidates

    def time_candidates(node, candidates, *a, **k):
        counts["candidates_timed"] += len(candidates)
        return real_time_candidates(node, candidates, *a, **k)
    tactic_selection.time_candidates = time_candidates
    dev = get_device(device)
    real_time = dev.time

    def timed(fn, stream=None):
        counts["timed_runs"] += 1
        return real_time(fn, stream)
    dev.time = timed
    from tests.corpus.corpus import entry, find_path
    e = entry(model)
    path = find_path(e)
    shapes = [f"{k}:{list(v['shape'])}".replace(" ", "") for k, v in e["feeds"].items()]
    from debugkit.cli.main import main as cli
    t0 = time.perf_counter()
    rc = cli(["convert", path, "-o", plan, "--device", device, "--timing-cache", cache, "--input-shapes", *shapes,
              "-q", *flags])
    seconds = time.perf_counter() - t0
    layers = None
    if rc == 0:
        from backends.engine.runtime.runtime import Runtime
        with open(plan, "rb") as f:
            layers = len(Runtime(device=device).deserialize_engine(f.read()).graph.nodes)
    print("BUILD " + json.dumps(dict(counts, rc=rc, seconds=round(seconds, 2), layers=layers)), flush=True)
    return rc


def one_build(model, plan, cache, device, flags, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, plan, cache, device, *flags]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "process_seconds": round(time.perf_counter() - t0, 1)}
    wall = round(time.perf_counter() - t0, 2)
    line = next((x for x in p.stdout.splitlines() if x.startswith("BUILD ")), None)
    if line is None or p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {p.returncode}: {tail[:300]}", "process_seconds": wall}
    return dict(json.loads(line[6:]), process_seconds=wall)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="device to build for (default cuda)")
    ap.add_argument("--models", help="comma-separated corpus names (default: every model of the manifest)")
    prec = ap.add_mutually_exclusive_group()
    prec.add_argument("--fp16", action="store_true")
    prec.add_argument("--tf32", action="store_true")
    ap.add_argument("--unbounded", action="store_true",
                    help="layout/precision probes time every candidate, not the first plan of each family "
                         "(timed_choice.FIRST_OF_FAMILY off): the before picture")
    ap.add_argument("--cold-limit", type=float, default=60.0, help="seconds (default 60)")
    ap.add_argument("--warm-limit", type=float, default=10.0, help="seconds (default 10)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per build before it is given up")
    ap.add_argument("--json", help="write the rows as JSON")
    args = ap.parse_args(argv)
    from tests.corpus.corpus import CorpusUnavailable, find_path, manifest
    names = [m["name"] for m in manifest()]
    if args.models:
        wanted = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            print(f"build_times: unknown model(s) {unknown}; the corpus has {names}", file=sys.stderr)
            return 2
        names = wanted
    flags = (["--fp16"] if args.fp16 else ["--tf32"] if args.tf32 else []) + (["--unbounded"] if args.unbounded
                                                                              else [])
    rows = []
    for name in names:
        try:
            find_path(next(m for m in manifest() if m["name"] == name))
        except CorpusUnavailable as e:
            rows.append({"model": name, "unavailable": str(e)})
            print(f"{name}: not available ({e})", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cache, plan = os.path.join(tmp, "timing.cache"), os.path.join(tmp, "model.plan")
            cold = one_build(name, plan, cache, args.device, flags, args.timeout)
            warm = one_build(name, plan, cache, args.device, flags, args.timeout) if "error" not in cold else None
        row = {"model": name, "device": args.device, "flags": flags, "cold": cold, "warm": warm}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(table(rows, args.cold_limit, args.warm_limit))
    if args.json:
        from native.files import write_json
        write_json(args.json, rows, "--json", indent=1)
    return 0


def table(rows, cold_limit, warm_limit) -> str:
    lines = ["| model | cold s | warm s | candidates timed cold / warm | timed runs cold / warm | layers | within limits |",
             "|---|---|---|---|---|---|---|"]
    missed = []
    for r in rows:
        if "unavailable" in r:
            lines.append(f"| {r['model']} | not available | | | | | |")
            continue
        c, w = r["cold"], r["warm"] or {}
        if "error" in c or "error" in w:
            lines.append(f"| {r['model']} | {c.get('error') or c['seconds']} | {w.get('error') or w.get('seconds')} "
                         f"| | | | no |")
            missed.append(r["model"])
            continue
        ok = c["seconds"] <= cold_limit and w["seconds"] <= warm_limit
        missed += [] if ok else [r["model"]]
        lines.append(f"| {r['model']} | {c['seconds']} | {w['seconds']} | {c['candidates_timed']} / "
                     f"{w['candidates_timed']} | {c['timed_runs']} / {w['timed_runs']} | {c['layers']} | "
                     f"{'yes' if ok else 'NO'} |")
    lines.append(f"limits: cold <= {cold_limit:g} s, warm <= {warm_limit:g} s; "
                 + (f"missed by {missed}" if missed else "every built model within them"))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
