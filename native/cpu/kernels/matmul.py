"""CPU kernels: MatrixMultiply (three tactics) and Einsum.

MatrixMultiply tactics:
  * "blas": np.matmul on the operands as given (transposes as strided views). Numpy loops over the batch and
    calls BLAS once per matrix, which is best when both operands are activations or the batch is tiny.
  * "packed-gemm": only for a constant 2-D right operand (weights['b']). `prepare` stores it transposed as
    needed and C-contiguous ("b_packed", [K, N]) at build time; `run` folds every leading dim of the left
    operand into the row dim and does ONE [batch*M, K] x [K, N] GEMM, avoiding numpy's per-matrix loop.
    Large GEMMs run in row bands on the CPU pool, each band with its bias / activation epilogue (`gemm`).
  * "packed-gemm-t": the same product computed as (b^T a^T)^T, faster in OpenBLAS for few rows (M <= ~32).
All compute float16/bfloat16 in float32 (numpy has no half-precision BLAS) and apply params["post_ops"].
"""
import numpy as np

from native.cpu import threads
from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic, simple_tactic

_WIDEN = {"float16", "bfloat16"}


def _half(dt) -> bool:
    """dt.name in _WIDEN without `dtype.name` (a Python-level property: several µs per call in a small GEMM):
    float16 is the 2-byte 'f' kind, ml_dtypes' bfloat16 the 2-byte 'V' kind."""
    return dt.itemsize == 2 and dt.kind in "fV"


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
    honours = {"post_ops"}
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        p = op.params
        a = inputs[0]
        b = op.weights["b"] if "b" in op.weights else inputs[1]
        if p.get("transpose_a"):
            a = _tr(a)
        if p.get("transpose_b"):
            b = _tr(b)
        out_dtype = a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype)  # internal lowerings may mix
        if _half(out_dtype):
            a, b = a.astype(np.float32), b.astype(np.float32)
        elif _into(outputs, out_dtype) and a.dtype == b.dtype:   # straight into the planned buffer
            return [_finish(np.matmul(a, b, out=outputs[0]), out_dtype, op, inputs)]
        return [_finish(np.matmul(a, b), out_dtype, op, inputs)]


@register_tactic
class PackedGemm(Tactic):
    kind = "MatrixMultiply"
    name = "packed-gemm"
    honours = {"post_ops"}
    writes_outputs = True

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
        if _half(b.dtype):
            b = b.astype(np.float32)
        w["b_packed"] = np.ascontiguousarray(b)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = inputs[0]
        bp = op.weights["b_packed"]
        if op.params.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        out_dtype = a.dtype if a.dtype == bp.dtype or _half(a.dtype) else np.result_type(a.dtype, bp.dtype)
        compute = bp.dtype if _half(out_dtype) else out_dtype
        if a.dtype != compute:
            a = a.astype(compute)
        if bp.dtype != compute:
            bp = bp.astype(compute)
        k, n = bp.shape
        if a.ndim == 1:
            return [_finish(np.dot(a, bp), out_dtype, op, inputs)]
        post = op.params.get("post_ops")
        into = outputs[0].reshape(-1, n) if _into(outputs, compute) and out_dtype == compute else None
        if post and out_dtype == compute and all(s["op"] in ("bias", "activation") for s in post):
            # row-local epilogue: applied per band, right after that band's GEMM (in cache, in parallel)
            y = gemm(a.reshape(-1, k), bp, epilogue=lambda band: apply_post_ops(band, op, inputs), out=into)
            return [y.reshape(a.shape[:-1] + (n,))]
        y = gemm(a.reshape(-1, k), bp, out=into).reshape(a.shape[:-1] + (n,))
        return [_finish(y, out_dtype, op, inputs)]


