"""How late the CPU pool's worker starts a Python share (threads.parallel_for), with its GIL grace on and off.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/handoff_latency.py [--rounds 20] [--calls 1500]
                                                                                [--size 96] [--gap-us 60] [--grace N]

Each call is a parallel_for of two items shaped like a kernel's bands: a little Python, then a numpy GEMM of two
[size, size] float32 matrices (numpy's BLAS, which releases the GIL); the caller runs item 0, the worker item 1.
Per call: the worker's start (its item's first line) after the caller's, and the call's wall time. Between calls
the caller alone runs a GEMM for about --gap-us (the other layers of a run). Blocks of --calls calls alternate
between threads.GIL_GRACE_POLLS at its value or --grace (on) and 0 (off: the worker asks for the GIL as soon as it
sees its job); only blocks during which other processes used under --max-others of a CPU (/proc/stat) count, for
up to --patience seconds. Prints the medians per mode, how many shares the caller took back (the worker without a
CPU), and the load average. Two-thread wall time: meaningful only on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.layer_scaling import _cpu_ticks, _others_share  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="quiet blocks per mode")
    ap.add_argument("--calls", type=int, default=1500,
                    help="parallel_for calls per block (~0.1 s: /proc/stat counts in 10 ms ticks)")
    ap.add_argument("--size", type=int, default=96, help="each item's GEMM is [size, size] x [size, size]")
    ap.add_argument("--gap-us", type=float, default=60.0, help="caller-only work between calls (us, roughly)")
    ap.add_argument("--grace", type=int, default=None, help="GIL grace polls of the 'on' mode (default: "
                                                              "threads.GIL_GRACE_POLLS)")
    ap.add_argument("--max-others", type=float, default=0.1, help="other processes' CPU share that voids a block")
    ap.add_argument("--patience", type=float, default=300.0, help="seconds to wait for quiet blocks")
    a = ap.parse_args(argv)
    from native.cpu import threads as T
    T.tune()
    if T.pool_size() < 2:
        print("handoff_latency: one CPU (or DEBUGKIT_THREADS=1): no pool to hand off to")
        return 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, a.size, a.size)).astype(np.float32)
    w = rng.standard_normal((a.size, a.size)).astype(np.float32)
    out = np.empty_like(x)
    started = [0.0, 0.0]
    clock = time.perf_counter

    def item(i):
        started[i] = clock()
        xi = x[i]
        np.matmul(xi, w, out=out[i])
        return i
    gap_x = rng.standard_normal((64, 64)).astype(np.float32)
    gap_out = np.empty_like(gap_x)
    one = clock()
    for _ in range(20):
        np.matmul(gap_x, gap_x, out=gap_out)
    gap_reps = max(1, int(a.gap_us / max(1e-3, (clock() - one) / 20 * 1e6)))
    default = T.GIL_GRACE_POLLS
    grace = default if a.grace is None else a.grace
    taken = {"n": 0}
    real_take = T._Worker._take_over

    def counted(self):
        got = real_take(self)
        taken["n"] += bool(got)
        return got
    T._Worker._take_over = counted
    modes = {"grace on": grace, "grace off": 0}
    delays = {k: [] for k in modes}
    walls = {k: [] for k in modes}
    takes = {k: 0 for k in modes}
    kept = {k: 0 for k in modes}
    load0 = os.getloadavg()[0]
    end = time.perf_counter() + a.patience
    r = 0
    while min(kept.values()) < a.rounds and time.perf_counter() < end:
        name = list(modes)[r % 2]
        T.GIL_GRACE_POLLS = modes[name]
        d, wl = [], []
        taken["n"] = 0
        before = _cpu_ticks()
        for _ in range(a.calls):
            for _ in range(gap_reps):
                np.matmul(gap_x, gap_x, out=gap_out)
            t0 = clock()
            T.parallel_for(item, [0, 1])
            wl.append(clock() - t0)
            d.append(started[1] - started[0])
        if _others_share(before, _cpu_ticks()) <= a.max_others:
            delays[name] += d
            walls[name] += wl
            takes[name] += taken["n"]
            kept[name] += 1
        r += 1
    T.GIL_GRACE_POLLS = default
    T._Worker._take_over = real_take
    print(f"parallel_for of 2 items ([{a.size}, {a.size}] GEMM each), {a.calls} calls a block, caller-only gap "
          f"~{a.gap_us:.0f} us; GIL_GRACE_POLLS {grace}; load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    for name in modes:
        if not delays[name]:
            print(f"{name}: no quiet block")
            continue
        print(f"{name}: worker starts {statistics.median(delays[name]) * 1e6:.1f} us after the caller (median; "
              f"p90 {np.percentile(delays[name], 90) * 1e6:.1f}), call {statistics.median(walls[name]) * 1e6:.1f} us; "
              f"{kept[name]} quiet blocks of {a.calls}, {takes[name]} shares taken back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
