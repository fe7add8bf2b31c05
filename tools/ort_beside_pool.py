"""ONNX Runtime beside our CPU pool's worker, in one process: after each block of our runs, an ORT block is timed
with the worker sent to sleep (`threads.rest`) or left to poll and doze; the two medians show what the worker's
naps cost ONNX Runtime's threads (why debugkit.benchmark.interleaved rests it at every switch).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/ort_beside_pool.py MODEL.onnx [--shape NAME:1x3x48x192]

Two-thread numbers mean something only on a quiet machine (load < 0.5)."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from native.cpu import threads  # noqa: E402
from tools import benchmark as B  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", default=[], help="NAME:DxDx... for an input with free dimensions")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args(argv)
    shapes = {s.split(":")[0]: [int(d) for d in s.split(":")[1].split("x")] for s in args.shape}
    threads.tune()
    try:
        feeds = B.make_feeds(B.model_feed_spec(args.model, shapes))
        ctx, _, _ = B.build_engine(args.model, feeds)
        sess, f = B.ort_session(args.model, feeds)
        res = {"rested": [], "dozing": []}
        for r in range(args.rounds):
            for mode in (("rested", "dozing") if r % 2 else ("dozing", "rested")):
                for _ in range(args.calls):
                    ctx.execute(dict(feeds))
                if mode == "rested":
                    threads.rest()
                time.sleep(0.05)    # ORT's own spin from its last block is over; our worker dozes unless rested
                ts = []
                for _ in range(args.calls):
                    t = time.perf_counter()
                    sess.run(None, f)
                    ts.append(time.perf_counter() - t)
                res[mode].append(np.median(ts))
    finally:
        threads.untune()
    med = {k: float(np.median(v)) * 1e3 for k, v in res.items()}
    print(f"{os.path.basename(args.model)}: ONNX Runtime {med['rested']:.3f} ms beside our rested worker, "
          f"{med['dozing']:.3f} ms beside it dozing ({args.rounds} rounds of {args.calls} calls; load "
          f"{os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
