"""2-D max pooling as one compiled loop (the `jit` extra), reached through `native.cpu.jit.kernel`, and global
average pooling (reached through pooling_variants.GlobalAverageDirect):

    max_pool_2d(x [R, H, W], y [R, Ho, Wo], cols [H, Wo] (scratch), r0, r1, kh, kw, sh, sw, dh, dw, ph, pw)
        planes r0..r1 of pooling.py's separable max pool (strided-taps), read from the unpadded input: per plane the
        max over the kw column taps of each input row into `cols`, then the max over the kh row taps, each pair
        combined as np.maximum combines it (the larger, b on ties, NaN kept) and in its order; taps that fall in the
        padding are skipped (numpy's padding is -inf, which np.maximum never picks over a number), and a window with
        no tap inside the input is -inf. The same floats as the numpy passes, without the padded copy, the
        strided whole-slab passes and their temporaries (resnet18's 64x112x112 stem pool, one thread: 0.28 ms
        against 0.52).

    max_pool_2d_cl(x [R, H, W], y [R, Ho, Wo], r0, r1, kh, kw, sh, sw, dh, dw, ph, pw)
        max_pool_2d's floats for planes too narrow for its row loops to vectorise (YOLO's SPPF: 5x5 / 1 over
        [128, 10, 10], rows of 10): the planes turned channel-last in a scratch, so that each pair of taps is one
        loop over the planes, then turned back (0.09 -> ~0.03 ms a pool on one thread).

    global_average(x [R, S], y [R])
        y[r] = the mean of row r: 16 float64 running sums (vectorised), added up in order, / S, rounded to x's
        type (global average pooling's mean; se_direct's). numpy's float64 add.reduce over the two trailing axes of
        a small map runs a buffered casting loop: mobilenetv3's [576, 7, 7] ~20 us, this ~3.

Module level, so numba's disk cache finds it again in the next process (native/cpu/jit_rows.py says why).
"""
from __future__ import annotations

import numba
import numpy as np

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)

_NJIT = dict(nogil=True, cache=True)


@numba.njit(inline="always")
def _mx(a, b):
    """np.maximum's pair as its loops compute it: the larger, b on ties (max(-0.0, 0.0) is 0.0, max(0.0, -0.0) is
    -0.0), NaN in either kept (a's when both are). mx(-inf, v) is v, bit for bit. Two selects, no branch: the
    loops vectorise (spelled `(a > b) | (a != a)` as one select, LLVM vectorises them ~1.5x worse)."""
    t = a if a > b else b
    return a if a != a else t


