"""Ours vs ONNX Runtime in single-thread CPU time, for a shared machine: one row per corpus model.

    DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1 python tools/cpu_time_bench.py --models oww_hey_jarvis,bert_mini
                                                                              [--rounds 9] [--calls N]

Wall-clock latency on a 2-core machine that other processes share moves with their load; the CPU time of the
calling process (time.process_time) does not, as long as everything runs on one thread. So our engine runs with
its CPU pool off (DEBUGKIT_THREADS=1, and OpenBLAS on one thread), and ONNX Runtime is opened as
debugkit.benchmark.onnxrt_session opens it but with one intra-op thread and spinning off (a spinning worker would
bill its idle wait to this process). The two are timed in alternating blocks of `--calls` executes (ABBA order over
`--rounds` rounds) after a warm-up; the table gives each one's median block time per call and the ratio.
Two-thread numbers come from tools/benchmark.py on a quiet machine; this is the number to compare changes by.
Feeds, models and builds are those of tools/benchmark.py --all-corpus (random seeded feeds, timed tactics).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import CorpusUnavailable, find_path, manifest  # noqa: E402
from tools import benchmark as B  # noqa: E402


def ort_one_thread(path, feeds):
    """ONNX Runtime with the benchmarks' settings, except one intra-op thread and no spinning."""
    from debugkit import benchmark as DB
    s = dict(DB.onnxrt_settings(threads=1), spinning=False)
    sess = DB.onnxrt_session(path, s)
    return sess, {i.name: feeds[i.name] for i in sess.get_inputs()}


def time_pair(ours, ort, rounds: int, calls: int) -> tuple[float, float]:
    """(ours, ORT) median ms per call over `rounds` blocks of `calls` each, the order alternating per round."""
    times = {"ours": [], "ort": []}
    fns = {"ours": ours, "ort": ort}
    for r in range(rounds):
        for name in ("ours", "ort") if r % 2 == 0 else ("ort", "ours"):
            fn = fns[name]
            t0 = time.process_time()
            for _ in range(calls):
                fn()
            times[name].append((time.process_time() - t0) / calls * 1e3)
    return float(np.median(times["ours"])), float(np.median(times["ort"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="comma-separated corpus model names")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=0, help="executes per block (default: ~30 ms worth)")
    a = ap.parse_args(argv)
    if os.environ.get("DEBUGKIT_THREADS") != "1" or os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("warning: DEBUGKIT_THREADS=1 and OPENBLAS_NUM_THREADS=1 are not both set: CPU time then counts "
              "more than one thread", file=sys.stderr)
    entries = {m["name"]: m for m in manifest()}
    print(f"OpenBLAS core type: {os.environ.get('OPENBLAS_CORETYPE') or 'unpinned'}; load "
          f"{os.getloadavg()[0]:.2f}")
    print("| model | ours ms (CPU) | ORT ms (CPU, 1 thread) | ours / ORT |\n|---|---|---|---|")
    for name in a.models.split(","):
        if name not in entries:
            print(f"| {name} | not in the corpus manifest | | |")
            continue
        try:
            path = find_path(entries[name])
        except CorpusUnavailable as e:
            print(f"| {name} | unavailable: {e} | | |")
            continue
        feeds = B.make_feeds(entries[name]["feeds"])
        ctx, _, _ = B.build_engine(path, feeds)
        sess, f = ort_one_thread(path, feeds)

        def ours():
            ctx.execute(dict(feeds))

        def ort():
            sess.run(None, f)
        for _ in range(20):
            ours()
            ort()
        calls = a.calls
        if calls <= 0:
            t0 = time.process_time()
            for _ in range(5):
                ours()
            calls = max(5, int(0.03 / max((time.process_time() - t0) / 5, 1e-6)))
        o, r = time_pair(ours, ort, a.rounds, calls)
        print(f"| {name} | {o:.4f} | {r:.4f} | {o / r:.2f} |", flush=True)


if __name__ == "__main__":
    main()
