"""Kernel shares on / off for one corpus model, interleaved in one process (the two-thread A/B of h75).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/kernel_shares_ab.py [--models timm-mobilenetv3_small_100]
                                                                                  [--rounds 10] [--calls 40]

Builds each model twice with the process tuned (the CPU pool on, as tools/benchmark.py runs): as the builder's timing
picks (the `*-shares` tactics among the candidates: native/cpu/kernels/inverted_residual.py), and with every
`*-shares` tactic refused; then times both, `--calls` executes a block, the order alternating per round, and prints
each one's median block latency, their ratio, which tactics the first build picked, how many GIL-free shares the pool's
worker was posted, and the load average before and after. Two-thread numbers mean something only on a quiet machine
(load < 0.5 at the start): on a busy one the worker rarely has a CPU and both engines run on the caller.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import find_path, manifest  # noqa: E402
from tools import benchmark as B  # noqa: E402


def build(path, feeds, shares: bool):
    """An execution context built at the feeds' shapes, with or without the *-shares tactics."""
    from backends.engine import BuilderConfig, Runtime, parse_onnx
    from backends.engine.build import profile_from_shapes
    from backends.engine.builder import Builder
    from backends.engine.builder.config import AlgorithmSelector
    from backends.engine.plan import serialize_plan

    class NoShares(AlgorithmSelector):
        def select_algorithms(self, context, choices):
            keep = [i for i, c in enumerate(choices) if not c["tactic_name"].endswith("-shares")]
            return keep or list(range(len(choices)))
    net, _ = parse_onnx(path)
    cfg = BuilderConfig()
    profile = profile_from_shapes(net, {k: v.shape for k, v in feeds.items()})
    if profile is not None:
        cfg.add_optimization_profile(profile)
    if not shares:
        cfg.algorithm_selector = NoShares()
    plan = serialize_plan(Builder().build_graph(net, cfg, timing_feeds=feeds), cfg)
    return Runtime().deserialize_engine(plan).create_execution_context()


def block_ms(ctx, feeds, calls):
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        ctx.execute(dict(feeds))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="timm-mobilenetv3_small_100")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=40)
    a = ap.parse_args(argv)
    from native.cpu import threads
    threads.tune()
    gs, _ = threads._gemm_share()
    for name in [m for m in a.models.split(",") if m]:
        entry = next(m for m in manifest() if m["name"] == name)
        path = find_path(entry)
        feeds = B.make_feeds(entry["feeds"])
        load0 = os.getloadavg()[0]
        on, off = build(path, feeds, True), build(path, feeds, False)
        picked = [t.name for _, t, *_ in on.engine.executor.steps if t.name.endswith("-shares")]
        k = next(iter(on.execute(dict(feeds))))
        diff = float(np.abs(on.execute(dict(feeds))[k] - off.execute(dict(feeds))[k]).max())
        res = {"on": [], "off": []}
        w = threads._pool()[0] if threads._pool() else None
        done0 = int(w.flags[6]) if w is not None else 0
        for r in range(a.rounds):
            for key, ctx in (("on", on), ("off", off)) if r % 2 == 0 else (("off", off), ("on", on)):
                ctx.execute(dict(feeds))
                res[key].append(block_ms(ctx, feeds, a.calls))
        worker = (int(w.flags[6]) - done0) if w is not None else 0
        med = {key: float(np.median(v)) for key, v in res.items()}
        line = (f"{name}: kernel shares on {med['on']:.3f} ms, off {med['off']:.3f} ms, on/off "
                f"{med['on'] / med['off']:.3f} (median of {a.rounds} blocks of {a.calls}); *-shares layers "
                f"{len(picked)} ({', '.join(sorted(set(picked)))}); GIL-free shares posted to the worker (GEMM or "
                f"kernel halves; run "
                f"by it or taken back) {worker}; max |on - off| {diff:.2e}; load {load0:.2f} -> "
                f"{os.getloadavg()[0]:.2f}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
