"""Pointwise math, reductions, softmax, matrix multiply, einsum."""
from backends.engine.layers.base import Layer

__all__ = ["ActivationLayer", "ElementWiseLayer", "UnaryLayer", "SelectLayer", "ReduceLayer", "SoftmaxLayer",
           "MatrixMultiplyLayer", "EinsumLayer", "CumulativeLayer", "ArgReduceLayer"]


class ActivationLayer(Layer):
    """y = f(x) for `type` in RELU, SIGMOID, TANH, LEAKY_RELU, ELU, SELU, SOFTSIGN, SOFTPLUS, CLIP, HARD_SIGMOID,
    SCALED_TANH, THRESHOLDED_RELU, GELU_ERF, GELU_TANH, SILU, HARD_SWISH, MISH, CELU; `alpha`, `beta` as in TensorRT.
    Also SWISH (x*sigmoid(alpha*x)), SHRINK (lambda=alpha, bias=beta), PRELU (slope from input 1), and CLIP may
    take its bounds from optional inputs 1 and 2 (None / missing bound: unbounded)."""
    kind = "Activation"
    defaults = {"type": "RELU", "alpha": 0.0, "beta": 0.0}


class ElementWiseLayer(Layer):
    """Broadcasting binary op: SUM, PROD, MAX, MIN, SUB, DIV, POW, FLOOR_DIV, AND, OR, XOR, EQUAL, GREATER, LESS,
    GREATER_EQUAL, LESS_EQUAL, MOD, FMOD, BITSHIFT_LEFT, BITSHIFT_RIGHT, BITWISE_AND, BITWISE_OR, BITWISE_XOR.
    Variadic ONNX ops (Sum, Max, Mean...) chain several of these."""
    kind = "ElementWise"
    defaults = {"op": "SUM"}


class UnaryLayer(Layer):
    """y = op(x) for op in EXP, LOG, SQRT, RECIP, ABS, NEG, SIN, COS, TAN, SINH, COSH, ASIN, ACOS, ATAN, ASINH,
    ACOSH, ATANH, CEIL, FLOOR, ERF, NOT, SIGN, ROUND, ISINF, ISNAN, BITWISE_NOT, RECIPROCAL_SQRT; DET (determinant
    over the last two dims). ISINF reads `detect_positive` / `detect_negative` (default True)."""
    kind = "Unary"
    defaults = {"op": "EXP"}


class SelectLayer(Layer):
    """where(condition, then, else) with broadcasting."""
    kind = "Select"


class ReduceLayer(Layer):
    """Reduce over `axes` (None: all, or from input 1) with op SUM, PROD, MAX, MIN, AVG, L1, L2, LOG_SUM,
    LOG_SUM_EXP, SUM_SQUARE; `keep_dims`; `noop_with_empty_axes`."""
    kind = "Reduce"
    defaults = {"op": "SUM", "axes": None, "keep_dims": True, "noop_with_empty_axes": False}


class ArgReduceLayer(Layer):
    """Index of the max/min along `axis` (op MAX or MIN), `keep_dims`, `select_last_index`; int64 output."""
    kind = "ArgReduce"
    defaults = {"op": "MAX", "axis": 0, "keep_dims": True, "select_last_index": False}


class SoftmaxLayer(Layer):
    """Softmax along `axis`; `log` for LogSoftmax; `hard` for Hardmax; `flatten` (ONNX opset < 13) normalises over
    all dims from `axis` on, as if the input were reshaped to 2-D."""
    kind = "Softmax"
    defaults = {"axis": -1, "log": False, "hard": False}


class MatrixMultiplyLayer(Layer):
    """Batched matrix product with numpy broadcasting; `transpose_a/_b` transpose the last two dims.
    Weights 'b' (constant right operand, pre-packed at build) may replace input 1."""
    kind = "MatrixMultiply"
    defaults = {"transpose_a": False, "transpose_b": False}


class EinsumLayer(Layer):
    """Einstein summation by `equation`."""
    kind = "Einsum"
    defaults = {"equation": ""}


class CumulativeLayer(Layer):
    """Cumulative op (SUM, PROD) along the axis given by input 1; `exclusive`, `reverse`."""
    kind = "Cumulative"
    defaults = {"op": "SUM", "exclusive": False, "reverse": False}
