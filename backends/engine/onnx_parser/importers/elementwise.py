"""Importers: pointwise ONNX ops → Activation / ElementWise / Unary / Select / Cast layers.

Inputs pass straight through as layer inputs (dtypes and broadcasting are resolved by the kernels at run time);
only scalar attributes become params. Variadic ops (Sum, Max, Min, Mean) chain binary ElementWise layers.
"""
import numpy as np
from onnx import helper

from backends.engine.dtypes import DataType
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from native.errors import ParseError


def _out(layer):
    return layer.outputs


# --- binary ElementWise -----------------------------------------------------------------------------------------
class _Binary(OpImporter):
    """Two-input broadcasting op mapped to one ElementWise `op`."""
    op = ""

    def convert(self, ctx, node, inputs, attrs):
        return _out(ctx.add_layer("ElementWise", inputs[:2], {"op": self.op}))


@onnx_op("Add")
class Add(_Binary):
    op = "SUM"


@onnx_op("Sub")
class Sub(_Binary):
    op = "SUB"


@onnx_op("Mul")
class Mul(_Binary):
    op = "PROD"


@onnx_op("Div")
class Div(_Binary):
    """Integer division truncates toward zero (the kernel's DIV)."""
    op = "DIV"


@onnx_op("Pow")
class Pow(_Binary):
    """The result keeps the base's dtype whatever the exponent's."""
    op = "POW"


@onnx_op("Equal")
class Equal(_Binary):
    op = "EQUAL"


@onnx_op("Greater")
class Greater(_Binary):
    op = "GREATER"


@onnx_op("Less")
class Less(_Binary):
    op = "LESS"


@onnx_op("GreaterOrEqual")
class GreaterOrEqual(_Binary):
    op = "GREATER_EQUAL"


@onnx_op("LessOrEqual")
class LessOrEqual(_Binary):
    op = "LESS_EQUAL"


@onnx_op("And")
class And(_Binary):
    op = "AND"


@onnx_op("Or")
class Or(_Binary):
    op = "OR"


@onnx_op("Xor")
class Xor(_Binary):
    op = "XOR"


@onnx_op("BitwiseAnd")
class BitwiseAnd(_Binary):
    op = "BITWISE_AND"


@onnx_op("BitwiseOr")
class BitwiseOr(_Binary):
    op = "BITWISE_OR"


@onnx_op("BitwiseXor")
class BitwiseXor(_Binary):
    op = "BITWISE_XOR"


@onnx_op("Mod")
class Mod(OpImporter):
    """fmod=0: sign of the divisor (integers only); fmod=1: C fmod, sign of the dividend."""

    def convert(self, ctx, node, inputs, attrs):
        op = "FMOD" if attrs.get("fmod", 0) else "MOD"
        return _out(ctx.add_layer("ElementWise", inputs[:2], {"op": op}))


