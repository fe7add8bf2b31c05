"""Per layer: what the second core buys. One engine, one process, blocks of inferences alternating between the CPU
pool on (DEBUGKIT_THREADS=N) and off (1), each layer's median wall time in both, and how the pool was used meanwhile.

    python tools/layer_scaling.py yolov8n [--threads 2] [--rounds 60] [--top 40] [--json FILE]

Columns: ms at 1 thread, ms at N, their ratio (1.00: the layer ran on one core), the worker's Python shares
(parallel_for items it ran itself, per inference), its GEMM shares (threads.gemm_shares run outside the GIL), and
the shares the caller took back from a worker that had not started (its CPU taken). Sums per tactic follow.
Wall time, so only blocks of rounds during which no other process used the CPUs (/proc/stat, --max-others) count;
the others are dropped and more are run, for up to --patience seconds. The engine is built once, at N threads, as
tools/benchmark.py builds it.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import find_path, manifest  # noqa: E402
from tools import benchmark as B  # noqa: E402


class _Counting:
    """An IProfiler that also reads the pool's counters after each layer, so each layer gets its own deltas."""

    def __init__(self, counters):
        self.counters = counters
        self.times = collections.defaultdict(list)
        self.uses = collections.defaultdict(lambda: collections.Counter())
        self._last = counters()

    def start_inference(self):
        self._last = self.counters()

    def report_layer_time(self, name, ms):
        now = self.counters()
        self.times[name].append(float(ms))
        for k in now:
            self.uses[name][k] += now[k] - self._last[k]
        self._last = now


def _pool_counters():
    """() -> {python, gemm, taken}: shares run by pool workers so far (a wrapper around threads._run_share that
    counts calls on worker threads), GEMM shares the workers finished, shares the callers took back."""
    from native.cpu import threads as T
    seen = {"python": 0, "taken": 0}
    run_share = T._run_share

    def counted(fn, items, idxs, results):
        if getattr(T._LOCAL, "worker", False):
            seen["python"] += 1
        return run_share(fn, items, idxs, results)
    T._run_share = counted
    take_over = T._Worker._take_over

    def counted_take(self):
        got = take_over(self)
        seen["taken"] += bool(got)
        return got
    T._Worker._take_over = counted_take

    def counters():
        pool = T._STATE["pool"] or []
        return {"python": seen["python"], "gemm": sum(int(w.flags[6]) for w in pool), "taken": seen["taken"]}
    return counters


