"""Integer, boolean and 1-byte elementwise layers on the GPU (index.cu): ElementWise and Unary over
int32 / int64 / bool (comparisons giving bool, logic, integer arithmetic with numpy's wrap-around and the CPU's
Div/Mod rules) and float MOD / FMOD / FLOOR_DIV; Select on 1-byte values. Bit-identical to the CPU's
cpu/kernels/elementwise.py; the float kernels of these kinds are in pointwise.py (registered first)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import on_device, out_array
from native.cuda.tactics.index import BLOCK, IndexKernel, SRC, code
from native.tactics import TacticRefusal, register_tactic

# op codes of index.cu
_ARITH = {"SUM": 0, "SUB": 1, "PROD": 2, "DIV": 3, "FLOOR_DIV": 4, "MOD": 5, "FMOD": 6, "MAX": 7, "MIN": 8,
          "BITWISE_AND": 9, "BITWISE_OR": 10, "BITWISE_XOR": 11, "BITSHIFT_LEFT": 12, "BITSHIFT_RIGHT": 13}
_CMP = {"AND": 32, "OR": 33, "XOR": 34, "EQUAL": 35, "GREATER": 36, "LESS": 37, "GREATER_EQUAL": 38,
        "LESS_EQUAL": 39}
_BOOL_ARITH = {"SUM", "PROD", "MAX", "MIN", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR"}
_FLOAT_ARITH = {"MOD", "FMOD", "FLOOR_DIV"}
_UN = {"NOT": 0, "ABS": 1, "NEG": 2, "SIGN": 3, "BITWISE_NOT": 4, "ROUND": 5, "ISNAN": 6, "ISINF": 7}


def bcast2(out_shape, a_shape, b_shape) -> np.ndarray:
    """index.cu's Bcast: rank, n, dims[8], element strides of a and b (0 along broadcast dims)."""
    from native.cuda.tactics.pointwise import broadcast_params
    return broadcast_params(out_shape, a_shape, b_shape)


@register_tactic
class GpuIntElementWise(IndexKernel):
    """Comparisons and logic of any type (-> bool), integer arithmetic (int32 / int64, wrapping), bool arithmetic,
    float MOD / FMOD / FLOOR_DIV. The float arithmetic the float tactic runs raises TacticRefusal here."""

    kind, name = "ElementWise", "nvrtc-int"

    def supports(self, op, input_shapes):
        name = op.params.get("op")
        if name not in _ARITH and name not in _CMP:
            return f"op {name} has no integer kernel"
        if input_shapes and any(s is not None and len(s) > 8 for s in input_shapes):
            return "rank above 8"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        name = op.params["op"]
        a, b = on_device(inputs[0]), on_device(inputs[1])
        ca, cb = code(a), code(b)
        if ca != cb:
            raise TacticRefusal(f"{a.dtype} {name} {b.dtype}: mixed operand types run on the host")
        shape = np.broadcast_shapes(a.shape, b.shape)
        if len(shape) > 8:
            raise TacticRefusal("rank above 8 runs on the host")
        if name in _CMP:
            fn, dtype, opc = f"icmp_{ca}", np.bool_, _CMP[name]
        elif ca in ("i64", "i32"):
            fn, dtype, opc = f"iarith_{ca}", a.dtype, _ARITH[name]
        elif ca == "b" and name in _BOOL_ARITH:
            fn, dtype, opc = "iarith_b", a.dtype, _ARITH[name]
        elif ca in ("f32", "f16") and name in _FLOAT_ARITH:
            fn, dtype, opc = f"farith_{ca}", a.dtype, _ARITH[name]
        else:
            raise TacticRefusal(f"{name} on {a.dtype} is not an integer kernel")
        out = out_array(outputs, 0, shape, dtype)
        s = bcast2(shape, a.shape, b.shape)
        if out.size:
            launch(kernel(SRC, fn), grid_for(out.size), BLOCK, [np.uint64(out.ptr), np.uint64(a.ptr),
                                                                 np.uint64(b.ptr), s, np.int32(opc)])
        return [out]


@register_tactic
class GpuIntUnary(IndexKernel):
    """NOT (any type -> bool), ISNAN / ISINF (-> bool), integer ABS / NEG / SIGN / BITWISE_NOT / ROUND, float SIGN
    and ROUND (half to even)."""

    kind, name = "Unary", "nvrtc-int"

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _UN:
            return f"op {op.params.get('op')} has no integer kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        name = op.params["op"]
        x = on_device(inputs[0])
        c = code(x)
        flags = 0
        if name in ("NOT", "ISNAN", "ISINF") or (c == "b" and name == "BITWISE_NOT"):
            fn, dtype = f"upred_{c}", np.bool_
            opc = _UN["NOT" if name == "BITWISE_NOT" else name]
            flags = int(bool(op.params.get("detect_positive", True))) | 2 * int(
                bool(op.params.get("detect_negative", True)))
        elif c in ("i64", "i32"):
            fn, dtype, opc = f"iunary_{c}", x.dtype, _UN[name] if name != "ROUND" else 8
        elif c in ("f32", "f16") and name in ("SIGN", "ROUND"):
            fn, dtype, opc = f"funary_{c}", x.dtype, _UN[name]
        else:
            raise TacticRefusal(f"{name} on {x.dtype} is not an integer kernel")
        out = out_array(outputs, 0, x.shape, dtype)
        if x.size:
            args = [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size), np.int32(opc)]
            if fn.startswith("upred"):
                args.append(np.int32(flags))
            launch(kernel(SRC, fn), grid_for(x.size), BLOCK, args)
        return [out]


@register_tactic
class GpuSelect1(IndexKernel):
    """Select on 1-byte values (bool, int8, uint8, fp8); the wider types run on tensor.py's select kernels."""

    kind, name = "Select", "nvrtc-select1"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.tensor import select
        cnd, a, b = (on_device(x) for x in inputs[:3])
        if not all(isinstance(v, GpuArray) for v in (cnd, a, b)) or cnd.dtype != np.bool_ or a.dtype != b.dtype \
                or a.dtype.itemsize != 1:
            raise TacticRefusal("Select of these types runs on another kernel or the host")
        return [select(cnd, a, b, outputs, SRC)]
