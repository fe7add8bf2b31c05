"""CPU kernels: MatrixMultiply (two tactics) and Einsum.

MatrixMultiply tactics:
  * "blas": np.matmul on the operands as given (transposes as strided views). Numpy loops over the batch and
    calls BLAS once per matrix, which is best when both operands are activations or the batch is tiny.
  * "packed-gemm": only for a constant 2-D right operand (weights['b']). `prepare` stores it transposed as
    needed and C-contiguous ("b_packed", [K, N]) at build time; `run` folds every leading dim of the left
    operand into the row dim and does ONE [batch*M, K] x [K, N] GEMM, avoiding numpy's per-matrix loop.
Both compute float16/bfloat16 in float32 (numpy has no half-precision BLAS) and apply params["post_ops"].
"""
import numpy as np

from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic, simple_tactic

_WIDEN = {"float16", "bfloat16"}


def _tr(x):
    return x if x.ndim < 2 else np.swapaxes(x, -1, -2)


def _finish(y, out_dtype, op, inputs):
    if not isinstance(y, np.ndarray):
        y = np.asarray(y)
    if y.dtype != out_dtype:
        y = y.astype(out_dtype)
    if op.params.get("post_ops"):
        y = apply_post_ops(y, op, inputs)
    return y


@register_tactic
class BlasMatMul(Tactic):
    kind = "MatrixMultiply"
    name = "blas"
    precisions = ("float32", "float16", "int32")

    def run(self, op, inputs):
        p = op.params
        a = inputs[0]
        b = op.weights["b"] if "b" in op.weights else inputs[1]
        if p.get("transpose_a"):
            a = _tr(a)
        if p.get("transpose_b"):
            b = _tr(b)
        out_dtype = a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype)  # internal lowerings may mix
        if out_dtype.name in _WIDEN:
            a, b = a.astype(np.float32), b.astype(np.float32)
        return [_finish(np.matmul(a, b), out_dtype, op, inputs)]


@register_tactic
class PackedGemm(Tactic):
    kind = "MatrixMultiply"
    name = "packed-gemm"
    precisions = ("float32", "float16")

    def supports(self, op, input_shapes):
        b = op.weights.get("b_packed", op.weights.get("b"))
        if b is None or b.ndim != 2:
            return False
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) < 1:
            return False
        return True

    def prepare(self, op):
        w = dict(op.weights)
        if "b_packed" in w:  # already packed (idempotent)
            return w
        b = w.pop("b")
        if op.params.get("transpose_b"):
            b = b.T
        if b.dtype.name in _WIDEN:
            b = b.astype(np.float32)
        w["b_packed"] = np.ascontiguousarray(b)
        return w

    def run(self, op, inputs):
        a = inputs[0]
        bp = op.weights["b_packed"]
        if op.params.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        out_dtype = a.dtype if a.dtype == bp.dtype or a.dtype.name in _WIDEN else np.result_type(a.dtype, bp.dtype)
        compute = bp.dtype if out_dtype.name in _WIDEN else out_dtype
        if a.dtype != compute:
            a = a.astype(compute)
        if bp.dtype != compute:
            bp = bp.astype(compute)
        k, n = bp.shape
        if a.ndim == 1:
            y = np.dot(a, bp)
        else:
            y = np.dot(a.reshape(-1, k), bp).reshape(a.shape[:-1] + (n,))
        return [_finish(y, out_dtype, op, inputs)]


@simple_tactic("Einsum")
def einsum(op, inputs):
    eq = op.params["equation"].replace(" ", "")
    arrays = [np.asarray(x) for x in inputs]
    dtype = arrays[0].dtype if arrays else np.float32
    if dtype.name in _WIDEN:
        arrays = [x.astype(np.float32) for x in arrays]
    y = np.einsum(eq, *arrays, optimize=len(arrays) > 2)
    y = np.asarray(y)
    return [y if y.dtype == dtype else y.astype(dtype)]
