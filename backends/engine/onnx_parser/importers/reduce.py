"""Importers: reductions, arg-reductions, softmax family, cumulative sums, matrix products (MatMul, Gemm, Einsum).

Axes given as an attribute (or as a constant input) become the `axes` param; axes computed at run time stay input 1.
"""
import numpy as np

from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from native.errors import ParseError


# --- Reduce -----------------------------------------------------------------------------------------------------
class _Reduce(OpImporter):
    """ONNX Reduce* → Reduce `op`; axes from the attribute (older opsets) or input 1 (ReduceSum 13+, others 18+)."""
    op = ""

    def convert(self, ctx, node, inputs, attrs):
        params = {"op": self.op, "keep_dims": bool(attrs.get("keepdims", 1)),
                  "noop_with_empty_axes": bool(attrs.get("noop_with_empty_axes", 0)), "axes": None}
        layer_inputs = [inputs[0]]
        if "axes" in attrs:
            params["axes"] = [int(a) for a in attrs["axes"]]
        elif len(inputs) > 1 and inputs[1] is not None:
            value = ctx.constant_value(inputs[1])
            if value is not None:
                params["axes"] = [int(a) for a in np.asarray(value).reshape(-1)]
            else:
                layer_inputs.append(inputs[1])
        return ctx.add_layer("Reduce", layer_inputs, params).outputs


for _name, _op in [("ReduceSum", "SUM"), ("ReduceMean", "AVG"), ("ReduceMax", "MAX"), ("ReduceMin", "MIN"),
                   ("ReduceProd", "PROD"), ("ReduceL1", "L1"), ("ReduceL2", "L2"), ("ReduceLogSum", "LOG_SUM"),
                   ("ReduceLogSumExp", "LOG_SUM_EXP"), ("ReduceSumSquare", "SUM_SQUARE")]:
    onnx_op(_name)(type(_name, (_Reduce,), {"op": _op, "__doc__": f"ONNX {_name} → Reduce {_op}."}))


class _ArgReduce(OpImporter):
    op = ""

    def convert(self, ctx, node, inputs, attrs):
        params = {"op": self.op, "axis": int(attrs.get("axis", 0)), "keep_dims": bool(attrs.get("keepdims", 1)),
                  "select_last_index": bool(attrs.get("select_last_index", 0))}
        return ctx.add_layer("ArgReduce", inputs[:1], params).outputs


@onnx_op("ArgMax")
class ArgMax(_ArgReduce):
    op = "MAX"


@onnx_op("ArgMin")
class ArgMin(_ArgReduce):
    op = "MIN"


# --- Softmax family ---------------------------------------------------------------------------------------------
class _Softmax(OpImporter):
    """Before opset 13 the op normalises the input flattened to 2-D at `axis` (default 1); from 13, one axis (-1)."""
    log = False
    hard = False

    def convert(self, ctx, node, inputs, attrs):
        flatten = ctx.opset < 13
        axis = int(attrs.get("axis", 1 if flatten else -1))
        params = {"axis": axis, "log": self.log, "hard": self.hard}
        if flatten:
            params["flatten"] = True
        return ctx.add_layer("Softmax", inputs[:1], params).outputs


@onnx_op("Softmax")
class Softmax(_Softmax):
    pass


@onnx_op("LogSoftmax")
class LogSoftmax(_Softmax):
    log = True


@onnx_op("Hardmax")
class Hardmax(_Softmax):
    hard = True


@onnx_op("CumSum")
class CumSum(OpImporter):
    """Cumulative SUM along the axis in input 1."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"op": "SUM", "exclusive": bool(attrs.get("exclusive", 0)), "reverse": bool(attrs.get("reverse", 0))}
        return ctx.add_layer("Cumulative", inputs[:2], params).outputs


@onnx_op("CumProd", since_version=26)
class CumProd(OpImporter):
    """Cumulative PROD along the axis in input 1 (exclusive starts from 1)."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"op": "PROD", "exclusive": bool(attrs.get("exclusive", 0)), "reverse": bool(attrs.get("reverse", 0))}
        return ctx.add_layer("Cumulative", inputs[:2], params).outputs


# --- matrix products --------------------------------------------------------------------------------------------
@onnx_op("MatMul")
class MatMul(OpImporter):
    """MatrixMultiply; a constant right operand goes to weights['b'] so a tactic can pre-pack it."""

    def convert(self, ctx, node, inputs, attrs):
        b = ctx.constant_value(inputs[1])
        if b is not None:
            return ctx.add_layer("MatrixMultiply", [inputs[0]], {}, weights={"b": np.asarray(b)}).outputs
        return ctx.add_layer("MatrixMultiply", inputs[:2]).outputs


@onnx_op("Gemm")
class Gemm(OpImporter):
    """alpha * A' B' + beta * C as one MatrixMultiply: alpha folds into a constant B (else a PROD layer), a constant
    C that broadcasts along the last axis becomes a 'bias' post-op, any other C an ElementWise SUM."""

    def convert(self, ctx, node, inputs, attrs):
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        params = {"transpose_a": bool(attrs.get("transA", 0)), "transpose_b": bool(attrs.get("transB", 0))}
        weights, post = {}, []
        bv = ctx.constant_value(b)
        if bv is not None:
            bv = np.asarray(bv)
            weights["b"] = (bv * alpha).astype(bv.dtype) if alpha != 1.0 else bv
            mm_inputs = [a]
        else:
            mm_inputs = [a, b]
        cv = ctx.constant_value(c) if c is not None else None
        # the bias epilogue runs after the product, so it needs alpha already inside (constant B) or alpha == 1
        if cv is not None and beta != 0.0 and np.asarray(cv).ndim <= 1 and (bv is not None or alpha == 1.0):
            cv = np.asarray(cv)
            weights["bias"] = (cv * beta).astype(cv.dtype) if beta != 1.0 else cv
            post.append({"op": "bias", "weight": "bias", "axis": -1})
        if post:
            params["post_ops"] = post
        y = ctx.add_layer("MatrixMultiply", mm_inputs, params, weights=weights).outputs[0]
        if bv is None and alpha != 1.0:
            y = ctx.add_layer("ElementWise", [y, ctx.constant(np.array(alpha, _dtype(a)))], {"op": "PROD"}).outputs[0]
        if c is not None and not post and beta != 0.0:
            if cv is not None:
                cv = np.asarray(cv)
                c = ctx.constant((cv * beta).astype(cv.dtype)) if beta != 1.0 else c
            elif beta != 1.0:
                c = ctx.add_layer("ElementWise", [c, ctx.constant(np.array(beta, _dtype(c)))],
                                  {"op": "PROD"}).outputs[0]
            y = ctx.add_layer("ElementWise", [y, c], {"op": "SUM"}).outputs[0]
        return [y]


def _dtype(t):
    return t.dtype.numpy if t is not None and t.dtype is not None else np.float32


@onnx_op("Einsum")
class Einsum(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        eq = attrs.get("equation")
        if not eq:
            raise ParseError("Einsum needs an equation")
        return ctx.add_layer("Einsum", [t for t in inputs if t is not None], {"equation": eq}).outputs
