"""Resize on the GPU (geometry.cu): nearest, linear and cubic, every coordinate transformation mode,
antialiasing, exclude_outside, tf_crop_and_resize's extrapolation, keep_aspect_ratio_policy.

The per-axis source indices and filter weights come from the functions the CPU kernel uses too (native/shared/
resize.py), built once per (params, shape, scales/sizes/roi) and kept on the device; one kernel launch then
gathers (nearest: the input's bits, any element type) or sums the taps axis by axis in float64 without FMA
(linear / cubic: FP32, FP16 and BF16 storage), which is the CPU's float64 arithmetic rounded once. GridSample
(mode GRID_SAMPLE) runs on the host."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import FLOAT_PRECISIONS, on_device, out_array, suffix
from native.cuda.tactics.geometry import SRC, _bits, host_value
from native.cuda.tactics.tensor import contiguous_strides
from native.shared.resize import axis_plan, interp_taps, nearest_index, source_coords
from native.tactics import Tactic, TacticRefusal, register_tactic

MAX_LEVELS = 4           # resized axes one launch handles (the kernel's tap odometer)
_TABLES: dict = {}        # key -> (levels, idx, w, bad, out_shape): device tap tables, built once per signature
_TABLES_MAX = 256


def _vals(v, what):
    v = host_value(v, what)
    return None if v is None or not np.size(v) else tuple(float(a) for a in np.asarray(v).reshape(-1))


def plan(p, shape, roi, scales, sizes):
    """(levels, out_shape): per resized axis in the CPU's order (axis, out_len, idx [out, T], w [out, T] or None,
    bad [out] or None), built with the CPU kernel's coordinate functions."""
    mode = p.get("mode", "NEAREST").lower()
    ctm = p.get("coordinate_transformation", "half_pixel")
    x = SimpleNamespace(shape=tuple(shape), ndim=len(shape))
    roi = None if roi is None else np.asarray(roi, np.float64)
    scales = None if scales is None else np.asarray(scales, np.float64)
    sizes = None if sizes is None else np.asarray(sizes, np.int64)
    out, levels = list(shape), []
    for axis, out_len, scale, r0, r1 in axis_plan(x, p, roi, scales, sizes):
        out[axis] = out_len
        in_len = shape[axis]
        if out_len == in_len and scale == 1.0 and ctm != "tf_crop_and_resize":
            continue
        coords = source_coords(ctm, out_len, in_len, scale, r0, r1)
        bad = ((coords < 0) | (coords > in_len - 1)) if ctm == "tf_crop_and_resize" else None
        if mode == "nearest":
            idx, w = nearest_index(coords, p.get("nearest_rounding", "round_prefer_floor"), in_len)[:, None], None
        else:
            idx, w = interp_taps(coords, in_len, mode, scale, p.get("antialias", False), p.get("cubic_coeff", -0.75),
                                 p.get("exclude_outside", False))
        levels.append((axis, out_len, np.ascontiguousarray(idx, np.int64),
                       None if w is None else np.ascontiguousarray(w, np.float64), bad))
    return levels, out


