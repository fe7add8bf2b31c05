"""Importers: quantization ops.

QuantizeLinear / DequantizeLinear map onto Quantize / Dequantize layers (TensorRT's Q/DQ). The integer-arithmetic
ops (QLinearConv, QLinearMatMul, ConvInteger's cousin MatMulInteger) are lowered to DQ -> float64 op -> Q, which is
exact for the value ranges these ops use and keeps the Q/DQ pattern visible to the builder.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from backends.engine.onnx_parser.importers.nn import conv_params
from native.errors import ParseError


def _onnx_dtype_name(elem_type):
    return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type))).name


@onnx_op("QuantizeLinear", since_version=10)
class QuantizeLinear(OpImporter):
    """Output type: the zero point's type, else the output_dtype attribute, else uint8."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"axis": int(attrs.get("axis", 1)), "block_size": int(attrs.get("block_size", 0)),
                  "saturate": bool(attrs.get("saturate", 1))}
        if attrs.get("output_dtype"):
            params["output_dtype"] = _onnx_dtype_name(attrs["output_dtype"])
        ins = list(inputs) + [None] * (3 - len(inputs))
        return ctx.add_layer("Quantize", ins[:3], params).outputs


@onnx_op("DequantizeLinear", since_version=10)
class DequantizeLinear(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"axis": int(attrs.get("axis", 1)), "block_size": int(attrs.get("block_size", 0))}
        if attrs.get("output_dtype"):
            params["output_dtype"] = _onnx_dtype_name(attrs["output_dtype"])
        ins = list(inputs) + [None] * (3 - len(inputs))
        return ctx.add_layer("Dequantize", ins[:3], params).outputs


@onnx_op("DynamicQuantizeLinear", since_version=11)
class DynamicQuantizeLinear(OpImporter):
    """-> Quantize with dynamic=True: outputs y (uint8), y_scale, y_zero_point."""

    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Quantize", [inputs[0]], {"dynamic": True, "output_dtype": "uint8"},
                             num_outputs=3).outputs


def _dq(ctx, x, scale, zp, axis=1, suffix="dq"):
    return ctx.add_layer("Dequantize", [x, scale, zp], {"axis": axis, "output_dtype": "float64"},
                         suffix=suffix).outputs[0]


def _q(ctx, y, scale, zp, output_dtype=None):
    params = {"axis": 1}
    if output_dtype:
        params["output_dtype"] = output_dtype
    return ctx.add_layer("Quantize", [y, scale, zp], params, suffix="q").outputs


@onnx_op("QLinearMatMul", since_version=10)
class QLinearMatMul(OpImporter):
    """DQ(a), DQ(b) -> MatrixMultiply (float64) -> Q(y_scale, y_zero_point)."""

    def convert(self, ctx, node, inputs, attrs):
        a, a_s, a_z, b, b_s, b_z, y_s, y_z = inputs
        fa = _dq(ctx, a, a_s, a_z, axis=-2)
        fb = _dq(ctx, b, b_s, b_z, axis=-1)
        mm = ctx.add_layer("MatrixMultiply", [fa, fb], {"transpose_a": False, "transpose_b": False},
                           suffix="matmul").outputs[0]
        return _q(ctx, mm, y_s, y_z)


@onnx_op("MatMulInteger", since_version=10)
class MatMulInteger(OpImporter):
    """(A - a_zp) @ (B - b_zp) in int32: DQ with scale 1 -> MatrixMultiply (float64, exact) -> Q to int32."""

    def convert(self, ctx, node, inputs, attrs):
        ins = list(inputs) + [None] * (4 - len(inputs))
        one = ctx.constant(np.asarray(1.0, np.float64))
        fa = _dq(ctx, ins[0], one, ins[2], axis=-2)
        fb = _dq(ctx, ins[1], one, ins[3], axis=-1)
        mm = ctx.add_layer("MatrixMultiply", [fa, fb], {"transpose_a": False, "transpose_b": False},
                           suffix="matmul").outputs[0]
        return _q(ctx, mm, one, None, output_dtype="int32")


@onnx_op("QLinearConv", since_version=10)
class QLinearConv(OpImporter):
    """DQ(x), DQ(w, per output channel) -> Convolution in float64 with bias B * x_scale * w_scale -> Q(y)."""

    def convert(self, ctx, node, inputs, attrs):
        ins = list(inputs) + [None] * (9 - len(inputs))
        x, x_s, x_z, w, w_s, w_z, y_s, y_z, b = ins
        fx = _dq(ctx, x, x_s, x_z, axis=1)
        fw = _dq(ctx, w, w_s, w_z, axis=0)
        shape = w.shape
        if shape is None:
            raise ParseError("QLinearConv needs weights of known rank")
        nd = len(attrs["kernel_shape"]) if attrs.get("kernel_shape") else len(shape) - 2
        params = conv_params(attrs, nd, attrs.get("kernel_shape") or list(shape[2:]))
        params["num_output_maps"] = int(shape[0])
        conv_in = [fx, fw]
        if b is not None:
            xs, ws = ctx.constant_value(x_s), ctx.constant_value(w_s)
            if xs is None or ws is None:
                raise ParseError("QLinearConv with a bias needs constant x_scale and w_scale")
            bias_scale = ctx.constant((np.asarray(xs, np.float64) * np.asarray(ws, np.float64)).reshape(-1))
            conv_in.append(ctx.add_layer("Dequantize", [b, bias_scale, None], {"axis": 0, "output_dtype": "float64"},
                                         suffix="dq_bias").outputs[0])
        y = ctx.add_layer("Convolution", conv_in, params, suffix="conv").outputs[0]
        return _q(ctx, y, y_s, y_z)