@register_tactic
class PackedGemmTransposed(Tactic):
    """Like packed-gemm, but computes y^T = b^T a^T with b^T stored [N, K] C-contiguous at build time, then copies
    y back to row-major. With few rows (M = batch * tokens = 16..32) OpenBLAS packs the big operand on every call
    in the plain orientation; in this one the small operand is the one packed (measured up to 1.5x faster for
    [16, 256] x [256, 1024]; slower for tall inputs, so the builder's timing decides)."""
    kind = "MatrixMultiply"
    name = "packed-gemm-t"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        b = op.weights.get("bt_packed", op.weights.get("b"))
        if b is None or b.ndim != 2 or b.dtype.kind != "f" or b.dtype.itemsize < 4:
            return False
        return not (input_shapes and input_shapes[0] is not None and len(input_shapes[0]) < 2)

    def prepare(self, op):
        w = dict(op.weights)
        if "bt_packed" in w:
            return w
        b = w.pop("b")
        w["bt_packed"] = np.ascontiguousarray(b if op.params.get("transpose_b") else b.T)
        return w

    def run(self, op, inputs):
        a = inputs[0]
        bt = op.weights["bt_packed"]
        if op.params.get("transpose_a"):
            a = np.swapaxes(a, -1, -2)
        out_dtype = a.dtype if a.dtype == bt.dtype or _half(a.dtype) else np.result_type(a.dtype, bt.dtype)
        compute = bt.dtype if _half(out_dtype) else out_dtype
        if a.dtype != compute:
            a = a.astype(compute)
        if bt.dtype != compute:
            bt = bt.astype(compute)
        n, k = bt.shape
        y = np.ascontiguousarray(np.dot(bt, a.reshape(-1, k).T).T).reshape(a.shape[:-1] + (n,))
        return [_finish(y, out_dtype, op, inputs)]


# below this one thread beats a split: waking a pool thread costs ~50 µs here, and the pool's first use turns
# BLAS threading off for the whole process (native.cpu.threads), which small GEMMs (BERT at batch 1) feel
PARALLEL_MIN_MACS = 1 << 24
_BAND_ROWS = 8


def _into(outputs, dtype):
    """The planned output buffer to write into, when there is one of the result's dtype."""
    return outputs is not None and outputs[0] is not None and outputs[0].dtype == dtype


def gemm(a, b, epilogue=None, out=None):
    """a [M, K] @ b [K, N], then `epilogue(rows)` (in place, row-local) if given. Large products are split into
    row bands run on the CPU pool (native.cpu.threads), one single-threaded BLAS call plus epilogue per band:
    OpenBLAS's own threads busy-wait between calls, which on a small shared machine costs more than they gain.
    out: a C-contiguous [M, N] buffer of the result's dtype to write into (the memory plan's view)."""
    m, k = a.shape
    n = b.shape[1]
    macs = m * n * k
    parts = 1
    if m >= 2 * _BAND_ROWS and a.dtype == b.dtype and a.dtype.kind == "f" and \
            macs >= PARALLEL_MIN_MACS:
        parts = threads.num_threads()
    if parts == 1:
        y = np.dot(a, b) if out is None else np.dot(a, b, out=out)
        return epilogue(y) if epilogue is not None else y
    y = np.empty((m, n), np.result_type(a.dtype, b.dtype)) if out is None else out

    def band(r):
        yb = y[r[0]:r[1]]
        np.dot(a[r[0]:r[1]], b, out=yb)
        if epilogue is not None:
            res = epilogue(yb)
            if res is not yb:
                yb[...] = res
    threads.parallel_for(band, threads.split(m, parts))
    return y


@simple_tactic("Einsum")
def einsum(op, inputs):
    eq = op.params["equation"].replace(" ", "")
    arrays = [np.asarray(x) for x in inputs]
    dtype = arrays[0].dtype if arrays else np.float32
    if _half(dtype):
        arrays = [x.astype(np.float32) for x in arrays]
    y = np.einsum(eq, *arrays, optimize=len(arrays) > 2)
    y = np.asarray(y)
    return [y if y.dtype == dtype else y.astype(dtype)]