def _cpu_ticks():
    """(busy ticks of all CPUs, this process's ticks, the time) from /proc (Linux), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            mine = f.read().rsplit(")", 1)[1].split()
        return sum(v) - v[3] - v[4], int(mine[11]) + int(mine[12]), time.perf_counter()
    except (OSError, ValueError, IndexError):
        return None


def _others_share(before, after) -> float:
    """The share of one CPU that other processes used between two _cpu_ticks() readings (0 where unknown)."""
    if before is None or after is None:
        return 0.0
    ticks = max(1.0, (after[2] - before[2]) * os.sysconf("SC_CLK_TCK"))
    return max(0, (after[0] - before[0]) - (after[1] - before[1])) / ticks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a corpus model name")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=60, help="inferences in each mode (alternating)")
    ap.add_argument("--top", type=int, default=40, help="layers shown, by their 1-thread time")
    ap.add_argument("--json", help="write every layer's row here")
    ap.add_argument("--block", type=int, default=8, help="rounds per block; a block is dropped when other "
                    "processes used more than --max-others of a CPU meanwhile (/proc/stat)")
    ap.add_argument("--max-others", type=float, default=0.1)
    ap.add_argument("--patience", type=float, default=600, help="seconds to wait for quiet blocks")
    a = ap.parse_args(argv)
    os.environ["DEBUGKIT_THREADS"] = str(a.threads)
    from native.cpu import threads as T
    T.tune()
    entry = {m["name"]: m for m in manifest()}[a.model]
    feeds = B.make_feeds(entry["feeds"])
    ctx, _, _ = B.build_engine(find_path(entry), feeds)
    tactics = {n.name: n.tactic_name for n in ctx.engine.graph.nodes}
    counters = _pool_counters()
    profs = {1: _Counting(counters), a.threads: _Counting(counters)}
    for _ in range(10):
        ctx.execute(dict(feeds))
    kept = blocks = 0
    give_up = time.time() + a.patience
    while kept < a.rounds and time.time() < give_up:
        quiet = _cpu_ticks()
        time.sleep(0.2)   # start a block only after 0.2 s with no other process on the CPUs
        if _others_share(quiet, _cpu_ticks()) > a.max_others:
            continue
        blocks += 1
        trial = {1: _Counting(counters), a.threads: _Counting(counters)}
        before = _cpu_ticks()
        for t in (1, a.threads) if blocks % 2 else (a.threads, 1):
            os.environ["DEBUGKIT_THREADS"] = str(t)
            ctx.profiler = None
            for _ in range(2):   # untimed: the pool's worker back to polling after a pause or a one-thread run
                ctx.execute(dict(feeds))
            ctx.profiler = trial[t]
            for _ in range(a.block):
                ctx.execute(dict(feeds))
        others = _others_share(before, _cpu_ticks())
        if others <= a.max_others:     # nobody else held a CPU meanwhile: keep this block
            kept += a.block
            for t in trial:
                for name, ts in trial[t].times.items():
                    profs[t].times[name] += ts
                for name, u in trial[t].uses.items():
                    profs[t].uses[name].update(u)
    ctx.profiler = None
    os.environ["DEBUGKIT_THREADS"] = str(a.threads)
    if not kept:
        print(f"no block of {a.block} rounds ran without other processes on the CPUs ({blocks} tried in "
              f"{a.patience:.0f} s)")
        return 1
    a.rounds = kept
    rows = []
    for name, ts in profs[1].times.items():
        one = statistics.median(ts)
        many = statistics.median(profs[a.threads].times.get(name, [0.0]))
        u = profs[a.threads].uses[name]
        rows.append({"layer": name, "tactic": tactics.get(name), "ms_1": one, "ms_n": many,
                     "python_shares": u["python"] / a.rounds, "gemm_shares": u["gemm"] / a.rounds,
                     "taken_back": u["taken"] / a.rounds})
    t1, tn = sum(r["ms_1"] for r in rows), sum(r["ms_n"] for r in rows)
    print(f"{a.model}: layers {t1:.3f} ms at 1 thread, {tn:.3f} at {a.threads} ({t1 / tn:.2f}x); load "
          f"{os.getloadavg()[0]:.2f}; {kept} rounds kept from {blocks} blocks of {a.block}")
    print(f"{'layer':48s} {'tactic':26s} {'ms@1':>7s} {'ms@N':>7s} {'x':>5s} {'py':>4s} {'gemm':>4s} {'back':>4s}")
    for r in sorted(rows, key=lambda r: -r["ms_1"])[:a.top]:
        print(f"{r['layer'][:48]:48s} {str(r['tactic'])[:26]:26s} {r['ms_1']:7.3f} {r['ms_n']:7.3f} "
              f"{r['ms_1'] / max(r['ms_n'], 1e-9):5.2f} {r['python_shares']:4.1f} {r['gemm_shares']:4.1f} "
              f"{r['taken_back']:4.1f}")
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        b = by[r["tactic"]]
        b[0] += 1
        b[1] += r["ms_1"]
        b[2] += r["ms_n"]
    print(f"\n{'tactic':30s} {'layers':>6s} {'ms@1':>7s} {'ms@N':>7s} {'x':>5s} {'saved':>6s}")
    for k, (cnt, one, many) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{str(k):30s} {cnt:6d} {one:7.3f} {many:7.3f} {one / max(many, 1e-9):5.2f} {one - many:6.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
