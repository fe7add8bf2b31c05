"""A stride-1 2-D convolution on NCHW maps as a compiled direct GEMM, no patch matrix (the `jit` extra): the
direct-panels tactic (native/cpu/kernels/conv/direct_panels.py).

    conv_panels(x [C*H*W], wb [MB, K, 8], bias [MB*8], ep [3], y [M, T], geo [GEO], offs, uoffs, masks, b, tile,
                p0, p1, m0, m1)
        Output channels m0..m1 (m0 a multiple of 8) at output pixels in "wide" order (t = h * W + w over the
        input's width W, T = Ho * W; w < Wo are the real ones) in 32-pixel panels p0..p1. Patch row q = (c, i, j)
        (K = C*kh*kw of them) of a panel is the run of 32 input floats at t0 + offs[0, q] (offs[0, q] = c*H*W +
        (i - PT)*W + j - PL), zero at the lanes whose column w + j - PL leaves the row or whose row h + i - PT
        leaves the map (masks[offs[1, q]], worked out per panel: the padding). Every block of 8 output channels
        sweeps the panel's rows straight from x (16 AVX-512 accumulators: 8 channels x 32 pixels; 4 channels
        without AVX-512), then bias, LEAKY_RELU (alpha = ep[0]) and clip to [ep[1], ep[2]] (as
        jit_act.bias_steps_inplace computes them) on the way out to y[m, t]. A panel whose runs would leave x (the
        map's first and last) is gathered into b [K, 32] first. The weights are packed [MB, K, 8]: block b's
        channels 8b..8b+7 (zero past M) at each k, so a block's 8 broadcasts per k share one cache line.
        `tables(geo)` makes offs and uoffs, `scratch(geo)` masks, b and tile (one per thread); `crop` copies the
        real pixels out of a wide map. A small map (H*W <= 64 kh kw) is copied once with a margin instead.
    conv_share(args int64 *, code)   (a numba @cfunc: conv_share.address)
        conv_panels on one half (code & 1) of the output channels or of the panels (`block` says which) from an
        argument block, the form threads.kernel_shares runs on the caller and the CPU pool's worker without the GIL.
    conv_block(args, x, y)   both halves on the calling thread (one thread).

Why: oww_embedding's 1x3 and 3x1 convolutions on [1, 24..96, H, W] maps (W 32 down to 2) went through im2col-gemm:
a patch matrix copy of K x Ho*Wo floats, OpenBLAS re-packing both operands each call, a separate epilogue pass
(bias, LeakyRelu, max) over the output: 32-76 GMAC/s on one core; this loop 70-100 (AVX-512 masked loads for the
padding lanes, the block's accumulators in registers). What it took (numba / LLVM): every index unsigned (a signed
one gets a negative-index check per float: no vector loop), the input and scratch as real arrays (a carray of an
address or a view of columns left the accumulators stored every k: 5-7x slower), the epilogue in one pass of
constant-length loops, the sweep in a function of its own with one call site.

Numerics: each output a chain of fused multiply-adds over k = (c, i, j) in order from zero (as the panel GEMM),
then + bias, then LEAKY_RELU and clip: its own rounding, tolerance-tested. An output's floats depend only on its
pixel and channel, not on the panels a call covers, so any split over threads gives the same floats.

Module level (numba's disk cache finds it in the next process; it keys conv_share by this file, so after editing
jit_panel_gemm's _block / _f32_at, touch this one too); imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_panel_gemm import MR, NR, WIDE, _block, _f32_at

ROWS = MR if WIDE else 4      # output channels a block (the weights are packed in blocks of MR either way)
_ZERO = np.float32(0.0)
_FMA = dict(nogil=True, error_model="numpy", cache=True, fastmath={"contract"})
# geo words (conv_panels' geo): the map and kernel
(C, H, W, KH, KW, PL, HO, T, M, PT, PR) = range(11)
GEO = 11
# conv_share's argument block: X and Y first (threads.kernel_shares sets them per call), the geo words at G0, then
# the operands' addresses and the panels
X, Y, G0 = 0, 1, 2
(WB, BIAS, EP, OFFS, UOFFS, MASKS, EDGE, TILE, MB, P, SPLIT, BY_CHANNELS) = range(G0 + GEO, G0 + GEO + 12)
WORDS = G0 + GEO + 12


def _pointer_to(t):
    @intrinsic
    def at(typingctx, addr):
        """The pointer at an address (int64)."""
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return types.CPointer(t)(addr), codegen
    return at


_i64_at, _u64_at, _b_at = _pointer_to(types.int64), _pointer_to(types.uint64), _pointer_to(types.boolean)


@numba.njit(**_FMA)
def _edge(x, b, t0, offs, mrow, masks):
    """b[q * NR + l] = x[t0 + offs[q] + l] where that is inside x and masks[mrow[q], l] (else 0): a panel whose
    runs leave x (the map's first and last; every panel of a map under 32 pixels). Unsigned indices, as `_sweep`."""
    n = x.shape[0]
    for q in range(offs.shape[0]):
        mk = masks[mrow[q]]
        s = t0 + offs[q]
        lo = min(NR, max(0, -s))
        hi = max(lo, min(NR, n - s))
        row = b[q]
        for l in range(lo):
            row[l] = _ZERO
        us, ulo = np.uint64(s + lo), np.uint64(lo)
        for l in range(hi - lo):
            ul = np.uint64(l)
            row[ulo + ul] = x[us + ul] if mk[ulo + ul] else _ZERO
        uhi = np.uint64(hi)
        for l in range(NR - hi):
            row[uhi + np.uint64(l)] = _ZERO


@numba.njit(inline="always", **_FMA)
def _sweep(acc, wk, c0, src, t0, offs, mrow, masks, k):
    """acc[r, l] = sum over q of wk[q, c0 + r] * (src[t0 + offs[q] + l] where masks[mrow[q], l], else 0) for ROWS
    channels: fused multiply-adds in q order from zero, straight from the input (no patch panel). t0 and offs are
    unsigned: a signed index gets a negative-index check per float (no vector loop); src and masks must be arrays
    (a carray of an address, or a view of columns, left the accumulators stored every q: 5-7x slower)."""
    for r in range(ROWS):
        for l in range(NR):
            acc[r, l] = _ZERO
    if WIDE:
        for q in range(k):
            a0, a1, a2, a3 = wk[q, 0], wk[q, 1], wk[q, 2], wk[q, 3]
            a4, a5, a6, a7 = wk[q, 4], wk[q, 5], wk[q, 6], wk[q, 7]
            base = t0 + offs[q]
            mk = masks[mrow[q]]
            for l in range(NR):
                v = src[base + np.uint64(l)]
                v = v if mk[l] else _ZERO
                acc[0, l] += a0 * v
                acc[1, l] += a1 * v
                acc[2, l] += a2 * v
                acc[3, l] += a3 * v
                acc[4, l] += a4 * v
                acc[5, l] += a5 * v
                acc[6, l] += a6 * v
                acc[7, l] += a7 * v
    else:
        for q in range(k):
            a0, a1, a2, a3 = wk[q, c0], wk[q, c0 + 1], wk[q, c0 + 2], wk[q, c0 + 3]
            base = t0 + offs[q]
            mk = masks[mrow[q]]
            for l in range(NR):
                v = src[base + np.uint64(l)]
                v = v if mk[l] else _ZERO
                acc[0, l] += a0 * v
                acc[1, l] += a1 * v
                acc[2, l] += a2 * v
                acc[3, l] += a3 * v


@numba.njit(inline="always", **_FMA)
def _out(acc, dst, r0, d0, bias, m0, alpha, lo, hi):
    """The block's ROWS rows + bias[m0 + r], LEAKY_RELU (v < 0: v * alpha), clip to [lo, hi] with NaN kept (as
    jit_act.bias_steps_inplace computes each; alpha 1 and [-inf, inf] leave v as it is) into dst[r0 + r, d0:d0 +
    NR]: one pass of constant-length loops without branches (jit_panel_gemm._flush says why; d0 unsigned, as
    `_sweep`'s indices; the steps as passes over dst cost 2-4x this)."""
    for r in range(ROWS):
        row = dst[r0 + r]
        bv = bias[m0 + r]
        for l in range(NR):
            v = acc[r, l] + bv
            a = v * alpha
            v = a if v < _ZERO else v
            u = v if v > lo else lo
            u = u if u < hi else hi
            row[d0 + np.uint64(l)] = u if v == v else v


@numba.njit(**_FMA)
def _panel(wb, src, t0, offs, mrow, masks, k, y, y0, nv, m0, m1, bias, ep, tile):
    """Output channels m0..m1 (m0 a multiple of ROWS), ROWS at a time, over one panel (`_sweep`'s operands) into
    y[m0:m1, y0:y0 + nv]. A function of its own, its block on its own stack: inlined into conv_panels, LLVM stored
    the accumulators every k."""
    acc = carray(_block(), (MR, NR))
    alpha, lo, hi = ep[0], ep[1], ep[2]
    for mb in range(m0, m1, ROWS):
        _sweep(acc, wb[mb // MR], mb % MR, src, t0, offs, mrow, masks, k)
        whole = nv == NR and mb + ROWS <= m1
        dst, r0, d0 = (y, mb, np.uint64(y0)) if whole else (tile, 0, np.uint64(0))
        _out(acc, dst, r0, d0, bias, mb, alpha, lo, hi)   # one call site: two left acc in memory
        if not whole:
            for r in range(min(ROWS, m1 - mb)):
                for l in range(nv):
                    y[mb + r, y0 + l] = tile[r, l]


@numba.njit(**_FMA)
def conv_panels(x, wb, bias, ep, y, geo, offs, uoffs, masks, b, tile, p0, p1, m0, m1):
    if p1 <= p0 or m1 <= m0:
        return
    c_n, h, w, kh, kw, pl, pt = geo[C], geo[H], geo[W], geo[KH], geo[KW], geo[PL], geo[PT]
    k = c_n * kh * kw
    t_n, hw = geo[T], h * w
    pb = geo[HO] + kh - 1 - h - pt
    before = pt * w + pl
    lo, hi = -before, (c_n - 1) * hw + (kh - 1 - pt) * w + kw - 1 - pl + NR   # the runs' extent about t0
    padded = pl > 0 or geo[PR] > 0 or pt > 0 or pb > 0   # (no padding: the lanes past a row's end are cropped)
    cols = np.arange(w + NR) % w       # a pixel's column and row from its offset in its row's start (no division
    rows = np.arange(w + NR) // w      # a lane)
    small = hw <= 64 * kh * kw         # a small map: every panel reads x with a margin (one copy; edge panels gather
    xp = np.zeros(before + c_n * hw + max(pb, 0) * w + NR + kw if small else 0, np.float32)   # K rows one by one)
    if small:
        xp[before:before + c_n * hw] = x
    for p in range(p0, p1):
        t0 = p * NR
        if padded:
            c0, r0 = t0 % w, t0 // w
            for i in range(kh):
                for j in range(kw):
                    mk = masks[i * kw + j]
                    for l in range(NR):
                        col = cols[c0 + l] + j - pl
                        row = r0 + rows[c0 + l] + i - pt
                        mk[l] = col >= 0 and col < w and row >= 0 and row < h
        nv = min(NR, t_n - t0)
        if small:
            _panel(wb, xp, np.uint64(t0 + before), uoffs[0], offs[1], masks, k, y, t0, nv, m0, m1, bias, ep, tile)
        elif t0 + lo >= 0 and t0 + hi <= c_n * hw:
            _panel(wb, x, np.uint64(t0), uoffs[0], offs[1], masks, k, y, t0, nv, m0, m1, bias, ep, tile)
        else:
            _edge(x, b, t0, offs[0], offs[1], masks)
            _panel(wb, b.reshape(-1), np.uint64(0), uoffs[1], offs[2], masks, k, y, t0, nv, m0, m1, bias, ep, tile)


@numba.njit(nogil=True, cache=True)
def crop(wide, y, w):
    """y [N, M, Ho, Wo] = the first Wo columns of each row of wide [N, M, Ho * w] (numpy's strided copy: 3x)."""
    n, m, ho, wo = y.shape
    for i in range(n):
        for c in range(m):
            src, dst = wide[i, c], y[i, c]
            for r in range(ho):
                s, d = src[r * w:r * w + wo], dst[r]
                for l in range(wo):
                    d[l] = s[l]


def tables(geo):
    """(offs int64 [3, K]: each patch row's input offset about the pixel, its mask row (i * KW + j; KH * KW, all
    true, without padding), KH * KW; uoffs uint64 [2, K]: the offsets, q * NR) of a layer: conv_panels' constant
    operands, made once."""
    c_n, h, w, kh, kw, pl, pt, pr, ho = (int(geo[i]) for i in (C, H, W, KH, KW, PL, PT, PR, HO))
    c, i, j = np.meshgrid(np.arange(c_n), np.arange(kh), np.arange(kw), indexing="ij")
    padded = pl > 0 or pr > 0 or pt > 0 or ho + kh - 1 - h - pt > 0
    offs = np.empty((3, c_n * kh * kw), np.int64)
    offs[0] = (c * h * w + (i - pt) * w + j - pl).reshape(-1)
    offs[1] = (i * kw + j).reshape(-1) if padded else kh * kw
    offs[2] = kh * kw
    uoffs = np.empty((2, offs.shape[1]), np.uint64)
    uoffs[0] = offs[0].astype(np.uint64)       # (negative ones wrap: t0 + them is read only where it is >= 0)
    uoffs[1] = np.arange(offs.shape[1], dtype=np.uint64) * NR
    return offs, uoffs


def scratch(geo, parts=2):
    """(masks bool [parts, KH * KW + 1, NR] (the last row all true), edge panel [parts, K, NR], tile [parts, ROWS,
    NR]): one of each per thread running conv_panels."""
    taps, k = int(geo[KH] * geo[KW]), int(geo[C] * geo[KH] * geo[KW])
    return np.ones((parts, taps + 1, NR), np.bool_), np.zeros((parts, k, NR), np.float32), \
        np.zeros((parts, ROWS, NR), np.float32)


@numba.njit(nogil=True, cache=True)
def _half(a, part):
    """conv_panels on half `part` of the layer whose argument block is a (`block`)."""
    geo = a[G0:G0 + GEO]
    c, h, w, kh, kw = geo[C], geo[H], geo[W], geo[KH], geo[KW]
    k = c * kh * kw
    mb, m, t_n = a[MB], geo[M], geo[T]
    x = carray(_f32_at(a[X]), (c * h * w,))
    wb = carray(_f32_at(a[WB]), (mb, k, MR))
    bias = carray(_f32_at(a[BIAS]), (mb * MR,))
    ep = carray(_f32_at(a[EP]), (3,))
    y = carray(_f32_at(a[Y]), (m, t_n))
    offs = carray(_i64_at(a[OFFS]), (3, k))
    uoffs = carray(_u64_at(a[UOFFS]), (2, k))
    masks = carray(_b_at(a[MASKS]), (2, kh * kw + 1, NR))[part]
    b = carray(_f32_at(a[EDGE]), (2, k, NR))[part]
    tile = carray(_f32_at(a[TILE]), (2, ROWS, NR))[part]
    p0, p1, m0, m1 = 0, a[P], 0, m
    if a[BY_CHANNELS]:
        m0, m1 = (a[SPLIT], m) if part else (0, a[SPLIT])
    else:
        p0, p1 = (a[SPLIT], a[P]) if part else (0, a[SPLIT])
    conv_panels(x, wb, bias, ep, y, geo, offs, uoffs, masks, b, tile, p0, p1, m0, m1)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def conv_share(ptr, code):
    _half(carray(ptr, (WORDS,)), code & 1)


@numba.njit(nogil=True, cache=True)
def conv_block(a, x, y):
    """Both halves of the layer whose argument block is a, here, on x [C, H, W] into y [M, T] (C-contiguous):
    one compiled call with 3 arguments (conv_panels' 15 cost ~1 us of dispatch)."""
    a[X] = np.int64(x.ctypes.data)
    a[Y] = np.int64(y.ctypes.data)
    _half(a, 0)
    _half(a, 1)


def block(geo, arrays):
    """The argument block of one layer and input shape: `geo` (the GEO words), `arrays` {word: array} (WB, BIAS,
    EP, OFFS, UOFFS, MASKS, EDGE, TILE: their addresses; the caller keeps them alive as long as the block). The
    halves: by output channels (at a multiple of 8) where the weights outweigh the input (a small map: each thread
    then streams half the weights) or the map is one panel, else by panels. Words X and Y are set per call
    (threads.kernel_shares)."""
    out = np.zeros(WORDS, np.int64)
    out[G0:G0 + GEO] = geo
    for k, v in arrays.items():
        out[k] = v.ctypes.data
    mb = arrays[WB].shape[0]
    out[MB] = mb
    out[P] = -(-int(geo[T]) // NR)
    out[BY_CHANNELS] = int(mb >= 2 and (out[P] < 2 or arrays[WB].size > geo[C] * geo[H] * geo[W]))
    out[SPLIT] = (mb // 2) * MR if out[BY_CHANNELS] else out[P] // 2
    return out
