"""Resize's index math, the same on every device: where each output position samples its input along one axis
(ONNX coordinate_transformation_mode), the nearest index, the linear/cubic filter taps, and which axes resize to
what length. The CPU kernel (cpu/kernels/resize.py) gathers with them in numpy; the CUDA tactic uploads them as
tables for its kernel."""
from __future__ import annotations

import numpy as np


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


def cubic_kernel(t, a):
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
        w = cubic_kernel((offs[None, :] - ratio[:, None]) * s, cubic_a)
    w = w / w.sum(axis=1, keepdims=True)
    idx = base.astype(np.int64)[:, None] + offs[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, in_len - 1), w


def axis_plan(x, p, roi, scales, sizes):
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
