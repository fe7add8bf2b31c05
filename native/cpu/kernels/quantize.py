"""CPU kernels: Quantize / Dequantize (per-tensor, per-axis, blocked; int2..int32, float8, float4 via ml_dtypes)
and dynamic uint8 quantization (DynamicQuantizeLinear).

Rounding is half-to-even (np.rint) and integer results saturate to the target type's range, as ONNX specifies.
"""
from __future__ import annotations

import numpy as np

from native import numerics
from native.tactics import simple_tactic


np_dtype = numerics.numpy_dtype   # (its readers' name for it)


def _int_range(dtype):
    import ml_dtypes
    info = ml_dtypes.iinfo(dtype) if dtype.kind == "V" or dtype.name in ("int4", "uint4", "int2", "uint2") \
        else np.iinfo(dtype)
    return float(info.min), float(info.max)


def _is_float_target(dtype):
    return "float" in dtype.name


def broadcast_param(v, x, axis, block_size):
    """Scale / zero point shaped to broadcast against x: scalar, per-axis vector, or blocked along `axis`."""
    v = np.asarray(v)
    if v.ndim == 0 or v.size == 1 and v.ndim <= 1:
        return v.reshape(())
    axis = axis % x.ndim
    if block_size and block_size > 0:
        return np.repeat(v, block_size, axis=axis).take(np.arange(x.shape[axis]), axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    return v.reshape(shape)


def quantize(x, scale, zp, dtype, saturate=True):
    # x / scale in float32 (or wider when x is), as the reference arithmetic does: ties then round alike
    work = np.float64 if np.asarray(x).dtype == np.float64 else np.float32
    xf = (np.asarray(x).astype(work) / np.asarray(scale).astype(work)).astype(np.float64)
    if _is_float_target(dtype):
        import ml_dtypes
        if zp is not None:
            xf = xf + np.asarray(zp).astype(np.float64)
        if saturate:   # out-of-range values (infinities included) become the largest finite value
            fin = float(ml_dtypes.finfo(dtype).max)
            xf = np.clip(xf, -fin, fin)
        return xf.astype(np.float32).astype(dtype)
    q = np.rint(xf)
    if zp is not None:
        q = q + np.asarray(zp).astype(np.float64)
    lo, hi = _int_range(dtype)
    return np.clip(q, lo, hi).astype(dtype)


@simple_tactic("Quantize", name="numpy")
def quantize_layer(op, inputs):
    """y = saturate(rint(x / scale) + zero_point); with params['dynamic'] computes uint8 scale / zero point first
    and returns (y, scale, zero_point)."""
    x = np.asarray(inputs[0])
    p = op.params
    if p.get("dynamic"):
        xf = x.astype(np.float64)
        lo, hi = min(0.0, float(xf.min())) if xf.size else 0.0, max(0.0, float(xf.max())) if xf.size else 0.0
        scale = np.float32((hi - lo) / 255.0)
        zp = np.uint8(np.clip(np.rint(0 - lo / scale), 0, 255)) if scale != 0 else np.uint8(0)
        y = quantize(x, scale if scale != 0 else 1.0, zp, np.dtype(np.uint8))
        return [y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]
    zp_in = inputs[2] if len(inputs) > 2 else None
    dtype = np.asarray(zp_in).dtype if zp_in is not None else np_dtype(p.get("output_dtype") or "uint8")
    axis, block = p.get("axis", 1), p.get("block_size", 0)
    scale = broadcast_param(inputs[1], x, axis, block)
    zp = broadcast_param(zp_in, x, axis, block) if zp_in is not None else None
    return [quantize(x, scale, zp, dtype, p.get("saturate", True))]


@simple_tactic("Dequantize", name="numpy")
def dequantize_layer(op, inputs):
    """y = (x - zero_point) * scale in the scale's dtype (or params['output_dtype'])."""
    x = np.asarray(inputs[0])
    p = op.params
    axis, block = p.get("axis", 1), p.get("block_size", 0)
    scale_in = np.asarray(inputs[1])
    out_dtype = np_dtype(p["output_dtype"]) if p.get("output_dtype") else scale_in.dtype
    work = np.float64
    xf = x.astype(np.float32).astype(work) if x.dtype.kind == "V" or "float" in x.dtype.name else x.astype(work)
    zp_in = inputs[2] if len(inputs) > 2 else None
    if zp_in is not None:
        zp = np.asarray(zp_in)
        zp = zp.astype(np.float32) if zp.dtype.kind == "V" or "float" in zp.dtype.name else zp
        xf = xf - broadcast_param(zp.astype(work), x, axis, block)
    y = xf * broadcast_param(scale_in.astype(work), x, axis, block)
    return [y.astype(out_dtype)]