@register_tactic
class GpuResize(Tactic):
    kind, name, device = "Resize", "tap-kernel", "cuda"
    precisions = ("float32", "float16", "bfloat16", "fp8", "int8")   # nearest moves any element type
    writes_outputs = True

    def supports(self, op, input_shapes):
        mode = op.params.get("mode", "NEAREST")
        if mode not in ("NEAREST", "LINEAR", "CUBIC"):
            return f"resize mode {mode} runs on the host"
        if mode != "NEAREST" and op.precision not in FLOAT_PRECISIONS:
            return f"{mode.lower()} resize computes in float32, float16 or bfloat16 storage, not {op.precision}"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) > 8:
            return "rank above 8 runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        p = op.params
        mode = p.get("mode", "NEAREST")
        if mode not in ("NEAREST", "LINEAR", "CUBIC"):
            raise TacticRefusal(f"resize mode {mode} runs on the host")
        x = on_device(inputs[0])
        if not isinstance(x, GpuArray) or x.ndim > 8 or x.dtype.itemsize not in (1, 2, 4, 8):
            raise TacticRefusal(f"resize of {getattr(x, 'dtype', type(x).__name__)} at this rank runs on the host")
        ins = list(inputs) + [None] * (4 - len(inputs))
        roi = _vals(ins[1], "Resize roi")
        scales = _vals(ins[2], "Resize scales") if ins[2] is not None else p.get("scales")
        sizes = _vals(ins[3], "Resize sizes") if ins[3] is not None else p.get("sizes")
        scales = tuple(scales) if scales is not None and len(scales) else None
        sizes = tuple(int(v) for v in sizes) if sizes is not None and len(sizes) else None
        key = (repr(sorted(p.items())), x.shape, roi, scales, sizes)
        hit = _TABLES.get(key)
        if hit is None:
            hit = _upload(*plan(p, x.shape, roi, scales, sizes))
            if len(_TABLES) >= _TABLES_MAX:
                _TABLES.pop(next(iter(_TABLES)))
            _TABLES[key] = hit
        levels, idx, w, bad, out_shape = hit
        if len(levels) > MAX_LEVELS:
            raise TacticRefusal(f"resizing {len(levels)} axes at once runs on the host")
        nearest = mode == "NEAREST" or not levels
        if not nearest:
            suffix(x.dtype)   # interpolation stores a float type (TacticRefusal for others: the host runs them)
        out = out_array(outputs, 0, out_shape, x.dtype)
        if not out.size:
            return [out]
        s = np.zeros(42, np.int64)
        s[0], s[1] = x.ndim, out.size
        s[2:2 + x.ndim] = out_shape
        s[10:10 + x.ndim] = contiguous_strides(x.shape)
        s[18:26] = -1
        s[26] = len(levels)
        off = boff = 0
        for k, (axis, out_len, taps) in enumerate(levels):
            s[18 + axis] = k
            s[27 + k], s[31 + k], s[35 + k] = taps, off, boff
            off += out_len * taps
            boff += out_len
        s[39] = 1 if bad is not None else 0
        extrap = p.get("extrapolation_value", 0.0)
        s[40:41] = np.array([extrap], np.float64).view(np.int64)
        small = max(out.size, x.size) < 2 ** 31
        ptrs = [np.uint64(out.ptr), np.uint64(x.ptr), np.uint64(idx.ptr if idx is not None else 0)]
        if nearest:
            s[41:42] = np.array([_bits(np.rint(extrap) if x.dtype.kind in "iub" else extrap, x.dtype)],
                                np.uint64).view(np.int64)
            name = f"resize_near_s_{x.dtype.itemsize}" if small else f"resize_near_{x.dtype.itemsize}"
            args = ptrs + [np.uint64(bad.ptr if bad is not None else 0), s]
        else:
            name = ("resize_interp_s" if small else "resize_interp") + suffix(x.dtype)
            args = ptrs + [np.uint64(w.ptr), np.uint64(bad.ptr if bad is not None else 0), s]
        launch(kernel(SRC, name), grid_for(out.size), (256, 1, 1), args)
        return [out]


def _upload(levels, out_shape):
    """Device tables of a plan: idx (int64) and w (float64) concatenated level by level, bad (uint8) flags."""
    if not levels:
        return [], None, None, None, out_shape
    idx = np.concatenate([lv[2].reshape(-1) for lv in levels])
    w = None if levels[0][3] is None else np.concatenate([lv[3].reshape(-1) for lv in levels])
    bad = None
    if levels[0][4] is not None:
        bad = np.concatenate([lv[4].reshape(-1) for lv in levels]).astype(np.uint8)
    return ([(lv[0], lv[1], lv[2].shape[1]) for lv in levels], GpuArray.from_host(idx),
            None if w is None else GpuArray.from_host(w), None if bad is None else GpuArray.from_host(bad), out_shape)
