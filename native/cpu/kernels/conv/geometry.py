"""Convolution geometry: ONNX auto_pad, output sizes, padding, and the strided views a kernel tap reads.

Also used by pooling (same windows, another reduction)."""
from __future__ import annotations

import itertools

import numpy as np

from native.shared.conv_geometry import geometry, resolve_pads  # noqa: F401  (the math both devices use)


def pad_input(x, pre, post, value=0):
    """x with `pre`/`post` elements of `value` around its spatial dims (negative pads crop). One pass: only the
    border is filled, the interior is copied once."""
    if not any(pre) and not any(post):
        return x
    nd = len(pre)
    if min(pre) < 0 or min(post) < 0:
        sl = (slice(None), slice(None)) + tuple(slice(max(-a, 0), (x.shape[2 + i] - max(-b, 0)))
                                                for i, (a, b) in enumerate(zip(pre, post)))
        return pad_input(x[sl], [max(a, 0) for a in pre], [max(b, 0) for b in post], value)
    shape = x.shape[:2] + tuple(s + a + b for s, a, b in zip(x.shape[2:], pre, post))
    xp = np.empty(shape, dtype=x.dtype)
    for i in range(nd):
        ax = 2 + i
        lead = (slice(None),) * ax
        if pre[i]:
            xp[lead + (slice(0, pre[i]),)] = value
        if post[i]:
            xp[lead + (slice(shape[ax] - post[i], None),)] = value
    xp[(slice(None), slice(None)) + tuple(slice(a, a + s) for s, a in zip(x.shape[2:], pre))] = x
    return xp


def tap_slices(taps, dil, strides, out):
    """The slice tuple (over spatial dims) of the padded input that kernel tap `taps` reads for every output."""
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(taps, dil, strides, out))


def flat_taps(xp, ks, strides, dil, out):
    """2-D tap views with long inner loops: flatten the padded [N, C, Hp, Wp] input (padding more rows if
    needed) so output (oy, ox) of tap (i, j) reads flat[i*d*Wp + j*d + s*(oy*Wp + ox)] -- for each tap one
    1-D strided slice of length Ho*Wp. Returns (views list, crop) where crop([N, C, Ho*Wp]) -> [N, C, Ho, Wo]."""
    n, c, hp, wp = xp.shape
    (sh, sw), (dh, dw), (ho, wo) = strides, dil, out
    if sh != sw:
        return None
    st = sh
    length = ho * wp
    need = (ks[0] - 1) * dh * wp + (ks[1] - 1) * dw + st * (length - 1) + 1
    if need > hp * wp:
        rows = -(-(need - hp * wp) // wp)
        xp = np.concatenate([xp, np.zeros((n, c, rows, wp), xp.dtype)], axis=2)
    xf = xp.reshape(n, c, -1)
    views = []
    for i, j in itertools.product(range(ks[0]), range(ks[1])):
        off = i * dh * wp + j * dw
        views.append(xf[:, :, off:off + st * (length - 1) + 1:st])
    return views, lambda acc: acc.reshape(n, c, ho, wp)[:, :, :, :wo]
