"""cuBLASLt GEMMs (through nvmath-python's bindings): MatrixMultiply with the bias / ReLU / GELU epilogue fused
into the GEMM, in FP32 (pedantic, or TF32 by the layer's math), FP16 and BF16 (tensor cores, FP32 accumulation)
and FP8 E4M3 on Hopper (FP16 output, FP32 scale), with cuBLASLt's algorithm list as our tactic list.

For each problem (shapes, types, transposes, epilogue) cuBLASLt's heuristic returns up to ALGOS algorithms; tactic
`cublaslt-algo-i` runs the i-th, so the builder times them like cuDNN's execution plans and the timing cache keeps
the winner. Row-major C[M,N] = A[M,K] @ B[K,N] is the column-major product C^T = B^T A^T: cuBLASLt's "A" is our B.
A 2-D right operand (a weight) folds the left operand's batch dims into M; batched operands use strided batches.

Epilogue: leading post-ops `bias` (per output column), then `add` (a residual of the output's shape, as C with
beta = 1), then one activation cuBLASLt has (RELU; GELU_TANH, its GELU) are fused; the rest runs after the GEMM
with our pointwise kernels (conv.epilogue)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import has_library, missing
from native.cuda.driver import CudaError, context
from native.cuda.tactics.common import FLOAT_STORAGE, on_device, out_array, weight
from native.cuda.tactics.epilogue import epilogue
from native.tactics import Tactic, TacticRefusal, register_variants

ALGOS = 4                          # heuristic results kept per problem: tactics cublaslt-algo-0..3
WORKSPACE = 32 << 20               # cuBLASLt workspace per context (bytes), the preference's limit
_HEURISTIC = np.dtype([("algo", "u8", (8,)), ("workspace_size", "u8"), ("state", "i4"), ("waves_count", "f4"),
                       ("reserved", "i4", (4,))])   # cublasLtMatmulHeuristicResult_t
_TYPE = {"float32": "CUDA_R_32F", "float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF",
         "float8_e4m3fn": "CUDA_R_8F_E4M3", "int8": "CUDA_R_8I", "int32": "CUDA_R_32I"}
_ACT_EPILOGUE = {"RELU": "RELU", "GELU_TANH": "GELU"}
_STATE: dict = {}


def _lt():
    from nvmath.bindings import cublasLt
    return cublasLt


def available() -> bool:
    return has_library("cublasLt")


def _state():
    """This context's cuBLASLt handle, workspace and problem cache."""
    ctx = context()
    st = _STATE.get(id(ctx))
    if st is None:
        st = _STATE[id(ctx)] = {"handle": _lt().create(), "workspace": GpuArray((WORKSPACE,), np.uint8),
                                "problems": {}}
    return st


def _set(setter, obj, attr, value):
    buf = np.ascontiguousarray(value)
    setter(obj, int(attr), buf.ctypes.data, buf.nbytes)


class Problem:
    """One GEMM signature: its descriptors and cuBLASLt's heuristic algorithms (built once, reused per call)."""

    def __init__(self, m, n, k, batch, strides, ab_type, d_type, ta, tb, epilogue, has_c, compute):
        from nvmath import CudaDataType
        lt = _lt()
        st = _state()
        D = lt.MatmulDescAttribute
        L = lt.MatrixLayoutAttribute
        cd = lambda name: int(getattr(CudaDataType, _TYPE[name]))
        self.scale = np.int32 if ab_type == "int8" else np.float32   # INT8: int32 accumulation and scaling
        self.desc = lt.matmul_desc_create(int(compute), cd("int32" if ab_type == "int8" else "float32"))
        # cuBLASLt's A is our B (k x n row-major = n x k column-major), its B is our A
        _set(lt.matmul_desc_set_attribute, self.desc, D.TRANSA, np.int32(1 if tb else 0))
        _set(lt.matmul_desc_set_attribute, self.desc, D.TRANSB, np.int32(1 if ta else 0))
        _set(lt.matmul_desc_set_attribute, self.desc, D.EPILOGUE, np.int32(int(getattr(lt.Epilogue, epilogue))))
        if "BIAS" in epilogue:
            _set(lt.matmul_desc_set_attribute, self.desc, D.BIAS_DATA_TYPE,
                 np.int32(cd(d_type if d_type != "float8_e4m3fn" else "float16")))
        sa, sb, sd = strides

        def layout(dtype, rows, cols, ld, stride):
            h = lt.matrix_layout_create(cd(dtype), rows, cols, ld)
            if batch > 1:
                _set(lt.matrix_layout_set_attribute, h, L.BATCH_COUNT, np.int32(batch))
                _set(lt.matrix_layout_set_attribute, h, L.STRIDED_BATCH_OFFSET, np.int64(stride))
            return h
        self.a = layout(ab_type, k if tb else n, n if tb else k, k if tb else n, sb)   # our B
        self.b = layout(ab_type, m if ta else k, k if ta else m, m if ta else k, sa)   # our A
        self.c = layout(d_type, n, m, n, sd)
        self.d = self.c
        pref = lt.matmul_preference_create()
        _set(lt.matmul_preference_set_attribute, pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
             np.uint64(WORKSPACE))
        self.results = np.zeros(ALGOS, _HEURISTIC)
        count = np.zeros(1, np.int32)
        try:
            lt.matmul_algo_get_heuristic(st["handle"], self.desc, self.a, self.b, self.c, self.d, pref, ALGOS,
                                         self.results.ctypes.data, count.ctypes.data)
        finally:
            lt.matmul_preference_destroy(pref)
        self.count = int(count[0])
        self.has_c = has_c

    def algo(self, index: int) -> int:
        """Address of the index-th heuristic algorithm (the last one when cuBLASLt returned fewer)."""
        i = min(index, self.count - 1)
        return self.results.ctypes.data + i * _HEURISTIC.itemsize

    def run(self, index, a, b, d, c=None, bias=None):
        lt = _lt()
        st = _state()
        if bias is not None:
            _set(lt.matmul_desc_set_attribute, self.desc, lt.MatmulDescAttribute.BIAS_POINTER, np.uint64(bias.ptr))
        one, zero = np.ones(1, self.scale), np.zeros(1, self.scale)
        beta = one if c is not None else zero
        c = c if c is not None else d
        try:
            lt.matmul(st["handle"], self.desc, one.ctypes.data, b.ptr, self.a, a.ptr, self.b, beta.ctypes.data,
                      c.ptr, self.c, d.ptr, self.d, self.algo(index), st["workspace"].ptr, WORKSPACE,
                      int(context().stream))
        except Exception as e:
            raise CudaError(f"cublasLtMatmul (algorithm {index}) failed: {e}") from e


