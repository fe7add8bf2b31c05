"""One convolution GEMM y = cols @ k split into two bands of pixel rows run at once, outside the GIL, on the caller
and the CPU pool's polling worker (threads.gemm_shares, native/cpu/jit_gemm_share.py), with the patch gather and
the epilogue per band.

nhwc-gemm ran its patch copy, its one GEMM and its reformat back to NCHW on the calling thread, so a two-thread run
gained nothing on its layers (yolov8n's stride-2 convolutions, resnet18's nhwc layers: 1.0x per layer, h65's
profile); nhwc-gemm-bands splits the same work with parallel_for, whose Python shares hand the GIL back and forth.
Here the caller gathers the worker's band of patches, posts that band's GEMM (one row-major cblas_sgemm: the call
numpy's matmul makes for the whole product, on fewer rows), gathers its own band while the worker computes,
runs its own GEMM, then its band's epilogue, waits, and runs the other band's epilogue.

Numerics: the unsplit product's floats, bit for bit. OpenBLAS sums each output over K in the same order whatever
rows surround it, except that its kernels treat rows by their place in a tile of UNROLL_M rows (24 on the Haswell
kernels this workplace pins, 32 on SkylakeX's: a cut elsewhere changed outputs in the last bits), and that SkylakeX's
builds run products under 28 * 512 * 512 multiply-adds through a direct kernel with its own order. So the cut is a
multiple of ROW_UNIT = 96 pixel rows and each band keeps SHARE_MIN_MACS: every such cut gave the whole product's bits
on both kernels (yolov8n's and resnet18's nhwc shapes, every admissible cut; tests/native/test_gemm_bands.py checks
the installed BLAS), and the epilogue is the same element-wise code per band, so the tactic stays the same tactic.
Without numba, or when the worker is not polling, nothing is split: the whole product runs as before.
"""
from __future__ import annotations

import numpy as np

from native.cpu import threads
from native.cpu.kernels.conv import tuning

CALLER_SHARE = 0.42        # the caller also gathers the worker's band first and runs both epilogues
ROW_UNIT = 96              # a multiple of OpenBLAS's sgemm row tiles (24 Haswell, 32 SkylakeX): cuts keep the floats
SHARE_MIN_MACS = 1 << 23   # per band: above SkylakeX's direct-sgemm bound (28 * 512 * 512)


def band_cut(p: int, kdim: int, m: int) -> int | None:
    """The caller's band [0, cut) of the p patch rows of a [p, kdim] x [kdim, m] product, or None where it stays
    whole (one thread, under the parallel threshold, or a band under SHARE_MIN_MACS)."""
    if threads.num_threads() < 2 or p * kdim * m < tuning.PARALLEL_MIN_MACS:
        return None
    cut = ROW_UNIT * min(max(1, round(p * CALLER_SHARE / ROW_UNIT)), (p - 1) // ROW_UNIT)
    if cut <= 0 or min(cut, p - cut) * kdim * m < SHARE_MIN_MACS:
        return None
    return cut


def banded_gemm(cols, k, y, gather, after) -> bool:
    """y = cols @ k (C-contiguous: cols [P, K], k [K, M], y [P, M]). gather(p0, p1) fills cols' rows p0..p1 before
    their GEMM reads them; after(p0, p1) is the epilogue of y's rows p0..p1 once computed. Split in two bands on the
    caller and the pool's worker where `band_cut` allows and the pool takes it (returns True); else one gather, one
    product, one epilogue here (False)."""
    p, kdim = cols.shape
    m = k.shape[1]
    cut = band_cut(p, kdim, m)
    if cut is not None and cols.dtype == k.dtype == y.dtype == np.float32:
        pc, pk, py = cols.ctypes.data, k.ctypes.data, y.ctypes.data
        shares = [np.array([p1 - p0, m, kdim, pc + 4 * p0 * kdim, kdim, pk, m, py + 4 * p0 * m, m], np.int64)
                  for p0, p1 in ((0, cut), (cut, p))]
        gather(cut, p)
        if threads.gemm_shares(shares, between=lambda: after(0, cut), before=lambda: gather(0, cut)):
            after(cut, p)
            return True
        gather(0, cut)
    else:
        gather(0, p)
    np.matmul(cols, k, out=y)
    after(0, p)
    return False