@onnx_op("BitShift")
class BitShift(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        direction = str(attrs.get("direction", "")).upper()
        if direction not in ("LEFT", "RIGHT"):
            raise ParseError(f"BitShift direction must be LEFT or RIGHT, got {direction!r}")
        return _out(ctx.add_layer("ElementWise", inputs[:2], {"op": f"BITSHIFT_{direction}"}))


# --- variadic ---------------------------------------------------------------------------------------------------
def _chain(ctx, inputs, op):
    inputs = [t for t in inputs if t is not None]
    if not inputs:
        raise ParseError("needs at least one input")
    if len(inputs) == 1:
        return ctx.add_layer("Identity", inputs).outputs[0]
    acc = inputs[0]
    for t in inputs[1:]:
        acc = ctx.add_layer("ElementWise", [acc, t], {"op": op}).outputs[0]
    return acc


class _Variadic(OpImporter):
    """n-input broadcasting op as a chain of binary ElementWise layers."""
    op = ""

    def convert(self, ctx, node, inputs, attrs):
        return [_chain(ctx, inputs, self.op)]


@onnx_op("Sum")
class Sum(_Variadic):
    op = "SUM"


@onnx_op("Max")
class Max(_Variadic):
    op = "MAX"


@onnx_op("Min")
class Min(_Variadic):
    op = "MIN"


@onnx_op("Mean")
class Mean(OpImporter):
    """Sum chain divided by the input count (the kernel casts the constant to the data's dtype)."""

    def convert(self, ctx, node, inputs, attrs):
        inputs = [t for t in inputs if t is not None]
        total = _chain(ctx, inputs, "SUM")
        if len(inputs) == 1:
            return [total]
        dtype = inputs[0].dtype.numpy if inputs[0].dtype is not None else np.float32
        n = ctx.constant(np.array(len(inputs), dtype=dtype))
        return _out(ctx.add_layer("ElementWise", [total, n], {"op": "DIV"}))


# --- Unary ------------------------------------------------------------------------------------------------------
class _Unary(OpImporter):
    op = ""

    def convert(self, ctx, node, inputs, attrs):
        return _out(ctx.add_layer("Unary", inputs[:1], {"op": self.op}))


def _unary(onnx_name, op):
    cls = type(onnx_name, (_Unary,), {"op": op, "__doc__": f"ONNX {onnx_name} → Unary {op}."})
    return onnx_op(onnx_name)(cls)


for _name, _op in [("Abs", "ABS"), ("Neg", "NEG"), ("Exp", "EXP"), ("Log", "LOG"), ("Sqrt", "SQRT"),
                   ("Reciprocal", "RECIP"), ("Sin", "SIN"), ("Cos", "COS"), ("Tan", "TAN"), ("Sinh", "SINH"),
                   ("Cosh", "COSH"), ("Asin", "ASIN"), ("Acos", "ACOS"), ("Atan", "ATAN"), ("Asinh", "ASINH"),
                   ("Acosh", "ACOSH"), ("Atanh", "ATANH"), ("Ceil", "CEIL"), ("Floor", "FLOOR"), ("Round", "ROUND"),
                   ("Erf", "ERF"), ("Sign", "SIGN"), ("IsNaN", "ISNAN"), ("Not", "NOT"), ("BitwiseNot", "BITWISE_NOT"),
                   ("Det", "DET")]:
    _unary(_name, _op)


@onnx_op("IsInf")
class IsInf(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"op": "ISINF", "detect_positive": bool(attrs.get("detect_positive", 1)),
                  "detect_negative": bool(attrs.get("detect_negative", 1))}
        return _out(ctx.add_layer("Unary", inputs[:1], params))


# --- Activation -------------------------------------------------------------------------------------------------
class _Act(OpImporter):
    """ONNX activation → Activation `type`; `attr_map` maps ONNX attribute → (param, default)."""
    type = ""
    attr_map: dict = {}
    fixed: dict = {}

    def convert(self, ctx, node, inputs, attrs):
        params = {"type": self.type}
        params.update(self.fixed)
        for onnx_attr, (param, default) in self.attr_map.items():
            params[param] = float(attrs.get(onnx_attr, default))
        return _out(ctx.add_layer("Activation", inputs[:1], params))


def _act(onnx_name, kind, attr_map=None, fixed=None):
    cls = type(onnx_name, (_Act,), {"type": kind, "attr_map": attr_map or {}, "fixed": fixed or {},
                                    "__doc__": f"ONNX {onnx_name} → Activation {kind}."})
    return onnx_op(onnx_name)(cls)


_act("Relu", "RELU")
_act("Sigmoid", "SIGMOID")
_act("Tanh", "TANH")
_act("LeakyRelu", "LEAKY_RELU", {"alpha": ("alpha", 0.01)})
_act("Elu", "ELU", {"alpha": ("alpha", 1.0)})
_act("Selu", "SELU", {"alpha": ("alpha", 1.67326319217681884765625), "gamma": ("beta", 1.05070102214813232421875)})
_act("Celu", "CELU", {"alpha": ("alpha", 1.0)})
_act("Softsign", "SOFTSIGN")
_act("Softplus", "SOFTPLUS", fixed={"alpha": 1.0, "beta": 1.0})
_act("HardSigmoid", "HARD_SIGMOID", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)})
_act("HardSwish", "HARD_SWISH")
_act("ThresholdedRelu", "THRESHOLDED_RELU", {"alpha": ("alpha", 1.0)})
_act("Shrink", "SHRINK", {"lambd": ("alpha", 0.5), "bias": ("beta", 0.0)})
_act("Mish", "MISH")


@onnx_op("Gelu")
class Gelu(OpImporter):
    """approximate='none' → GELU_ERF, 'tanh' → GELU_TANH."""

    def convert(self, ctx, node, inputs, attrs):
        approx = attrs.get("approximate", "none")
        if approx not in ("none", "tanh"):
            raise ParseError(f"Gelu approximate={approx!r} is not supported")
        return _out(ctx.add_layer("Activation", inputs[:1], {"type": "GELU_TANH" if approx == "tanh" else "GELU_ERF"}))


@onnx_op("Swish")
class Swish(OpImporter):
    """x * sigmoid(alpha * x): SILU for alpha == 1, else SWISH with alpha."""

    def convert(self, ctx, node, inputs, attrs):
        alpha = float(attrs.get("alpha", 1.0))
        params = {"type": "SILU"} if alpha == 1.0 else {"type": "SWISH", "alpha": alpha}
        return _out(ctx.add_layer("Activation", inputs[:1], params))