def _compute(ab_type: str, tf32: bool):
    from nvmath.bindings import cublas
    C = cublas.ComputeType
    if ab_type == "float32":
        return C.COMPUTE_32F_FAST_TF32 if tf32 else C.COMPUTE_32F_PEDANTIC
    return C.COMPUTE_32I if ab_type == "int8" else C.COMPUTE_32F


def fused_steps(post_ops, rank):
    """(epilogue name, steps fused, steps left for our kernels): leading bias along the last axis, then a residual
    add, then RELU / GELU_TANH."""
    post = list(post_ops or ())
    i, bias, add, act = 0, None, None, None
    if i < len(post) and post[i]["op"] == "bias" and post[i].get("axis", -1) in (-1, rank - 1):
        bias, i = post[i], i + 1
    if i < len(post) and post[i]["op"] == "add":
        add, i = post[i], i + 1
    if i < len(post) and post[i]["op"] == "activation" and post[i]["type"] in _ACT_EPILOGUE:
        act, i = post[i], i + 1
    parts = ([_ACT_EPILOGUE[act["type"]]] if act else []) + (["BIAS"] if bias else [])
    return "_".join(parts) or "DEFAULT", bias, add, post[i:]


def gemm(a: GpuArray, b: GpuArray, index=0, transpose_a=False, transpose_b=False, tf32=False, out_dtype=None,
         epilogue="DEFAULT", bias=None, c=None, outputs=None) -> GpuArray:
    """act(a @ b + c + bias) through cuBLASLt's index-th heuristic algorithm; a and b share one storage type
    (float32, float16, bfloat16, float8_e4m3fn or int8), the result is stored in out_dtype (default: theirs;
    FP8 -> FP16; INT8 -> exact int32 accumulators)."""
    if a.dtype != b.dtype or a.dtype.name not in _TYPE:
        raise TacticRefusal(f"cuBLASLt tactic takes operands of one float type, got {a.dtype}/{b.dtype}")
    ab = a.dtype.name
    out_dtype = np.dtype(out_dtype or {"float8_e4m3fn": np.float16, "int8": np.int32}.get(ab, a.dtype))
    if out_dtype.name not in _TYPE or out_dtype.name in ("float8_e4m3fn", "int8") or (
            (ab == "int8") != (out_dtype.name == "int32")):
        raise TacticRefusal(f"cuBLASLt output type {out_dtype} runs on another tactic")
    M, K = (a.shape[-1], a.shape[-2]) if transpose_a else (a.shape[-2], a.shape[-1])
    Kb, N = (b.shape[-1], b.shape[-2]) if transpose_b else (b.shape[-2], b.shape[-1])
    if K != Kb:
        raise ValueError(f"matmul shapes {a.shape} x {b.shape} do not agree on K")
    if ab == "float8_e4m3fn" and (not transpose_b or transpose_a or K % 16 or N % 16):
        raise TacticRefusal("FP8 GEMMs need the weight as [N, K] (transpose_b) and N, K multiples of 16")
    if ab == "int8" and (not transpose_b or transpose_a or K % 4 or N % 4):
        raise TacticRefusal("INT8 GEMMs need the weight as [N, K] (transpose_b) and N, K multiples of 4")
    if not transpose_a and b.ndim == 2 and a.ndim > 2:   # a weight: fold a's batch dims into M
        flat = [o.reshape((-1, o.shape[-1])) if o is not None else None for o in outputs or ()]
        cc = c.reshape((-1, c.shape[-1])) if c is not None else None
        y = gemm(a.reshape((-1, a.shape[-1])), b, index, False, transpose_b, tf32, out_dtype, epilogue, bias, cc,
                 flat)
        return y.reshape(tuple(a.shape[:-1]) + (N,))
    if a.ndim > 2 or b.ndim > 2:
        if b.ndim != a.ndim or a.shape[:-2] != b.shape[:-2]:
            raise TacticRefusal(f"batch dims {a.shape[:-2]} x {b.shape[:-2]} run on another tactic")
    batch_shape = tuple(a.shape[:-2])
    count = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    out = out_array(outputs, 0, batch_shape + (M, N), out_dtype)
    if out.size == 0:
        return out
    if K == 0:
        context().memset0(out.ptr, out.nbytes)
        return out
    if c is not None and (tuple(c.shape) != tuple(out.shape) or c.dtype != out_dtype):
        raise TacticRefusal(f"residual {c.shape}/{c.dtype} does not match the output {out.shape}/{out_dtype}")
    key = (M, N, K, count, ab, out_dtype.name, bool(transpose_a), bool(transpose_b), epilogue, c is not None,
           bool(tf32))
    problems = _state()["problems"]
    p = problems.get(key)
    if p is None:
        try:
            p = Problem(M, N, K, count, (M * K, K * N, M * N), ab, out_dtype.name, transpose_a, transpose_b,
                        epilogue, c is not None, _compute(ab, tf32))
        except Exception as e:
            raise TacticRefusal(f"cuBLASLt has no algorithm for {M}x{K} @ {K}x{N} ({ab}, {epilogue}): {e}") from e
        if p.count == 0:
            raise TacticRefusal(f"cuBLASLt has no algorithm for {M}x{K} @ {K}x{N} ({ab}, {epilogue})")
        if len(problems) > 4096:
            problems.clear()
        problems[key] = p
    if index >= p.count:
        raise TacticRefusal(f"cuBLASLt returned {p.count} algorithms for this problem, not {index + 1}")
    p.run(index, a, b, out, c, bias)
    return out


