"""CPU kernels: Resize (nearest / linear / cubic, every ONNX coordinate transformation, antialias) and
GridSample (Resize mode GRID_SAMPLE).

Resize is separable: per resized axis we build, for every output position, a few source indices and weights
(2 taps for linear, 4 for cubic, more when antialiasing a downscale) and combine `np.take` gathers along that
axis. Nearest is a single gather per axis. No per-pixel Python loops.
"""
from __future__ import annotations

import itertools

import numpy as np

from native.limits import check_size
from native.tactics import simple_tactic


# coordinates -----------------------------------------------------------------------------------------------------

def source_coords(mode, out_len, in_len, scale, roi_start=0.0, roi_end=1.0):
    """Position in the input of every output index along one axis (ONNX coordinate_transformation_mode)."""
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        center = in_len / 2
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(x)
    if mode == "align_corners":   # the resized length here is in_len * scale, not rounded (as ONNX's tests expect)
        length = in_len * scale
        return x * (in_len - 1) / (length - 1) if out_len > 1 and length != 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        if out_len > 1:
            return roi_start * (in_len - 1) + x * (roi_end - roi_start) * (in_len - 1) / (out_len - 1)
        return np.full_like(x, 0.5 * (roi_start + roi_end) * (in_len - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def nearest_index(coords, rounding, in_len):
    if rounding == "round_prefer_floor":
        idx = np.ceil(coords - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif rounding == "floor":
        idx = np.floor(coords)
    elif rounding == "ceil":
        idx = np.ceil(coords)
    else:
        raise ValueError(f"unknown nearest_mode {rounding!r}")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _cubic_kernel(t, a):
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def interp_taps(coords, in_len, mode, scale, antialias, cubic_a, exclude_outside):
    """(indices [out, T], weights [out, T]) of the linear / cubic filter, stretched by 1/scale when antialiasing
    a downscale; indices clamp to the edge, or with exclude_outside their weight is dropped and renormalised."""
    s = min(scale, 1.0) if antialias else 1.0
    base = np.floor(coords)
    ratio = coords - base
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        offs = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs((offs[None, :] - ratio[:, None]) * s), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        offs = np.arange(start, 2 - start)
        w = _cubic_kernel((offs[None, :] - ratio[:, None]) * s, cubic_a)
    w = w / w.sum(axis=1, keepdims=True)
    idx = base.astype(np.int64)[:, None] + offs[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, in_len - 1), w


# Resize -----------------------------------------------------------------------------------------------------------

def _axis_plan(x, p, roi, scales, sizes):
    """Per resized axis: (axis, out_len, scale, roi_start, roi_end)."""
    rank = x.ndim
    axes = [a % rank for a in (p.get("axes") or range(rank))]
    n = len(axes)
    if sizes is not None and np.size(sizes):
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        ratios = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
        policy = p.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            r = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [r] * n
            sizes = [int(np.floor(r * x.shape[a] + 0.5)) for a in axes]
        outs, scl = sizes, ratios
    else:
        scl = [float(v) for v in np.asarray(scales).reshape(-1)]
        outs = [int(np.floor(x.shape[a] * scl[i])) for i, a in enumerate(axes)]
    if roi is not None and np.size(roi):
        roi = np.asarray(roi, np.float64).reshape(-1)
        starts, ends = roi[:len(roi) // 2], roi[len(roi) // 2:]
        if len(starts) == rank and n != rank:
            starts, ends = starts[axes], ends[axes]
    else:
        starts, ends = np.zeros(n), np.ones(n)
    return [(a, outs[i], scl[i], float(starts[i]), float(ends[i])) for i, a in enumerate(axes)]


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
    for axis, out_len, scale, r0, r1 in _axis_plan(x, p, roi, scales, sizes):
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
                ws = [_cubic_kernel(t + 1, a), _cubic_kernel(t, a), _cubic_kernel(1 - t, a), _cubic_kernel(2 - t, a)]
            taps.append([(base.astype(np.int64) + o, w) for o, w in zip(offs, ws)])
        y = 0.0
        for combo in itertools.product(*taps):
            w = np.prod([cw for _, cw in combo], axis=0)
            y = y + gather([ci for ci, _ in combo]) * w[:, None, :]
    return y.reshape((n, c) + tuple(out_sp)).astype(x.dtype)


@simple_tactic("Resize", name="separable-gather")
def resize(op, inputs):
    """Resize (or GridSample when mode is GRID_SAMPLE)."""
    x = np.asarray(inputs[0])
    ins = list(inputs) + [None] * (4 - len(inputs))
    if op.params.get("mode") == "GRID_SAMPLE":
        return [_grid_sample(x, np.asarray(ins[1]), op.params)]
    scales = ins[2] if ins[2] is not None else op.params.get("scales")
    sizes = ins[3] if ins[3] is not None else op.params.get("sizes")
    out = list(x.shape)
    for axis, out_len, *_ in _axis_plan(x, op.params, ins[1], scales, sizes):
        out[axis] = out_len
    # scales and sizes are data: refuse a huge output (interpolating modes hold float64 partial sums) up front
    check_size(op, out, 8 if op.params.get("mode", "NEAREST") != "NEAREST" else x.dtype.itemsize)
    return [_resize(x, op.params, ins[1], scales, sizes)]
