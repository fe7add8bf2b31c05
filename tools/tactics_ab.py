"""Engines of one model that differ only in the tactics they may use, timed interleaved in one process: the A/B for
a tactic change (a new tactic, a timing rule) without two trees or two processes.

    python tools/tactics_ab.py MODEL[,MODEL...] --exclude NAME[,NAME...] [--iterations 100] [--onnxrt] [--json F]

Per model: engine A built with `tactic_sources` excluding the named tactics, engine B with every tactic, in the
process tuned as the CLI tunes it (the CPU pool and BLAS threads; DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1 for one
thread); the tactics each chose per layer kind, the largest difference between their outputs, then A and B (and
ONNX Runtime with --onnxrt) timed in alternating blocks (debugkit.benchmark.interleaved, as `bench --compare
onnxrt` times); prints the medians and B / A. MODEL: a corpus name (tests/corpus/models.json; exported models need
DEBUGKIT_CORPUS) or an ONNX file (feeds from its declared input shapes, dynamic dims 1).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chosen(ctx) -> dict:
    """{layer kind: {tactic: layers}} of a built engine."""
    out = collections.defaultdict(collections.Counter)
    for node, tactic, *_ in ctx.engine.executor.steps:
        out[node.kind][tactic.name] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


def model_input(name):
    """(path, feeds) of a corpus name or an ONNX file."""
    import tools.benchmark as b
    if os.path.exists(name):
        return name, b.make_feeds(b.model_feed_spec(name, {}))
    entries = {m["name"]: m for m in b.manifest()}
    if name not in entries:
        raise SystemExit(f"tactics_ab: '{name}' is neither a file nor a corpus model ({', '.join(sorted(entries))})")
    path = b.find_path(entries[name])
    if path is None:
        raise SystemExit(f"tactics_ab: corpus model '{name}' is not available here (DEBUGKIT_CORPUS / model cache)")
    return path, b.make_feeds(entries[name]["feeds"])


def compare(path, feeds, exclude, iterations, onnxrt=False) -> dict:
    """Build A (without `exclude`) and B (everything), time them interleaved; the row this tool prints."""
    from debugkit.benchmark import interleaved
    from native.cpu import threads
    threads.tune()
    ctxs, row = {}, {"exclude": sorted(exclude)}
    import tools.benchmark as b
    for label, sources in (("A", {"-" + t for t in exclude}), ("B", None)):
        ctxs[label], build_s, _ = b.build_engine(path, feeds, tactic_sources=sources)
        row[label] = {"build_s": round(build_s, 3), "tactics": chosen(ctxs[label])}
    outs = [ctxs[k].execute(dict(feeds)) for k in ("A", "B")]
    row["max_abs_diff"] = max((float(np.max(np.abs(outs[0][k].astype(np.float64) - outs[1][k])))
                               if outs[0][k].size else 0.0) for k in outs[0])
    fns = {k: (lambda c=c: c.execute(dict(feeds))) for k, c in ctxs.items()}
    if onnxrt:
        sess, f = b.ort_session(path, feeds)
        fns["ORT"] = lambda: sess.run(None, f)
    times, _ = interleaved(fns, iterations, 0)
    for k, t in times.items():
        row.setdefault(k, {})["median_ms"] = float(np.median(t)) * 1e3
    row["B_over_A"] = row["B"]["median_ms"] / row["A"]["median_ms"]
    return row


def line(name, row) -> str:
    text = (f"{name}: A {row['A']['median_ms']:.3f} ms, B {row['B']['median_ms']:.3f} ms, B / A "
            f"{row['B_over_A']:.3f}; max |B - A| {row['max_abs_diff']:.2e}")
    if "ORT" in row:
        text += f"; ORT {row['ORT']['median_ms']:.3f} ms (A {row['A']['median_ms'] / row['ORT']['median_ms']:.2f}x, " \
                f"B {row['B']['median_ms'] / row['ORT']['median_ms']:.2f}x)"
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", help="comma-separated corpus names or ONNX files")
    ap.add_argument("--exclude", required=True, help="comma-separated tactic names engine A may not use")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--onnxrt", action="store_true", help="also time ONNX Runtime in the same loop")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    exclude = [t for t in a.exclude.split(",") if t]
    from native.errors import UsageError
    rows = {}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M UTC', time.gmtime())}"
          f"; A: without {', '.join(exclude)}; B: every tactic", flush=True)
    for name in [m for m in a.models.split(",") if m]:
        path, feeds = model_input(name)
        try:
            rows[name] = compare(path, feeds, exclude, a.iterations, a.onnxrt)
        except UsageError as e:
            print(f"tactics_ab: {e}", file=sys.stderr)
            return 2
        ta, tb = rows[name]["A"]["tactics"], rows[name]["B"]["tactics"]
        kinds = [k for k in tb if ta.get(k) != tb[k]]     # the layer kinds whose choices differ
        for label, t in (("A", ta), ("B", tb)):
            print(f"  {name} {label}: " + ("; ".join(f"{k} {t.get(k, {})}" for k in kinds) or "the same tactics"),
                  flush=True)
        print(line(name, rows[name]), flush=True)
    if a.json:
        from native.files import write_json
        write_json(a.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
