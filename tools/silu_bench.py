"""The *-polyexp tactics' compiled SiLU alone: ns an element, old loop against new, in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE DEBUGKIT_THREADS=1 python tools/silu_bench.py \
        [--lengths 80,320,6400,409600] [--total 65536] [--rounds 15] [--double] [--epilogue]

For each row length L: rows of L float32 (about --total elements in all; one row when L is larger), refreshed from
standard-normal * 4 values before each pass, run through the SiLU row by row from a compiled loop, as the
convolution kernels call it (no Python call a row). "new" is jit_act.silu_polyexp_inplace (interleaved
<16 x float> chains), "old" the per-element loop over jit_act._silu_poly that LLVM vectorised on its own (the
function before 2026-11-29 h85), "copy" the refresh alone (subtracted from both). With --epilogue the rows are the
channel planes of a convolution's output and the pass is jit_act.bias_steps_inplace with one SILU_POLYEXP step
(code 7 with --double: a halved GEMM) and a bias, against the old code's two loops a plane (+ bias, then the
element loop). Blocks alternate old / new / copy; each mode's figure is the minimum over --rounds blocks of process
time (one thread: time.process_time). Checks the two give the same bits.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _kernels(epilogue):
    import numba
    from native.cpu.jit_act import _silu_poly, bias_steps_inplace, silu_polyexp_inplace

    @numba.njit(error_model="numpy", nogil=True)
    def old_silu(x, double):
        for k in range(x.shape[0]):
            v = x[k]
            if double:
                v = v + v
            x[k] = _silu_poly(v)

    @numba.njit(error_model="numpy", nogil=True)
    def old_steps(y, bias, steps, res):
        double = steps[0, 0] == 7.0
        for c in range(y.shape[1]):
            row = y[0, c]
            bc = bias[c]
            for k in range(row.shape[0]):
                row[k] = row[k] + bc
            for k in range(row.shape[0]):
                v = row[k]
                if double:
                    v = v + v
                row[k] = _silu_poly(v)

    @numba.njit(nogil=True)
    def refresh(buf, src):
        for r in range(buf.shape[0]):
            row, s = buf[r], src[r]
            for k in range(row.shape[0]):
                row[k] = s[k]

    def rows_driver(fn):
        @numba.njit(nogil=True)
        def run(buf, src, bias, steps, double, reps):
            for _ in range(reps):
                for r in range(buf.shape[0]):
                    row, s = buf[r], src[r]
                    for k in range(row.shape[0]):
                        row[k] = s[k]
                    fn(row, double)
        return run

    def planes_driver(fn):
        @numba.njit(nogil=True)
        def run(buf, src, bias, steps, double, reps):
            res = np.empty((0, 0, 0), np.float32)
            for _ in range(reps):
                refresh(buf, src)
                fn(buf.reshape(1, buf.shape[0], buf.shape[1]), bias, steps, res)
        return run

    @numba.njit(nogil=True)
    def copy(buf, src, bias, steps, double, reps):
        for _ in range(reps):
            refresh(buf, src)
    if epilogue:
        return {"old": planes_driver(old_steps), "new": planes_driver(bias_steps_inplace), "copy": copy}
    return {"old": rows_driver(old_silu), "new": rows_driver(silu_polyexp_inplace), "copy": copy}


def _exhaustive():
    """old and new SiLU over every float32 (NaNs, infinities, subnormals, -0.0), plain and doubled, new on rows of
    65521 (so the last-vector overlap runs too): 0 when every output has the same bits (NaNs included)."""
    import numba
    from native.cpu.jit_act import _silu_poly, silu_polyexp_inplace

    @numba.njit(error_model="numpy", nogil=True)
    def old(x, double):
        for k in range(x.shape[0]):
            v = x[k]
            if double:
                v = v + v
            x[k] = _silu_poly(v)
    chunk, piece = 1 << 24, 65521
    bad = 0
    for double in (False, True):
        for start in range(0, 1 << 32, chunk):
            x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
            a, b = x.copy(), x.copy()
            old(a, double)
            for p in range(0, chunk, piece):   # rows of a prime length: every one ends in an overlapping vector
                silu_polyexp_inplace(b[p:p + piece], double)
            d = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
            if d:
                i = int(np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))[0])
                print(f"double={double}: {d} differ from {start:#x}, first input bits {start + i:#010x}")
            bad += d
        print(f"silu_bench --exhaustive: double={double}: all 2^32 inputs checked", flush=True)
    print("identical bits everywhere" if not bad else f"{bad} outputs differ")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="80,320,6400,409600")
    ap.add_argument("--total", type=int, default=65536, help="elements a pass (rows of L)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-s", type=float, default=0.05, help="about this long a block")
    ap.add_argument("--double", action="store_true", help="the doubling form (a GEMM's halved output)")
    ap.add_argument("--epilogue", action="store_true", help="bias + SiLU over channel planes (bias_steps_inplace)")
    ap.add_argument("--exhaustive", action="store_true",
                    help="instead: old and new over all 2^32 float32 bit patterns, both forms, bit for bit")
    a = ap.parse_args(argv)
    if a.exhaustive:
        return _exhaustive()
    ks = _kernels(a.epilogue)
    rng = np.random.default_rng(0)
    what = "bias_steps_inplace (bias + SiLU a plane)" if a.epilogue else "silu_polyexp_inplace a row"
    print(f"silu_bench: {what}, ns an element (process time, min of {a.rounds} blocks), double={a.double}")
    print(f"{'length':>8} {'rows':>5} {'old':>7} {'new':>7} {'new/old':>7}")
    steps = np.array([[7.0 if a.double else 6.0, 0.0, 0.0]])
    for n in (int(v) for v in a.lengths.split(",")):
        rows = max(1, a.total // n)
        src = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
        bias = rng.standard_normal(rows).astype(np.float32)
        outs = {}
        for name in ("old", "new"):
            buf = np.empty_like(src)
            ks[name](buf, src, bias, steps, a.double, 1)
            outs[name] = buf
        if not np.array_equal(outs["old"], outs["new"]):
            raise SystemExit(f"silu_bench: old and new differ at length {n}")
        buf = np.empty_like(src)
        t0 = time.process_time()
        ks["old"](buf, src, bias, steps, a.double, 10)
        reps = max(1, int(a.block_s / max((time.process_time() - t0) / 10, 1e-7)))
        best = {k: float("inf") for k in ks}
        for _ in range(a.rounds):
            for name, fn in ks.items():
                t0 = time.process_time()
                fn(buf, src, bias, steps, a.double, reps)
                best[name] = min(best[name], time.process_time() - t0)
        per = {k: (best[k] - best["copy"]) / (reps * src.size) * 1e9 for k in ("old", "new")}
        print(f"{n:>8} {rows:>5} {per['old']:7.3f} {per['new']:7.3f} {per['new'] / per['old']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
