"""MatrixMultiply "split-k": the reduction dimension K cut into chunks, one BLAS product per chunk, the partial sums
rounded to the layer's precision (float16 layers: native.numerics.round_fp16) and added in chunk order.

What a split-K GPU kernel does when K is long and M*N is small (few output tiles, many idle cores): every chunk
runs on its own and a reduction adds the partials. Its numerics differ from the single-GEMM tactics: the partials
are rounded before they are summed, and the summation order is chunk-wise, so the result is a genuine alternative
(bit-different, within K*eps of the exact sum), not a copy of "blas".
"""
import numpy as np

from native.cpu.kernels.matmul import _WIDEN, _finish, _tr
from native.tactics import Tactic, register_tactic

SPLIT_MIN_K = 256   # below this one GEMM is as good: nothing to split
CHUNKS = 4


def split_k_matmul(a, b, chunks=CHUNKS, precision="float32"):
    """a @ b with K in `chunks` pieces; partials rounded to `precision` before the in-order sum."""
    k = a.shape[-1]
    edges = np.linspace(0, k, chunks + 1).astype(int)
    rnd = None
    if precision == "float16":
        from native.numerics import round_fp16 as rnd
    elif precision == "bfloat16":
        from native.numerics import round_bf16 as rnd
    acc = None
    for lo, hi in zip(edges[:-1], edges[1:]):
        part = np.matmul(a[..., lo:hi], b[..., lo:hi, :])
        if rnd is not None:
            part = rnd(part)
        if acc is None:
            acc = part
        else:
            acc += part
            if rnd is not None:
                acc = rnd(acc)
    return acc


@register_tactic
class SplitKMatMul(Tactic):
    """K split into 4 chunks, partial sums in the layer's precision, added in order."""
    kind = "MatrixMultiply"
    name = "split-k"
    precisions = ("float32", "float16")
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return "needs the input shape"
        a = input_shapes[0]
        k = a[-2] if op.params.get("transpose_a") else a[-1]
        if len(a) < 2 or k < SPLIT_MIN_K:
            return f"K {k} below {SPLIT_MIN_K}: nothing to split"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        a = input_shapes[0]
        n = (op.weights.get("b").shape[-1] if op.weights.get("b") is not None else
             (input_shapes[1][-1] if len(input_shapes) > 1 and input_shapes[1] else 0))
        return 4 * int(np.prod(a[:-1])) * int(n)   # one partial product

    def run(self, op, inputs):
        p = op.params
        a = np.asarray(inputs[0])
        b = op.weights["b"] if "b" in op.weights else np.asarray(inputs[1])
        if p.get("transpose_a"):
            a = _tr(a)
        if p.get("transpose_b"):
            b = _tr(b)
        out_dtype = a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype)
        if out_dtype.name in _WIDEN:
            a, b = a.astype(np.float32), b.astype(np.float32)
        if b.ndim == 1:
            return [_finish(np.matmul(a, b), out_dtype, op, inputs)]
        return [_finish(split_k_matmul(a, b, precision=op.precision), out_dtype, op, inputs)]
