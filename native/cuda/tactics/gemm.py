"""cuBLAS GEMMs (through nvmath-python's bindings): MatrixMultiply in FP32, TF32 when the layer's math says so.

Row-major C[M,N] = A[M,K] @ B[K,N] is computed as the column-major product C^T = B^T A^T, batched with strides
(stride 0 for a side whose batch dims are absent or all 1)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray, to_device
from native.cuda.driver import CudaError, context
from native.tactics import Tactic, register_tactic

_HANDLE = {}


def handle():
    ctx = context()
    h = _HANDLE.get(id(ctx))
    if h is None:
        from nvmath.bindings import cublas
        h = cublas.create()
        cublas.set_stream(h, int(ctx.stream))
        _HANDLE[id(ctx)] = h
    return h


def _batch_ok(a_batch, b_batch):
    out = np.broadcast_shapes(a_batch, b_batch)
    for side in (a_batch, b_batch):
        if tuple(side) != tuple(out[len(out) - len(side):]) or (len(side) < len(out) and int(np.prod(side)) != 1):
            if int(np.prod(side, dtype=np.int64)) != 1:
                return None
    return out


def matmul(a: GpuArray, b: GpuArray, transpose_a=False, transpose_b=False, tf32=False) -> GpuArray:
    from nvmath import CudaDataType
    from nvmath.bindings import cublas
    M, K = (a.shape[-1], a.shape[-2]) if transpose_a else (a.shape[-2], a.shape[-1])
    Kb, N = (b.shape[-1], b.shape[-2]) if transpose_b else (b.shape[-2], b.shape[-1])
    if K != Kb:
        raise ValueError(f"matmul shapes {a.shape} x {b.shape} do not agree on K")
    batch = _batch_ok(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise TypeError(f"batch dims {a.shape[:-2]} x {b.shape[:-2]} broadcast partially; host tactic runs it")
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    out = GpuArray(tuple(batch) + (M, N), np.float32)
    sa = M * K if int(np.prod(a.shape[:-2], dtype=np.int64)) > 1 else 0
    sb = K * N if int(np.prod(b.shape[:-2], dtype=np.int64)) > 1 else 0
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    op_b = cublas.Operation.T if transpose_b else cublas.Operation.N
    op_a = cublas.Operation.T if transpose_a else cublas.Operation.N
    ldb = K if transpose_b else N
    lda = M if transpose_a else K
    compute = cublas.ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else cublas.ComputeType.COMPUTE_32F_PEDANTIC
    if out.size == 0:
        return out
    if K == 0:
        context().memset0(out.ptr, out.nbytes)
        return out
    try:
        cublas.gemm_strided_batched_ex(handle(), op_b, op_a, N, M, K, one.ctypes.data, b.ptr,
                                       CudaDataType.CUDA_R_32F, ldb, sb, a.ptr, CudaDataType.CUDA_R_32F, lda, sa,
                                       zero.ctypes.data, out.ptr, CudaDataType.CUDA_R_32F, N, M * N, count,
                                       compute, cublas.GemmAlgo.DEFAULT)
    except Exception as e:
        raise CudaError(f"cublasGemmStridedBatchedEx({M}x{K} @ {K}x{N}, batch {count}) failed: {e}") from e
    return out


@register_tactic
class CublasMatMul(Tactic):
    """cuBLAS GEMM (FP32 pedantic, or TF32 tensor cores when the layer's math is tf32)."""

    kind, name, device = "MatrixMultiply", "cublas", "cuda"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        from native.cuda.tactics.pointwise import _ACT
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
        if input_shapes and any(s is not None and len(s) < 2 for s in input_shapes[:2]):
            return "vector operands run on the host"
        if input_shapes and len(input_shapes) > 1 and all(s is not None for s in input_shapes[:2]):
            if _batch_ok(tuple(input_shapes[0][:-2]), tuple(input_shapes[1][:-2])) is None:
                return "partially broadcast batch dims run on the host"
        return None

    def prepare(self, op):
        return dict(op.weights)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = inputs[0] if isinstance(inputs[0], GpuArray) else to_device(np.ascontiguousarray(inputs[0]))
        if "b" in op.weights:
            b = _weights_on_device(op.weights, "b")
        else:
            b = inputs[1] if isinstance(inputs[1], GpuArray) else to_device(np.ascontiguousarray(inputs[1]))
        if a.dtype != np.float32 or b.dtype != np.float32:
            raise TypeError(f"cuBLAS tactic takes float32, got {a.dtype}/{b.dtype}")
        from native.cuda.tactics.conv import epilogue
        y = matmul(a, b, bool(op.params.get("transpose_a")), bool(op.params.get("transpose_b")),
                   tf32=(op.math == "tf32"))
        return [epilogue(y, op, inputs)]


_W: dict = {}


def _weights_on_device(weights, key):
    """Upload a weight once per process (kept alive beside its host array)."""
    host = weights[key]
    hit = _W.get(id(host))
    if hit is None or hit[0] is not host:
        hit = _W[id(host)] = (host, GpuArray.from_host(np.ascontiguousarray(host, dtype=np.float32)))
    return hit[1]
