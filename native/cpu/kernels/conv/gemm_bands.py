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
Without numba, or when the worker is not polling, the same two bands run as parallel_for's Python parts.
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
    their GEMM reads them; after(p0, p1) is the epilogue of y's rows p0..p1 once computed. Where `band_cut` allows,
    two bands: as GEMM shares on the caller and the pool's polling worker, else (no numba, or the worker not
    polling: this also leaves it polling for the next GEMM) as two parallel_for parts, each gather, product and
    epilogue. Returns whether it split; else one gather, one product, one epilogue here."""
    p, kdim = cols.shape
    m = k.shape[1]
    cut = band_cut(p, kdim, m)
    if cut is None or not cols.dtype == k.dtype == y.dtype == np.float32:   # (the cut's floats: sgemm's, tested)
        gather(0, p)
        np.matmul(cols, k, out=y)
        after(0, p)
        return False
    shares = [threads.gemm_share(cols[p0:p1], k, y[p0:p1]) for p0, p1 in ((0, cut), (cut, p))]
    gather(cut, p)
    if threads.gemm_shares(shares, between=lambda: after(0, cut), before=lambda: gather(0, cut)):
        after(cut, p)
        return True

    def part(band):
        p0, p1 = band
        if p0 == 0:             # the worker's band was gathered above
            gather(p0, p1)
        np.matmul(cols[p0:p1], k, out=y[p0:p1])
        after(p0, p1)
    threads.parallel_for(part, [(0, cut), (cut, p)])
    return True


def band_shares(a, bands) -> bool:
    """A sub-band of each of conv2d_gemm's two bands of output rows (its two-thread split), each y_i = a @ b_i, as
    GEMM shares: the caller fills the worker's b, posts its product, fills its own while the worker computes, and
    runs its own (conv2d_gemm uses it for 1x1 convolutions, whose b is a view of the input: no fill).
    bands: two (y_i [M, cols] view, fill(buf=None) -> b_i [K, cols], b_i's element count or None where fill
    makes no copy (a view: 1x1 convolutions)). The same cblas_sgemm calls numpy's matmul of the same bands makes,
    so the same floats as the Python parts; False, with nothing computed, where a band is not one plain float32
    GEMM of at least two rows and columns, or the pool cannot take shares (the caller then runs parallel_for)."""
    m, kdim = a.shape
    if a.dtype != np.float32 or m < 2 or a.strides[1] != 4:
        return False
    (y0, fill0, size0), (y1, fill1, size1) = bands
    if any(y.dtype != np.float32 or y.shape[1] < 2 or y.strides[1] != 4 for y in (y0, y1)):
        return False
    b1 = fill1()
    buf0 = None if size0 is None else np.empty(size0, np.float32)
    b0 = fill0(buf0) if buf0 is None else buf0.reshape(kdim, -1)   # (filled in `before` when it copies)
    if any(b.dtype != np.float32 or b.strides[1] != 4 for b in (b0, b1)):
        return False
    return threads.gemm_shares([threads.gemm_share(a, b0, y0), threads.gemm_share(a, b1, y1)],
                               before=None if buf0 is None else lambda: fill0(buf0))
