"""Pooling tactics beside `strided-taps` (pooling.py), timed against it:

  separable-sum  2-D AVERAGE pooling as two 1-D passes: the kw taps of each row summed into [.., Hp, Wo], then the
                 kh rows of those sums; (kw-1) + (kh-1) whole-slab adds instead of kh*kw - 1, and another rounding
                 order (row partial sums) than the tap loop's.
  nhwc-window    MAX / AVERAGE pooling (2-D windows or global) computed channels-last between two reformats
                 (NCHW -> NHWC in, back out), so its timed cost includes them; window sums in float64 and one
                 rounding, the global mean in float32 (numpy's pairwise sum).
  global-average-direct  global AVERAGE pooling of float32 maps as one compiled pass (jit_pool.global_average:
                 16 float64 running sums per channel, one rounding; the numba extra).

MAX pooling is exact whatever the order: its tactics differ only in speed. AVERAGE tactics differ in rounding.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.kernels.pooling import _pad, pool_geometry
from native.tactics import Tactic, register_tactic


def _windowed_2d(op, input_shapes, types):
    p = op.params
    if p.get("type", "MAX") not in types:
        return f"{'/'.join(types)} pooling only"
    if p.get("num_outputs", 1) > 1:
        return "no indices output"
    if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
        return "2-D pooling only"
    if not p.get("global") and len(p.get("window") or []) != 2:
        return "2-D windows only"
    return None


def _count_mask(spatial, pre, post, extra, excludes_padding):
    """1 where a window element counts toward an average's divisor (as pooling.py's strided-taps counts)."""
    mask = np.ones(spatial, dtype=np.float64)
    if excludes_padding:
        return _pad(mask, pre, post, extra, 0)
    return _pad(np.pad(mask, list(zip(pre, post)), constant_values=1), [0, 0], [0, 0], extra, 0)


def _separable_sum(xp, ks, strides, dil, out, dtype):
    """Window sums of a padded [..., Hp, Wp] array: kw column taps first, then kh rows."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = ks, strides, dil, out
    cols = xp[..., 0:sw * (wo - 1) + 1:sw].astype(dtype, copy=True)
    for j in range(1, kw):
        cols += xp[..., j * dw:j * dw + sw * (wo - 1) + 1:sw]
    acc = cols[..., 0:sh * (ho - 1) + 1:sh, :].copy()
    for i in range(1, kh):
        acc += cols[..., i * dh:i * dh + sh * (ho - 1) + 1:sh, :]
    return acc


@register_tactic
class SeparableSum(Tactic):
    """2-D AVERAGE pooling as a row pass then a column pass (see the module docstring)."""
    kind, name = "Pooling", "separable-sum"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        why = _windowed_2d(op, input_shapes, ("AVERAGE",))
        return why or ("windowed pooling only" if op.params.get("global") else None)

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        p = op.params
        ks, strides, dil, pre, post, extra, out = pool_geometry(p, list(x.shape[2:]))
        acc = _separable_sum(_pad(x, pre, post, extra, 0), ks, strides, dil, out, x.dtype)
        mask = _count_mask(list(x.shape[2:]), pre, post, extra, p.get("average_count_excludes_padding", True))
        count = _separable_sum(mask, ks, strides, dil, out, np.float64)
        y = (acc / np.maximum(count, 1)).astype(x.dtype)
        return [apply_post_ops(y, op, inputs) if p.get("post_ops") else y]


@register_tactic
class NhwcWindow(Tactic):
    """MAX / AVERAGE pooling channels-last between two reformats (see the module docstring)."""
    kind, name = "Pooling", "nhwc-window"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        return _windowed_2d(op, input_shapes, ("MAX", "AVERAGE"))

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        p = op.params
        kind = p.get("type", "MAX")
        xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))            # reformat in
        if p.get("global"):
            y = xh.max(axis=(1, 2)) if kind == "MAX" else xh.mean(axis=(1, 2), dtype=x.dtype)
            y = y.reshape(x.shape[0], x.shape[1], 1, 1)
            return [apply_post_ops(y, op, inputs) if p.get("post_ops") else y]
        spatial = list(x.shape[2:])
        ks, strides, dil, pre, post, extra, out = pool_geometry(p, spatial)
        fill = (-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min) if kind == "MAX" else 0
        width = [(0, 0), (pre[0], post[0] + extra[0]), (pre[1], post[1] + extra[1]), (0, 0)]
        if any(a or b for a, b in width):
            xh = np.pad(xh, width, constant_values=fill)
        s = xh.strides
        n, c = xh.shape[0], xh.shape[3]
        win = np.lib.stride_tricks.as_strided(
            xh, (n, out[0], out[1], ks[0], ks[1], c),
            (s[0], s[1] * strides[0], s[2] * strides[1], s[1] * dil[0], s[2] * dil[1], s[3]), writeable=False)
        if kind == "MAX":
            yh = win.max(axis=(3, 4))
        else:
            mask = _count_mask(spatial, pre, post, extra, p.get("average_count_excludes_padding", True))
            ms = mask.strides
            mwin = np.lib.stride_tricks.as_strided(
                mask, (out[0], out[1], ks[0], ks[1]),
                (ms[0] * strides[0], ms[1] * strides[1], ms[0] * dil[0], ms[1] * dil[1]), writeable=False)
            count = np.maximum(mwin.sum(axis=(2, 3)), 1)[None, :, :, None]
            yh = (win.sum(axis=(3, 4), dtype=np.float64) / count).astype(x.dtype)
        y = np.ascontiguousarray(yh.transpose(0, 3, 1, 2))            # reformat out
        return [apply_post_ops(y, op, inputs) if p.get("post_ops") else y]


@register_tactic
class GlobalAverageDirect(Tactic):
    """Global AVERAGE pooling of a float32 [N, C, *spatial] map: per channel the float64 mean of jit_pool's
    global_average, rounded once (strided-taps rounds numpy's pairwise float64 sum the same way: equal but for the
    summation order)."""
    kind, name = "Pooling", "global-average-direct"
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        if not p.get("global") or p.get("type", "MAX") != "AVERAGE" or p.get("num_outputs", 1) > 1:
            return "global AVERAGE pooling only"
        s = input_shapes[0] if input_shapes else None
        if s is not None and len(s) < 3:
            return "a spatial map (rank >= 3) only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 input only"
        if _global_average() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.ascontiguousarray(inputs[0], np.float32)
        shape = x.shape[:2] + (1,) * (x.ndim - 2)
        dst = outputs[0] if outputs else None
        if dst is None or tuple(dst.shape) != shape or dst.dtype != x.dtype or not dst.flags.c_contiguous:
            dst = np.empty(shape, x.dtype)
        _global_average()(x.reshape(x.shape[0] * x.shape[1], -1), dst.reshape(-1))
        return [dst]


def _global_average():
    """jit_pool.global_average where numba runs (and DEBUGKIT_JIT is not 0), else None."""
    return jit.kernel("global_average")