@numba.njit(inline="always")
def _inside(n_in, n_out, k, s, d, pad):
    """[lo, hi): the outputs whose k taps (stride s, dilation d, `pad` before) all lie inside an axis of n_in."""
    lo = min(n_out, -(-pad // s))
    last = n_in - 1 - (k - 1) * d + pad
    return lo, (max(lo, min(n_out, last // s + 1)) if last >= 0 else lo)


@numba.njit(**_NJIT)
def max_pool_2d(x, y, cols, r0, r1, kh, kw, sh, sw, dh, dw, ph, pw):
    # The loops below keep their bounds and their branches outside the innermost loop: a test inside it, or an
    # index numba may have to wrap around (one that may be negative), keeps LLVM from vectorising it (~5x slower).
    h, w = x.shape[1], x.shape[2]
    ho, wo = y.shape[1], y.shape[2]
    ninf = x.dtype.type(-np.inf)
    qa, qb = _inside(w, wo, kw, sw, dw, pw)
    pa, pb = _inside(h, ho, kh, sh, dh, ph)
    n = qb - qa
    for r in range(r0, r1):
        src = x[r]
        # the max over the column taps of every input row into cols: the border columns tap by tap
        for i in range(h):
            row = src[i]
            for e in range(qa + wo - qb):
                q = e if e < qa else qb + e - qa
                m = ninf
                for j in range(kw):
                    c = q * sw + j * dw - pw
                    if 0 <= c < w:
                        m = _mx(m, row[c])
                cols[i, q] = m
        # the inner columns (every tap inside the row) from slices indexed from 0; the common windows spelled out
        if n > 0:
            b = qa * sw - pw
            if dw == 1 and kw == 3 and sw == 1:
                for i in range(h):
                    seg, mid = src[i, b:], cols[i, qa:qb]
                    for k in range(n):
                        mid[k] = _mx(_mx(seg[k], seg[k + 1]), seg[k + 2])
            elif dw == 1 and kw == 3 and sw == 2:
                for i in range(h):
                    seg, mid = src[i, b:], cols[i, qa:qb]
                    for k in range(n):
                        mid[k] = _mx(_mx(seg[2 * k], seg[2 * k + 1]), seg[2 * k + 2])
            elif dw == 1 and kw == 2 and sw == 2:   # PaddleOCR's 2x2 / 2 pool
                for i in range(h):
                    seg, mid = src[i, b:], cols[i, qa:qb]
                    for k in range(n):
                        mid[k] = _mx(seg[2 * k], seg[2 * k + 1])
            elif dw == 1 and kw == 5 and sw == 1:
                for i in range(h):
                    seg, mid = src[i, b:], cols[i, qa:qb]
                    for k in range(n):
                        mid[k] = _mx(_mx(_mx(_mx(seg[k], seg[k + 1]), seg[k + 2]), seg[k + 3]), seg[k + 4])
            else:
                for i in range(h):
                    seg, mid = src[i, b:], cols[i, qa:qb]
                    for k in range(n):
                        mid[k] = seg[k * sw]
                    for j in range(1, kw):
                        tap = seg[j * dw:]
                        for k in range(n):
                            mid[k] = _mx(mid[k], tap[k * sw])
        # then the max over the row taps: border rows tap by tap, inner rows with the common windows spelled out
        dst = y[r]
        for e in range(pa + ho - pb):
            p = e if e < pa else pb + e - pa
            acc = dst[p]
            acc[:] = ninf
            for i in range(kh):
                a = p * sh + i * dh - ph
                if 0 <= a < h:
                    ca = cols[a]
                    for q in range(wo):
                        acc[q] = _mx(acc[q], ca[q])
        if kh == 3:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1, c2 = dst[p], cols[t], cols[t + dh], cols[t + 2 * dh]
                for q in range(wo):
                    acc[q] = _mx(_mx(c0[q], c1[q]), c2[q])
        elif kh == 2:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1 = dst[p], cols[t], cols[t + dh]
                for q in range(wo):
                    acc[q] = _mx(c0[q], c1[q])
        elif kh == 5:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0, c1, c2, c3, c4 = (dst[p], cols[t], cols[t + dh], cols[t + 2 * dh], cols[t + 3 * dh],
                                           cols[t + 4 * dh])
                for q in range(wo):
                    acc[q] = _mx(_mx(_mx(_mx(c0[q], c1[q]), c2[q]), c3[q]), c4[q])
        else:
            for p in range(pa, pb):
                t = p * sh - ph
                acc, c0 = dst[p], cols[t]
                for q in range(wo):
                    acc[q] = c0[q]
                for i in range(1, kh):
                    ca = cols[t + i * dh]
                    for q in range(wo):
                        acc[q] = _mx(acc[q], ca[q])


@numba.njit(**_NJIT)
def max_pool_2d_cl(x, y, r0, r1, kh, kw, sh, sw, dh, dw, ph, pw):
    # planes r0..r1 turned channel-last (each pair of taps then one long vectorised loop over the planes), pooled,
    # and turned back. Every window's chain starts from -inf and takes its taps inside the plane in order:
    # _mx(-inf, v) is v bit for bit, so the same pairs as max_pool_2d's (which starts inner windows at their
    # first tap)
    h, w = x.shape[1], x.shape[2]
    ho, wo = y.shape[1], y.shape[2]
    n = r1 - r0
    ninf = x.dtype.type(-np.inf)
    xt = np.empty((h, w, n), x.dtype)
    for i in range(h):
        for c in range(w):
            t = xt[i, c]
            for r in range(n):
                t[r] = x[r0 + r, i, c]
    cols = np.empty((h, wo, n), x.dtype)
    for i in range(h):
        for q in range(wo):
            m = cols[i, q]
            m[:] = ninf
            for j in range(kw):
                c = q * sw + j * dw - pw
                if 0 <= c < w:
                    t = xt[i, c]
                    for r in range(n):
                        m[r] = _mx(m[r], t[r])
    yt = np.empty((ho, wo, n), x.dtype)
    for p in range(ho):
        for q in range(wo):
            acc = yt[p, q]
            acc[:] = ninf
            for i in range(kh):
                a = p * sh + i * dh - ph
                if 0 <= a < h:
                    t = cols[a, q]
                    for r in range(n):
                        acc[r] = _mx(acc[r], t[r])
    for r in range(n):
        for p in range(ho):
            for q in range(wo):
                y[r0 + r, p, q] = yt[p, q, r]


@numba.njit(**_NJIT)
def global_average(x, y):
    r_n, s_n = x.shape
    part = np.empty(16, np.float64)
    s16 = s_n - s_n % 16
    for r in range(r_n):
        row = x[r]
        for q in range(16):
            part[q] = 0.0
        for k0 in range(0, s16, 16):
            for q in range(16):
                part[q] += row[k0 + q]
        acc = 0.0
        for q in range(16):
            acc += part[q]
        for k in range(s16, s_n):
            acc += row[k]
        y[r] = acc / s_n