@onnx_op("SwiGLU", 28)
class SwiGLU(OpImporter):
    """Swish(A, alpha) * B (opset 28): the Swish activation of the gate, then a product; A and B have one shape
    (no broadcasting)."""

    def convert(self, ctx, node, inputs, attrs):
        a, b = inputs[0], inputs[1]
        if a is None or b is None:
            raise ParseError("SwiGLU needs both inputs, A (the gate) and B")
        if a.shape is not None and b.shape is not None and (len(a.shape) != len(b.shape) or any(
                x >= 0 and y >= 0 and x != y for x, y in zip(a.shape, b.shape))):
            raise ParseError(f"SwiGLU's inputs must have one shape (no broadcasting): A {list(a.shape)}, "
                             f"B {list(b.shape)}")
        alpha = float(attrs.get("alpha", 1.0))
        params = {"type": "SILU"} if alpha == 1.0 else {"type": "SWISH", "alpha": alpha}
        gate = ctx.add_layer("Activation", [a], params).outputs[0]
        return _out(ctx.add_layer("ElementWise", [gate, b], {"op": "PROD"}))


@onnx_op("PRelu")
class PRelu(OpImporter):
    """Activation PRELU with the (broadcast) slope as input 1."""

    def convert(self, ctx, node, inputs, attrs):
        return _out(ctx.add_layer("Activation", inputs[:2], {"type": "PRELU"}))


@onnx_op("Clip", since_version=1)
class ClipAttr(OpImporter):
    """Clip before opset 11: bounds are the min/max attributes."""

    def convert(self, ctx, node, inputs, attrs):
        lo, hi = attrs.get("min"), attrs.get("max")
        params = {"type": "CLIP", "alpha": None if lo is None else float(lo), "beta": None if hi is None else float(hi)}
        return _out(ctx.add_layer("Activation", inputs[:1], params))


@onnx_op("Clip", since_version=11)
class Clip(OpImporter):
    """Clip from opset 11: optional min/max inputs; constant bounds become params, others stay inputs."""

    def convert(self, ctx, node, inputs, attrs):
        x = inputs[0]
        lo = inputs[1] if len(inputs) > 1 else None
        hi = inputs[2] if len(inputs) > 2 else None
        clo = ctx.constant_value(lo) if lo is not None else None
        chi = ctx.constant_value(hi) if hi is not None else None
        if (lo is None or clo is not None) and (hi is None or chi is not None):
            params = {"type": "CLIP", "alpha": None if clo is None else float(np.asarray(clo).reshape(-1)[0]),
                      "beta": None if chi is None else float(np.asarray(chi).reshape(-1)[0])}
            return _out(ctx.add_layer("Activation", [x], params))
        return _out(ctx.add_layer("Activation", [x, lo, hi], {"type": "CLIP", "alpha": None, "beta": None}))


# --- Select, Cast -----------------------------------------------------------------------------------------------
@onnx_op("Where")
class Where(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _out(ctx.add_layer("Select", inputs[:3]))


def _dtype_name(np_dtype):
    return np.dtype(np_dtype).name


def _set_dtype(tensor, np_dtype):
    try:
        tensor.dtype = DataType.from_numpy(np_dtype)
    except Exception:  # float8 / int4 and friends are not engine DataTypes; shape inference may still tell
        pass


@onnx_op("Cast")
class Cast(OpImporter):
    """Cast to the numpy spelling of ONNX `to` (ml_dtypes names for bfloat16 / float8 / int4 / float4)."""

    def convert(self, ctx, node, inputs, attrs):
        np_dtype = helper.tensor_dtype_to_np_dtype(int(attrs["to"]))
        params = {"to": _dtype_name(np_dtype), "saturate": bool(attrs.get("saturate", 1)),
                  "round_mode": attrs.get("round_mode", "up")}
        layer = ctx.add_layer("Cast", inputs[:1], params)
        _set_dtype(layer.outputs[0], np_dtype)
        return layer.outputs


@onnx_op("CastLike")
class CastLike(OpImporter):
    """Cast to the dtype of input 1 (known at import, else taken from input 1's value at run time)."""

    def convert(self, ctx, node, inputs, attrs):
        target = inputs[1]
        np_dtype = None
        value = ctx.constant_value(target)
        if value is not None:
            np_dtype = value.dtype
        elif target.dtype is not None:
            np_dtype = target.dtype.numpy
        else:
            vt = ctx.value_types.get(node.input[1])
            np_dtype = vt[0].numpy if vt and vt[0] is not None else None
        params = {"saturate": bool(attrs.get("saturate", 1)), "round_mode": attrs.get("round_mode", "up")}
        if np_dtype is None:
            params["to"] = None
            return _out(ctx.add_layer("Cast", inputs[:2], params))
        params["to"] = _dtype_name(np_dtype)
        layer = ctx.add_layer("Cast", inputs[:1], params)
        _set_dtype(layer.outputs[0], np_dtype)
        return layer.outputs
