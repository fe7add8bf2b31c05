"""CPU kernels: Resize (nearest / linear / cubic, every ONNX coordinate transformation, antialias) and
GridSample (Resize mode GRID_SAMPLE).

Resize is separable: per resized axis we build, for every output position, a few source indices and weights
(2 taps for linear, 4 for cubic, more when antialiasing a downscale) and combine `np.take` gathers along that
axis. Nearest is a single gather per axis. No per-pixel Python loops.
"""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu import jit
from native.limits import check_size
from native.shared.resize import axis_plan, cubic_kernel, interp_taps, nearest_index, source_coords  # noqa: F401
from native.tactics import simple_tactic


# Resize -----------------------------------------------------------------------------------------------------------

def _repeat_axes(y, repeats):
    """Nearest upsampling by integer factors {axis: f}: the last axis by a gather, the others through a
    broadcast view [.., n, f, ..] copied once (inner runs stay contiguous)."""
    last = y.ndim - 1
    if last in repeats:
        repeats = dict(repeats)
        f = repeats.pop(last)
        y = np.take(y, np.arange(y.shape[last] * f) // f, axis=last)
        if not repeats:
            return y
    expand, bshape, out = [], [], []
    for a, d in enumerate(y.shape):
        f = repeats.get(a)
        expand += [d, 1] if f else [d]
        bshape += [d, f] if f else [d]
        out.append(d * f if f else d)
    return np.broadcast_to(y.reshape(expand), bshape).reshape(out)


def _resize(x, p, roi, scales, sizes):
    mode = p.get("mode", "NEAREST").lower()
    ctm = p.get("coordinate_transformation", "half_pixel")
    y = x if mode == "nearest" or x.dtype.kind != "f" else x.astype(np.float64)
    if mode != "nearest":
        y = x.astype(np.float64)
    outside = None
    repeats = {}
    for axis, out_len, scale, r0, r1 in axis_plan(x, p, roi, scales, sizes):
        in_len = x.shape[axis]
        if out_len == in_len and scale == 1.0 and ctm != "tf_crop_and_resize":
            continue
        coords = source_coords(ctm, out_len, in_len, scale, r0, r1)
        if ctm == "tf_crop_and_resize":
            bad = (coords < 0) | (coords > in_len - 1)
            shape = [1] * x.ndim
            shape[axis] = out_len
            bad = bad.reshape(shape)
            outside = bad if outside is None else (outside | bad)
        if mode == "nearest":
            idx = nearest_index(coords, p.get("nearest_rounding", "round_prefer_floor"), in_len)
            f = out_len // in_len
            if f > 1 and f * in_len == out_len and np.array_equal(idx, np.arange(out_len) // f):
                repeats[axis] = f          # integer upsample: done below in one broadcast copy for all axes
            else:
                y = np.take(y, idx, axis=axis)
            continue
        idx, w = interp_taps(coords, in_len, mode, scale, p.get("antialias", False), p.get("cubic_coeff", -0.75),
                             p.get("exclude_outside", False))
        wshape = [1] * y.ndim
        wshape[axis] = out_len
        acc = None
        for t in range(idx.shape[1]):
            term = np.take(y, idx[:, t], axis=axis) * w[:, t].reshape(wshape)
            acc = term if acc is None else acc + term
        y = acc
    if repeats:
        y = _repeat_axes(y, repeats)
    if outside is not None:
        y = np.where(outside, p.get("extrapolation_value", 0.0), y)
    if y.dtype != x.dtype:
        y = np.rint(y).astype(x.dtype) if x.dtype.kind in "iu" else y.astype(x.dtype)
    return y


# GridSample -------------------------------------------------------------------------------------------------------

def _reflect(c, lo, hi):
    span = hi - lo
    if span <= 0:
        return np.zeros_like(c)
    c = np.abs(c - lo)
    flips = np.floor(c / span)
    extra = c - flips * span
    return np.where(flips % 2 == 0, lo + extra, hi - extra)


def _grid_sample(x, grid, p):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(p.get("grid_mode", "linear"), p.get("grid_mode", "linear"))
    padding = p.get("padding_mode", "zeros")
    align = bool(p.get("align_corners", 0))
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    nd = len(spatial)
    out_sp = grid.shape[1:-1]
    if x.size == 0 or grid.size == 0:   # an empty batch or grid: nothing to sample
        return np.zeros((n, c) + tuple(out_sp), x.dtype)
    coords = []
    for d in range(nd):                      # grid's last dim lists x (width) first
        g = grid[..., nd - 1 - d].astype(np.float64)
        size = spatial[d]
        v = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        if padding == "border":
            v = np.clip(v, 0, size - 1)
        elif padding == "reflection":
            v = _reflect(v, 0, size - 1) if align else np.clip(_reflect(v, -0.5, size - 0.5), 0, size - 1)
        coords.append(v.reshape(n, -1))
    xf = x.reshape(n, c, -1).astype(np.float64)

    def gather(idxs):
        valid = np.ones(idxs[0].shape, bool)
        flat = np.zeros(idxs[0].shape, np.int64)
        for d, i in enumerate(idxs):
            if padding == "zeros":
                valid &= (i >= 0) & (i < spatial[d])
            elif padding == "reflection":
                i = np.abs(i)
                i = np.where(i >= spatial[d], 2 * (spatial[d] - 1) - i, i)
            i = np.clip(i, 0, spatial[d] - 1)
            flat = flat * spatial[d] + i
        vals = np.take_along_axis(xf, flat[:, None, :], axis=2)
        return np.where(valid[:, None, :], vals, 0.0)

    if mode == "nearest":
        y = gather([np.rint(v).astype(np.int64) for v in coords])
    else:
        taps = []
        for v in coords:
            base = np.floor(v)
            t = v - base
            if mode == "linear":
                offs, ws = [0, 1], [1 - t, t]
            else:
                offs = [-1, 0, 1, 2]
                a = p.get("cubic_coeff", -0.75)
                ws = [cubic_kernel(t + 1, a), cubic_kernel(t, a), cubic_kernel(1 - t, a), cubic_kernel(2 - t, a)]
            taps.append([(base.astype(np.int64) + o, w) for o, w in zip(offs, ws)])
        y = 0.0
        for combo in itertools.product(*taps):
            w = np.prod([cw for _, cw in combo], axis=0)
            y = y + gather([ci for ci, _ in combo]) * w[:, None, :]
    return y.reshape((n, c) + tuple(out_sp)).astype(x.dtype)


def integer_upsample(x, p, roi, scales, sizes):
    """(fh, fw) where this Resize is nearest upsampling of x's last two axes by integer factors (every other axis
    kept, no crop-and-resize), else None: the output is then x's values repeated, the case `upsample_nearest` copies."""
    if p.get("mode", "NEAREST").lower() != "nearest" or x.ndim < 2 or \
            p.get("coordinate_transformation", "half_pixel") == "tf_crop_and_resize":
        return None
    factors = {}
    for axis, out_len, scale, r0, r1 in axis_plan(x, p, roi, scales, sizes):
        in_len = x.shape[axis]
        if out_len == in_len and scale == 1.0:
            continue
        f = out_len // in_len if in_len else 0
        if axis < x.ndim - 2 or f < 1 or f * in_len != out_len:
            return None
        coords = source_coords(p.get("coordinate_transformation", "half_pixel"), out_len, in_len, scale, r0, r1)
        idx = nearest_index(coords, p.get("nearest_rounding", "round_prefer_floor"), in_len)
        if not np.array_equal(idx, np.arange(out_len) // f):
            return None
        factors[axis] = f
    return (factors.get(x.ndim - 2, 1), factors.get(x.ndim - 1, 1)) if factors else None


def _data_key(v):
    if v is None:
        return None
    v = np.asarray(v)
    return v.dtype.str, v.shape, v.tobytes()


def _upsample_plan(op, x, ins):
    """`integer_upsample` for this layer, worked out once per input shape and roi / scales / sizes values (inputs:
    a Constant's, or data that may change between runs) and kept on the op."""
    scales = ins[2] if ins[2] is not None else op.params.get("scales")
    sizes = ins[3] if ins[3] is not None else op.params.get("sizes")
    key = (x.shape, x.dtype, _data_key(ins[1]), _data_key(scales), _data_key(sizes))
    held = op.__dict__.get("_upsample")
    if held is not None and held[0] == key and held[1] is op.params:
        return held[2]
    plan = integer_upsample(x, op.params, ins[1], scales, sizes)
    if plan is not None:
        check_size(op, list(x.shape[:-2]) + [x.shape[-2] * plan[0], x.shape[-1] * plan[1]], x.dtype.itemsize)
    op.__dict__["_upsample"] = (key, op.params, plan)
    return plan


@simple_tactic("Resize", name="separable-gather")
def resize(op, inputs):
    """Resize (or GridSample when mode is GRID_SAMPLE)."""
    x = np.asarray(inputs[0])
    ins = list(inputs) + [None] * (4 - len(inputs))
    fast = jit.kernel("upsample_nearest") if op.params.get("mode") != "GRID_SAMPLE" else None
    plan = _upsample_plan(op, x, ins) if fast is not None else None
    if plan is not None:   # integer nearest upsampling: one compiled copy (the same values as _resize's)
        h, w = x.shape[-2:]
        y = np.empty(x.shape[:-2] + (h * plan[0], w * plan[1]), x.dtype)
        fast(np.ascontiguousarray(x).reshape(-1, h, w), y.reshape(-1, h * plan[0], w * plan[1]), plan[0], plan[1])
        return [y]
    if op.params.get("mode") == "GRID_SAMPLE":
        return [_grid_sample(x, np.asarray(ins[1]), op.params)]
    scales = ins[2] if ins[2] is not None else op.params.get("scales")
    sizes = ins[3] if ins[3] is not None else op.params.get("sizes")
    out = list(x.shape)
    for axis, out_len, *_ in axis_plan(x, op.params, ins[1], scales, sizes):
        out[axis] = out_len
    # scales and sizes are data: refuse a huge output (interpolating modes hold float64 partial sums) up front
    check_size(op, out, 8 if op.params.get("mode", "NEAREST") != "NEAREST" else x.dtype.itemsize)
    return [_resize(x, op.params, ins[1], scales, sizes)]
