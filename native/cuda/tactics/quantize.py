"""Quantize / Dequantize on the GPU (quantize.cu): INT8, UINT8 and FP8 E4M3, per tensor or per channel,
with the CPU kernels' arithmetic (x / scale in float32, half-to-even rounding, saturation; dequantization in
float64 rounded once to the output type), so results are bit-identical. Blocked and dynamic quantization, other
integer widths and BF16 outputs run on the host."""
from __future__ import annotations

import numpy as np

from native import numerics
from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import code, on_device, out_array, ptr
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "quantize.cu"
PRECISIONS = ("float32", "float16", "bfloat16", "int8", "fp8")
_QKIND = {"int8": 1, "uint8": 2, "float8_e4m3fn": 3}
_FLOAT = ("float32", "float16")   # the float types quantize.cu instantiates


def _np_dtype(name):
    return numerics.numpy_dtype(name)


def _layout(op, x, scale, zp):
    """(channels, inner) of the scale / zero point against x: per tensor (1, 1) or per channel along `axis`;
    TacticRefusal for blocked layouts and zero points laid out unlike the scale."""
    if op.params.get("block_size"):
        raise TacticRefusal("blocked quantization runs on the host")

    def chans(v):
        if v is None or v.ndim == 0 or v.size == 1 and v.ndim <= 1:
            return 1
        if v.ndim != 1 or x.ndim == 0:
            raise TacticRefusal("scales of rank > 1 run on the host")
        return v.size
    c = chans(scale)
    if zp is not None and chans(zp) != c:
        raise TacticRefusal("a zero point laid out unlike its scale runs on the host")
    if c == 1:
        return 1, 1
    axis = int(op.params.get("axis", 1)) % x.ndim
    if x.shape[axis] != c:
        raise TacticRefusal("scale length differs from the axis: the host tactic reports it")
    return c, int(np.prod(x.shape[axis + 1:], dtype=np.int64))


def _params(n, channels, inner, zp_kind, out_kind, saturate) -> np.ndarray:
    """quantize.cu's QParams: three int64, three int32 (and padding)."""
    p = np.zeros(5, dtype=np.int64)
    p[0], p[1], p[2] = n, inner, channels
    p.view(np.int32)[6:9] = (zp_kind, out_kind, saturate)
    return p


def _zp(inputs):
    zp = on_device(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
    if zp is not None and zp.dtype.name not in _QKIND:
        raise TacticRefusal(f"zero points of type {zp.dtype} run on the host")
    return zp


@register_tactic
class GpuQuantize(Tactic):
    """y = saturate(rint(x / scale) + zero_point) to INT8 / UINT8, or x / scale + zero_point to FP8 E4M3 (clamped
    to +-448 when saturating, round to nearest even)."""

    kind, name, device = "Quantize", "nvrtc-quantize", "cuda"
    precisions = PRECISIONS
    writes_outputs = True

    def supports(self, op, input_shapes):
        if op.params.get("dynamic"):
            return "dynamic quantization runs on the host"
        if op.params.get("block_size"):
            return "blocked quantization runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if op.params.get("dynamic"):
            raise TacticRefusal("dynamic quantization runs on the host")
        x, scale, zp = on_device(inputs[0]), on_device(inputs[1]), _zp(inputs)
        if not isinstance(x, GpuArray) or not isinstance(scale, GpuArray) or x.dtype.name not in _FLOAT \
                or scale.dtype.name not in _FLOAT:
            raise TacticRefusal("quantization of these types runs on the host")
        out_dtype = zp.dtype if zp is not None else _np_dtype(op.params.get("output_dtype") or "uint8")
        if out_dtype.name not in _QKIND:
            raise TacticRefusal(f"quantization to {out_dtype} runs on the host")
        channels, inner = _layout(op, x, scale, zp)
        out = out_array(outputs, 0, x.shape, out_dtype)
        if x.size:
            p = _params(x.size, channels, inner, _QKIND[zp.dtype.name] if zp is not None else 0,
                        _QKIND[out_dtype.name], int(bool(op.params.get("saturate", True))))
            launch(kernel(SRC, f"quantize_{code(x.dtype)}_{code(scale.dtype)}"), grid_for(x.size),
                   (256, 1, 1), [np.uint64(out.ptr), np.uint64(x.ptr), np.uint64(scale.ptr), ptr(zp), p])
        return [out]


@register_tactic
class GpuDequantize(Tactic):
    """y = (x - zero_point) * scale in float64, rounded once to float32 / float16 (the scale's type or
    output_dtype); x INT8, UINT8 or FP8 E4M3."""

    kind, name, device = "Dequantize", "nvrtc-quantize", "cuda"
    precisions = PRECISIONS
    writes_outputs = True

    def supports(self, op, input_shapes):
        if op.params.get("block_size"):
            return "blocked quantization runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x, scale, zp = on_device(inputs[0]), on_device(inputs[1]), _zp(inputs)
        if not isinstance(x, GpuArray) or not isinstance(scale, GpuArray) or x.dtype.name not in _QKIND \
                or scale.dtype.name not in _FLOAT:
            raise TacticRefusal("dequantization of these types runs on the host")
        out_dtype = _np_dtype(op.params["output_dtype"]) if op.params.get("output_dtype") else scale.dtype
        if out_dtype.name not in _FLOAT:
            raise TacticRefusal(f"dequantization to {out_dtype} runs on the host")
        channels, inner = _layout(op, x, scale, zp)
        out = out_array(outputs, 0, x.shape, out_dtype)
        if x.size:
            p = _params(x.size, channels, inner, _QKIND[zp.dtype.name] if zp is not None else 0,
                        0 if out_dtype.name == "float32" else 1, 1)
            launch(kernel(SRC, f"dequantize_{code(scale.dtype)}"), grid_for(x.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int32(_QKIND[x.dtype.name]), np.uint64(scale.ptr),
                    ptr(zp), p])
        return [out]
