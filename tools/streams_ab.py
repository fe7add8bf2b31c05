"""Two streams on / off for corpus models, interleaved in one process (runtime/streams.py's two-thread A/B).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/streams_ab.py [--models yolov8n] [--rounds 20]
                                                                           [--calls 10] [--max-others 0.1] [--force]

Builds each model once with the process tuned (the CPU pool on, as tools/benchmark.py runs), then makes two
execution contexts of that engine: one whose plan was compiled with streams.ENABLED off (every layer in order, each
split over the pool), one with it on (groups of independent chains side by side, each keeping the way its own first
runs timed faster). Blocks of `--calls` executes alternate between them; a block pair counts only when no other
process used more than `--max-others` of a CPU meanwhile (/proc/stat; tools/layer_scaling.py's gate). Prints each
one's median latency, the median of the paired ratios, the region and what its trials chose, and whether the two contexts'
outputs are identical bit for bit.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import find_path, manifest  # noqa: E402
from tools import benchmark as B  # noqa: E402
from tools.layer_scaling import _cpu_ticks, _others_share  # noqa: E402


def block_ms(ctx, feeds, calls):
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ctx.execute(dict(feeds))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def contexts(engine, feeds, force=False):
    """(off, on): two contexts of `engine`, their plans compiled with streams off and on (the region timed; with
    `force`, its trials skipped: two streams)."""
    from backends.engine.runtime import streams
    was, trials = streams.ENABLED, streams.Region._trial
    if force:
        def two(self, env, workspace, stream):
            self.side = True
            self._two(env, workspace, stream)
        streams.Region._trial = two
    try:
        streams.ENABLED = False
        off = engine.create_execution_context()
        for _ in range(4):
            off.execute(dict(feeds))
        streams.ENABLED = True
        on = engine.create_execution_context()
        for _ in range(4 + 2 * (streams.WARM + 2 * (streams.TRIALS + 1))):
            on.execute(dict(feeds))
    finally:
        streams.ENABLED, streams.Region._trial = was, trials
    return off, on


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="yolov8n")
    ap.add_argument("--rounds", type=int, default=20, help="block pairs kept per model")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--max-others", type=float, default=0.1)
    ap.add_argument("--patience", type=float, default=300)
    ap.add_argument("--force", action="store_true", help="two streams without the region's trials (on a machine "
                    "too busy for them to pick it)")
    a = ap.parse_args(argv)
    from backends.engine.runtime import streams
    from native.cpu import threads
    threads.tune()
    for name in [m for m in a.models.split(",") if m]:
        entry = next(m for m in manifest() if m["name"] == name)
        feeds = B.make_feeds(entry["feeds"])
        ctx, _, _ = B.build_engine(find_path(entry), feeds)
        load0 = os.getloadavg()[0]
        off, on = contexts(ctx.engine, feeds, a.force)
        regions = [u for cp in on.arenas.compiled.values() for u in cp.__dict__.get("_units", ((), ()))[0]
                   if isinstance(u, streams.Region)]
        x, y = off.execute(dict(feeds)), on.execute(dict(feeds))
        same = all(np.array_equal(x[k], y[k]) for k in x)
        res = {"on": [], "off": []}
        pairs, tried = [], 0
        give_up = time.time() + a.patience
        while len(pairs) < a.rounds and time.time() < give_up:
            tried += 1
            before = _cpu_ticks()
            got = {}
            for key, c in (("on", on), ("off", off)) if tried % 2 else (("off", off), ("on", on)):
                c.execute(dict(feeds))
                got[key] = block_ms(c, feeds, a.calls)
            if _others_share(before, _cpu_ticks()) > a.max_others:
                continue
            for key in got:
                res[key].append(got[key])
            pairs.append(got["on"] / got["off"])
        if not pairs:
            print(f"{name}: no quiet block pair in {a.patience:.0f} s ({tried} tried)")
            continue
        med = {key: statistics.median(v) for key, v in res.items()}
        print(f"{name}: streams on {med['on']:.3f} ms, off {med['off']:.3f} ms, on/off {med['on'] / med['off']:.3f} "
              f"(paired median {statistics.median(pairs):.3f}, {len(pairs)} of {tried} block pairs of {a.calls} kept); "
              f"outputs identical: {same}; load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
        for g in regions:
            waits = sum(len(e[7]) for e in g.order)
            tried = ", ".join(f"{statistics.median(b) * 1e3:.3f}" for _, b, _ in g.trials if b) or "-"
            alone = statistics.median([t for _, _, a in g.trials for t in a] or [float("nan")]) * 1e3
            print(f"  region from {g.name[:50]!r}: {len(g.streams[0])} + {len(g.streams[1])} layers, {waits} waits; "
                  f"{'two streams' if g.side else 'in order'} (its trials: two streams {tried} ms, in order "
                  f"{alone:.3f})")
        if not regions:
            print("  no region")
    return 0


if __name__ == "__main__":
    sys.exit(main())
