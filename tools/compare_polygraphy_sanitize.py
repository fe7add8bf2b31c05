"""Acceptance check for `debugkit surgeon sanitize --fold-constants` against Polygraphy 0.53.6's.

For every model of the corpus (tests/corpus/models.json): run both tools' CLIs on it (each in its own process,
wall time measured), count the nodes of each result, and check with ONNX Runtime that our output matches the
original model within rtol 1e-5 (and atol 1e-5 x the output's largest magnitude) on the corpus' seeded feeds.
Polygraphy must live in a separate venv (it is never a dependency of debugkit):

    python -m venv polyvenv && polyvenv/bin/pip install polygraphy==0.53.6 onnx-graphsurgeon onnxruntime
    python tests/corpus/fetch_models.py          # the pypi models; exported ones come from DEBUGKIT_CORPUS
    python tools/compare_polygraphy_sanitize.py --polygraphy polyvenv/bin/polygraphy [--repeat 3] [--markdown out.md]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests.corpus.corpus import CorpusUnavailable, find_path, make_feeds, manifest  # noqa: E402  (one definition)


def run_ort(path, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted})))


def compare(ref, got, rtol=1e-5):
    """Largest error as a fraction of each output's scale; None when names/shapes differ."""
    worst = 0.0
    for name, a in ref.items():
        if name not in got or np.shape(got[name]) != np.shape(a):
            return None, f"output {name}: shape {np.shape(got.get(name))} vs {np.shape(a)}"
        a64, b64 = np.asarray(a, np.float64), np.asarray(got[name], np.float64)
        if a64.size == 0:
            continue
        scale = max(float(np.max(np.abs(a64))), 1e-30)
        err = np.abs(a64 - b64) - rtol * np.abs(a64)
        worst = max(worst, float(np.max(err)) / scale if np.max(err) > 0 else 0.0)
    return worst, ""


def timed(cmd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, p


def count(path, recursive=False):
    """Top-level nodes (or all nodes, If/Loop/Scan bodies included)."""
    m = onnx.load(path, load_external_data=False)

    def n(g):
        total = len(g.node)
        if recursive:
            for node in g.node:
                for a in node.attribute:
                    total += sum(n(b) for b in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)))
        return total
    return n(m.graph)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shipped-dir", default=None, help="cache of fetched models (default $DEBUGKIT_MODEL_CACHE or "
                                                        "~/.cache/debugkit/models)")
    ap.add_argument("--polygraphy", default="polygraphy", help="Polygraphy's CLI (in its own venv)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool per model; the best time is kept")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args(argv)

    if args.shipped_dir:
        os.environ["DEBUGKIT_MODEL_CACHE"] = args.shipped_dir
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tmp = tempfile.mkdtemp(prefix="dk_sanitize_")
    rows = []
    for m in manifest():
        if args.only and m["name"] not in args.only.split(","):
            continue
        try:
            src = find_path(m)
        except CorpusUnavailable as why:
            print(f"skip {m['name']}: {why}", file=sys.stderr)
            continue
        ours, poly = os.path.join(tmp, m["name"] + ".ours.onnx"), os.path.join(tmp, m["name"] + ".poly.onnx")
        row = {"model": m["name"], "before": count(src)}
        t_ours, t_poly = [], []
        for _ in range(args.repeat):
            t, p = timed([sys.executable, "-m", "debugkit.cli.main", "surgeon", "sanitize", src, "-o", ours,
                          "--fold-constants", "-q"], env)
            t_ours.append(t)
            if p.returncode:
                row["ours_error"] = (p.stderr or p.stdout).strip().splitlines()[-1][:200]
            t, p = timed([args.polygraphy, "surgeon", "sanitize", src, "-o", poly, "--fold-constants"])
            t_poly.append(t)
            if p.returncode:
                row["poly_error"] = (p.stderr or p.stdout).strip().splitlines()[-1][:200]
        row["t_ours"], row["t_poly"] = min(t_ours), min(t_poly)
        row["ours"] = count(ours) if os.path.exists(ours) else None
        row["poly"] = count(poly) if os.path.exists(poly) else None
        row["before_all"] = count(src, True)
        row["ours_all"] = count(ours, True) if os.path.exists(ours) else None
        row["poly_all"] = count(poly, True) if os.path.exists(poly) else None
        feeds = make_feeds(m)
        try:
            ref = run_ort(src, feeds)
            got = run_ort(ours, feeds)
            row["rel_err"], row["note"] = compare(ref, got)
        except Exception as e:
            row["rel_err"], row["note"] = None, f"{type(e).__name__}: {str(e)[:150]}"
        rows.append(row)
        print(_fmt(row), flush=True)

    lines = ["| model | nodes before | ours | Polygraphy 0.53.6 | all nodes incl. bodies: before / ours / Polygraphy "
             "| ours time (s) | Polygraphy time (s) | ours vs original (ORT, max err / scale) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        err = "FAIL " + r["note"] if r["rel_err"] is None else (f"{r['rel_err']:.1e}" + (" ok" if r["rel_err"] <= 1e-5 else " FAIL"))
        lines.append(f"| {r['model']} | {r['before']} | {r['ours']} | {r['poly']} | "
                     f"{r['before_all']} / {r['ours_all']} / {r['poly_all']} | {r['t_ours']:.2f} | "
                     f"{r['t_poly']:.2f} | {err} |")
    le = sum(1 for r in rows if r["ours"] is not None and r["poly"] is not None and r["ours"] <= r["poly"])
    lt = sum(1 for r in rows if r["ours"] is not None and r["poly"] is not None and r["ours"] < r["poly"])
    ok = sum(1 for r in rows if r["rel_err"] is not None and r["rel_err"] <= 1e-5)
    le_all = sum(1 for r in rows if r["ours_all"] is not None and r["poly_all"] is not None
                 and r["ours_all"] <= r["poly_all"])
    summary = (f"{len(rows)} models: ours <= Polygraphy on {le} (all nodes incl. bodies: {le_all}), "
               f"strictly fewer nodes on {lt}; "
               f"outputs match the original (1e-5) on {ok}")
    print("\n" + "\n".join(lines) + "\n\n" + summary)
    if args.markdown:
        from native.files import output_file
        with output_file(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n\n" + summary + "\n")
    if args.json:
        from native.files import write_json
        write_json(args.json, rows, indent=1)
    return 0 if le == len(rows) and ok == len(rows) else 1


def _fmt(r):
    return (f"{r['model']:34s} before {r['before']:5d}  ours {r['ours']!s:>5}  poly {r['poly']!s:>5}  "
            f"t_ours {r['t_ours']:.2f}s t_poly {r['t_poly']:.2f}s  err {r['rel_err']} {r.get('note', '')} "
            f"{r.get('ours_error', '')} {r.get('poly_error', '')}")


if __name__ == "__main__":
    sys.exit(main())
