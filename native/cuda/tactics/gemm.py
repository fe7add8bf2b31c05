"""cuBLAS GEMMs (through nvmath-python's bindings): MatrixMultiply in FP32 (TF32 when the layer's math says so) and
FP16 (tensor cores, FP32 accumulation). Attention's cuBLAS tactic (two batched GEMMs around a scaled, masked
softmax) lives in attention.py beside cuDNN's SDPA.

Row-major C[M,N] = A[M,K] @ B[K,N] is computed as the column-major product C^T = B^T A^T, batched with strides
(stride 0 for a side whose batch dims are absent or all 1)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.driver import CudaError, context
from native.cuda.tactics.common import FLOAT_STORAGE, on_device, out_array, storage, weight
from native.cuda.tactics.epilogue import epilogue
from native.tactics import Tactic, TacticRefusal, register_tactic

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


_CUDA_TYPE = {"float32": "CUDA_R_32F", "float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF"}


def matmul(a: GpuArray, b: GpuArray, transpose_a=False, transpose_b=False, tf32=False, out_dtype=None,
           outputs=None) -> GpuArray:
    """a @ b (batched, broadcast batch dims) with FP32 accumulation; a and b share one storage type, the result
    is stored in out_dtype (default: theirs), in `outputs[0]` when that planned buffer fits."""
    from nvmath import CudaDataType
    from nvmath.bindings import cublas
    if a.dtype != b.dtype or a.dtype.name not in _CUDA_TYPE:
        raise TacticRefusal(f"cuBLAS tactic takes float32, float16 or bfloat16 operands of one type, "
                        f"got {a.dtype}/{b.dtype}")
    out_dtype = np.dtype(out_dtype or a.dtype)
    ab_type = getattr(CudaDataType, _CUDA_TYPE[a.dtype.name])
    c_type = getattr(CudaDataType, _CUDA_TYPE[out_dtype.name])
    M, K = (a.shape[-1], a.shape[-2]) if transpose_a else (a.shape[-2], a.shape[-1])
    Kb, N = (b.shape[-1], b.shape[-2]) if transpose_b else (b.shape[-2], b.shape[-1])
    if K != Kb:
        raise ValueError(f"matmul shapes {a.shape} x {b.shape} do not agree on K")
    if not transpose_a and b.ndim == 2 and a.ndim > 2:   # a weight: fold a's batch dims into M (one GEMM)
        flat = [o.reshape((-1, o.shape[-1])) if o is not None else None for o in outputs or ()]
        out = matmul(a.reshape((-1, a.shape[-1])), b, False, transpose_b, tf32, out_dtype, flat)
        return out.reshape(tuple(a.shape[:-1]) + (out.shape[-1],))
    batch = _batch_ok(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise TacticRefusal(f"batch dims {a.shape[:-2]} x {b.shape[:-2]} broadcast partially; host tactic runs it")
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    out = out_array(outputs, 0, tuple(batch) + (M, N), out_dtype)
    sa = M * K if int(np.prod(a.shape[:-2], dtype=np.int64)) > 1 else 0
    sb = K * N if int(np.prod(b.shape[:-2], dtype=np.int64)) > 1 else 0
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    op_b = cublas.Operation.T if transpose_b else cublas.Operation.N
    op_a = cublas.Operation.T if transpose_a else cublas.Operation.N
    ldb = K if transpose_b else N
    lda = M if transpose_a else K
    if a.dtype != np.float32:    # float16 / bfloat16 operands: tensor cores, FP32 accumulation
        compute = cublas.ComputeType.COMPUTE_32F
    else:
        compute = cublas.ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else cublas.ComputeType.COMPUTE_32F_PEDANTIC
    if out.size == 0:
        return out
    if K == 0:
        context().memset0(out.ptr, out.nbytes)
        return out
    try:
        cublas.gemm_strided_batched_ex(handle(), op_b, op_a, N, M, K, one.ctypes.data, b.ptr, ab_type, ldb, sb,
                                       a.ptr, ab_type, lda, sa, zero.ctypes.data, out.ptr, c_type, N, M * N, count,
                                       compute, cublas.GemmAlgo.DEFAULT)
    except Exception as e:
        raise CudaError(f"cublasGemmStridedBatchedEx({M}x{K} @ {K}x{N}, batch {count}) failed: {e}") from e
    return out


@register_tactic
class CublasMatMul(Tactic):
    """cuBLAS GEMM: FP32 pedantic (TF32 tensor cores when the layer's math is tf32), FP16 with FP32 accumulation."""

    kind, name, device = "MatrixMultiply", "cublas", "cuda"
    honours = {"post_ops"}
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = ("float32", "float16", "bfloat16")
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if missing("cublas"):
            return missing("cublas")
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
        """Weights in the layer's storage type (FP16 layers read FP16 weights)."""
        dtype = storage(op)
        return {k: (np.asarray(v, np.float32).astype(dtype) if isinstance(v, np.ndarray) and v.dtype.kind == "f"
                    else v) for k, v in op.weights.items()}

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = on_device(inputs[0])
        b = weight(op.weights["b"], a.dtype) if "b" in op.weights else on_device(inputs[1])
        if a.ndim < 2 or b.ndim < 2:
            raise TacticRefusal("vector operands run on the host")
        y = matmul(a, b, bool(op.params.get("transpose_a")), bool(op.params.get("transpose_b")),
                   tf32=(op.math == "tf32"), outputs=outputs)
        return [epilogue(y, op, inputs)]
