"""Optional numba-compiled CPU kernels (the `jit` extra: pip install debugkit[jit]).

Loops numpy cannot express in one pass, compiled once per process (and cached on disk by numba) where numba is
installed and DEBUGKIT_JIT is not 0. Each one computes exactly the floats of the numpy code it stands in for (the
same products, rounded, summed in the same order: no fused multiply-add, no reassociation), so a tactic that uses it
is the same tactic, bit for bit; the numpy path stays for everyone without numba and is what the default tests run.
`kernel(name)` returns the compiled function or None; the first call compiles (~0.5 s, then numba's cache).

    depthwise_cl_rows(xl [Hp, Wp, C], w [kh, kw, C], out [rows, Wo, C], r0, sh, sw, dh, dw)
        depthwise taps channels-last for output rows r0..r0+rows: per output, the first tap's product, then each
        further tap's product added in (i, j) order (the depthwise tactics' order); C is the vectorised inner loop.
    depthwise_nchw(xp [C, Hp, Wp], taps [kh*kw, C], y [C, Ho, Wo], kh, kw, sh, sw, dh, dw)
        the same sums NCHW, a row of outputs at a time (the vectorised inner loop runs along the row; a strided
        row is split into its phases first, so every tap reads unit-stride): few channels over large maps.
    hard_swish(x [n], y [n])  /  hard_sigmoid(x [n], y [n], alpha, beta)
        the activations' numpy passes (x * 1/6, + 0.5, clip to [0, 1], times x; x * alpha, + beta, clip) per element
        in one pass, each step rounded to x's type as numpy rounds it; `clip` as numpy's clip loop (NaN kept,
        -0.0 clipped to +0.0). y must not overlap x: hard_swish_inplace(x) / hard_sigmoid_inplace(x, alpha, beta)
        write x itself (two aliasing array arguments keep numba from vectorising the loop: 20x slower).
"""
from __future__ import annotations

import threading

from native import config

_LOCK = threading.Lock()
_KERNELS: dict = {}
_STATE = {"numba": None}   # None: not tried yet; False: unavailable


def available() -> bool:
    """numba importable and not switched off (DEBUGKIT_JIT=0)."""
    if not config.settings().jit:
        return False
    if _STATE["numba"] is None:
        try:
            import numba  # noqa: F401  (optional extra: imported on first use only)
            _STATE["numba"] = True
        except Exception:  # noqa: BLE001 - any failure to import means "no JIT"
            _STATE["numba"] = False
    return bool(_STATE["numba"])


def kernel(name: str):
    """The compiled kernel `name`, or None without numba (or with DEBUGKIT_JIT=0)."""
    if not available():
        return None
    fn = _KERNELS.get(name)
    if fn is None:
        with _LOCK:
            fn = _KERNELS.get(name)
            if fn is None:
                fn = _KERNELS[name] = _BUILDERS[name]()
    return fn


def _depthwise_cl_rows():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def depthwise_cl_rows(xl, w, out, r0, sh, sw, dh, dw):
        kh, kw, c = w.shape
        rows, wo = out.shape[0], out.shape[1]
        acc = np.empty(c, out.dtype)
        for r in range(rows):
            y0 = (r0 + r) * sh
            for ow in range(wo):
                x0 = ow * sw
                xs = xl[y0, x0]
                w0 = w[0, 0]
                for k in range(c):
                    acc[k] = xs[k] * w0[k]
                for i in range(kh):
                    for j in range(kw):
                        if i == 0 and j == 0:
                            continue
                        xs = xl[y0 + i * dh, x0 + j * dw]
                        wv = w[i, j]
                        for k in range(c):
                            acc[k] += xs[k] * wv[k]
                o = out[r, ow]
                for k in range(c):
                    o[k] = acc[k]
    return depthwise_cl_rows


def _depthwise_nchw():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def depthwise_nchw(xp, taps, y, kh, kw, sh, sw, dh, dw):
        c_n, ho, wo = y.shape
        wp = xp.shape[2]
        acc = np.empty(wo, y.dtype)
        # a horizontal stride > 1 reads every sw-th element: each input row is split into its sw phases first
        # (ph[p, m] = row[m * sw + p]), so every tap reads a unit-stride run of one phase
        span = (wp + sw - 1) // sw
        ph = np.empty((sw, span), y.dtype)
        for c in range(c_n):
            for oh in range(ho):
                y0 = oh * sh
                for i in range(kh):
                    xr = xp[c, y0 + i * dh]
                    if sw > 1:
                        for q in range(sw):
                            pq = ph[q]
                            for m in range((wp - q + sw - 1) // sw):
                                pq[m] = xr[m * sw + q]
                    for j in range(kw):
                        wv = taps[i * kw + j, c]
                        x0 = j * dw
                        src = xr[x0:x0 + wo] if sw == 1 else ph[x0 % sw, x0 // sw:x0 // sw + wo]
                        if i == 0 and j == 0:
                            for ow in range(wo):
                                acc[ow] = src[ow] * wv
                        else:
                            for ow in range(wo):
                                acc[ow] += src[ow] * wv
                yr = y[c, oh]
                for ow in range(wo):
                    yr[ow] = acc[ow]
    return depthwise_nchw


def _clip01():
    import numba

    @numba.njit(nogil=True, cache=True, inline="always")
    def clip01(t, zero, one):
        if t != t:      # NaN stays NaN, as numpy's clip loop keeps it
            return t
        t = t if t > zero else zero
        return t if t < one else one
    return clip01


def _hard_swish():
    import numba
    clip01 = _clip01()

    @numba.njit(nogil=True, cache=True)
    def hard_swish(x, y):
        sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
        zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
        for k in range(x.shape[0]):
            v = x[k]
            t = v * sixth
            t = t + half
            y[k] = v * clip01(t, zero, one)
    return hard_swish


def _hard_swish_inplace():
    # one array argument: with y aliasing x numba's loop cannot be vectorised (20x slower), so in place is its own
    import numba
    clip01 = _clip01()

    @numba.njit(nogil=True, cache=True)
    def hard_swish_inplace(x):
        sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
        zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
        for k in range(x.shape[0]):
            v = x[k]
            t = v * sixth
            t = t + half
            x[k] = v * clip01(t, zero, one)
    return hard_swish_inplace


def _hard_sigmoid():
    import numba
    clip01 = _clip01()

    @numba.njit(nogil=True, cache=True)
    def hard_sigmoid(x, y, alpha, beta):
        a, b = x.dtype.type(alpha), x.dtype.type(beta)
        zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
        for k in range(x.shape[0]):
            t = x[k] * a
            t = t + b
            y[k] = clip01(t, zero, one)
    return hard_sigmoid


def _hard_sigmoid_inplace():
    import numba
    clip01 = _clip01()

    @numba.njit(nogil=True, cache=True)
    def hard_sigmoid_inplace(x, alpha, beta):
        a, b = x.dtype.type(alpha), x.dtype.type(beta)
        zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
        for k in range(x.shape[0]):
            t = x[k] * a
            t = t + b
            x[k] = clip01(t, zero, one)
    return hard_sigmoid_inplace


_BUILDERS = {"depthwise_cl_rows": _depthwise_cl_rows, "depthwise_nchw": _depthwise_nchw, "hard_swish": _hard_swish,
             "hard_swish_inplace": _hard_swish_inplace, "hard_sigmoid": _hard_sigmoid,
             "hard_sigmoid_inplace": _hard_sigmoid_inplace}