class _CublasLtMatMul(Tactic):
    """cuBLASLt GEMM with fused bias/ReLU/GELU epilogue, algorithm `index` of the heuristic's list."""

    kind, device = "MatrixMultiply", "cuda"
    honours = {"post_ops"}
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = ("float32", "float16", "bfloat16", "fp8")
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    index = 0

    def supports(self, op, input_shapes):
        if missing("cublasLt"):
            return missing("cublasLt")
        from native.cuda.tactics.pointwise import _ACT
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
        if input_shapes and any(s is not None and len(s) < 2 for s in input_shapes[:2]):
            return "vector operands run on another tactic"
        if op.precision == "fp8" and not isinstance(op.weights.get("b"), np.ndarray):
            return "FP8 needs a constant right operand (the weight is converted once)"
        return None

    def prepare(self, op):
        """Weights in the layer's operand type: FP16/BF16 storage, FP8 E4M3 (saturated, as [N, K]) for FP8."""
        from native.numerics import to_storage
        out = {}
        for k, v in op.weights.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                v = np.asarray(v, np.float32)
                if op.precision == "fp8" and k == "b":
                    w = v.T if not op.params.get("transpose_b") else v
                    v = np.ascontiguousarray(to_storage(w, "fp8"))
                elif op.precision in ("float16", "bfloat16", "fp8"):
                    v = to_storage(v, "float16" if op.precision == "fp8" else op.precision)
            out[k] = v
        return out

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = on_device(inputs[0])
        if a.ndim < 2:
            raise TacticRefusal("vector operands run on another tactic")
        fp8 = op.precision == "fp8"
        tb = bool(op.params.get("transpose_b"))
        if "b" in op.weights:
            if fp8 and op.weights["b"].dtype.name != "float8_e4m3fn":
                op.weights = self.prepare(op)
            b = weight(op.weights["b"])
            if b.dtype != a.dtype and not fp8:
                b = weight(op.weights["b"], a.dtype)
        else:
            b = on_device(inputs[1])
        if b.ndim < 2:
            raise TacticRefusal("vector operands run on another tactic")
        if fp8:
            if a.dtype != np.float16:
                raise TacticRefusal(f"FP8 layers read float16 activations, got {a.dtype}")
            from native.cuda.tactics.fp8 import to_fp8
            a, tb = to_fp8(a), True
        name, bias_step, add_step, rest = fused_steps(op.params.get("post_ops"), a.ndim)
        out_dtype = np.float16 if fp8 else a.dtype
        bias = weight(op.weights[bias_step["weight"]], out_dtype) if bias_step else None
        c = on_device(inputs[add_step["input"]]) if add_step else None
        y = gemm(a, b, self.index, bool(op.params.get("transpose_a")), tb, tf32=(op.math == "tf32"),
                 out_dtype=out_dtype, epilogue=name, bias=bias, c=c, outputs=outputs)
        if rest:
            epilogue(y, op, inputs, rest)
        return [y]


register_variants(_CublasLtMatMul, ALGOS, "cublaslt-algo-{i}", "cuBLASLt GEMM + fused epilogue, heuristic algorithm {i}")
