"""Convolution on the GPU: an NVRTC im2col kernel and a cuBLAS GEMM per batch item (all groups in one strided
batched call), then the fused epilogue (bias, activation, residual add) with our pointwise kernels. NCHW
`Convolution` and the layout pass's NHWC `ConvolutionNHWC` (groups 1; a 1x1 stride-1 convolution is one GEMM on
the input as it is): the NHWC twin needs no cuDNN plan, so a build whose cuDNN plans for a kind of convolution
compile too slowly (cudnn_conv.slow_compiles) still runs and times it on the GPU.
2-D, FP32 (TF32 when the layer's math says so), FP16 and BF16 (operands in the storage type, the GEMM
accumulating and storing float32, the epilogue in float32, one rounding at the end: the CPU's numerics)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, weight
from native.cuda.tactics.epilogue import _stored_weight, epilogue  # noqa: F401  (callers import it from here)
from native.cuda.tactics.gemm import handle
from native.cuda.tactics.pointwise import SRC, _ACT, binary
from native.cuda.tactics.tensor import cast
from native.shared.conv_geometry import geometry
from native.tactics import Tactic, TacticRefusal, register_tactic


def _geometry(op, x_shape, k_shape):
    return geometry(op.params, x_shape, list(k_shape[2:]))


@register_tactic
class Im2colCublasConv(Tactic):
    """im2col (NVRTC) + cuBLAS strided-batched GEMM over the groups + pointwise epilogue."""

    kind, name, device = "Convolution", "im2col-cublas", "cuda"
    honours = {"post_ops"}
    writes_outputs = True
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if missing("cublas"):
            return missing("cublas")
        w = op.weights.get("kernel")
        if w is None:
            return "kernel given as a tensor runs on the host"
        if np.ndim(w) != 4:
            return "only 2-D convolutions run on the GPU"
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from nvmath import CudaDataType
        from nvmath.bindings import cublas
        x = on_device(inputs[0])
        if x.dtype.name not in _GEMM_TYPE:
            raise TacticRefusal(f"GPU convolution takes float32, float16 or bfloat16, got {x.dtype}")
        wh = op.weights["kernel"]
        w = weight(wh, x.dtype)
        M, Cg, kh, kw = (int(d) for d in wh.shape)
        g = int(op.params.get("groups", 1) or 1)
        n, c, h, wd = x.shape
        strides, dil, pre, post, out = _geometry(op, x.shape, wh.shape)
        if any(p < 0 for p in pre + post):
            raise TacticRefusal("negative pads run on the host")
        oh, ow = out
        P, K, Mg = oh * ow, Cg * kh * kw, M // g
        wide = x.dtype == np.float32
        # FP16 / BF16: the GEMM accumulates and stores float32, the epilogue runs in float32, one rounding at the end
        y = out_array(outputs, 0, (n, M, oh, ow), x.dtype) if wide else GpuArray((n, M, oh, ow), np.float32)
        if y.size == 0:
            return [y if wide else out_array(outputs, 0, y.shape, x.dtype)]
        size = x.dtype.itemsize
        cols = GpuArray((c * kh * kw * P,), x.dtype)
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        if not wide:
            compute = cublas.ComputeType.COMPUTE_32F
        elif op.math == "tf32":
            compute = cublas.ComputeType.COMPUTE_32F_FAST_TF32
        else:
            compute = cublas.ComputeType.COMPUTE_32F_PEDANTIC
        ab = getattr(CudaDataType, _GEMM_TYPE[x.dtype.name])
        item = c * h * wd
        im2col = kernel(SRC, "im2col2d" if wide else "im2col2d_2")
        for i in range(n):
            launch(im2col, grid_for(cols.size), (256, 1, 1),
                   [np.uint64(cols.ptr), np.uint64(x.ptr + i * item * size), np.int64(c), np.int64(h), np.int64(wd),
                    np.int64(kh), np.int64(kw), np.int64(strides[0]), np.int64(strides[1]), np.int64(pre[0]),
                    np.int64(pre[1]), np.int64(dil[0]), np.int64(dil[1]), np.int64(oh), np.int64(ow)])
            # per group: Y[Mg, P] = W[Mg, K] @ cols[K, P]  (column-major: Y^T = cols^T W^T)
            cublas.gemm_strided_batched_ex(handle(), cublas.Operation.N, cublas.Operation.N, P, Mg, K,
                                           one.ctypes.data, cols.ptr, ab, P, K * P, w.ptr, ab, K, Mg * K,
                                           zero.ctypes.data, y.ptr + i * M * P * 4, CudaDataType.CUDA_R_32F, P,
                                           Mg * P, g, compute, cublas.GemmAlgo.DEFAULT)
        bias = op.weights.get("bias")
        if bias is not None:
            binary("ew_sum", y, _stored_weight(bias, op, np.float32).reshape((1, M, 1, 1)), y)
        elif len(inputs) > 2 and inputs[2] is not None:
            b = cast(on_device(inputs[2]), np.float32)
            binary("ew_sum", y, b.reshape((1, M, 1, 1)), y)
        epilogue(y, op, inputs)
        return [y if wide else cast(y, x.dtype, outputs)]


_GEMM_TYPE = {"float32": "CUDA_R_32F", "float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF"}


@register_tactic
class Im2colCublasConvNhwc(Tactic):
    """ConvolutionNHWC: im2col in channel-last order (NVRTC; none for a 1x1 stride-1 convolution) + one cuBLAS
    GEMM per batch item with the [KH*KW*C, M] kernel, giving the NHWC output directly, + pointwise epilogue."""

    kind, name, device = "ConvolutionNHWC", "im2col-cublas-nhwc", "cuda"
    honours = {"post_ops"}
    writes_outputs = True
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)
    formats = ("nhwc",)

    def supports(self, op, input_shapes):
        if missing("cublas"):
            return missing("cublas")
        if op.weights.get("kernel_hwio") is None or "kernel_spatial" not in op.params:
            return "kernel given as a tensor runs on another tactic"
        if int(op.params.get("groups", 1) or 1) != 1:
            return "grouped NHWC convolutions run on cuDNN"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "only 4-D inputs"
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
            if step["op"] not in ("bias", "add", "activation"):
                return f"post-op {step['op']} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from nvmath import CudaDataType
        from nvmath.bindings import cublas
        x = on_device(inputs[0])
        if x.dtype.name not in _GEMM_TYPE:
            raise TacticRefusal(f"GPU convolution takes float32, float16 or bfloat16, got {x.dtype}")
        p = op.params
        wh = op.weights["kernel_hwio"]          # [KH*KW*C, M]
        w = weight(wh, x.dtype)
        K, M = (int(d) for d in wh.shape)
        kh, kw = (int(d) for d in p["kernel_spatial"])
        sh, sw = (int(d) for d in (p.get("strides") or [1, 1]))
        dh, dw = (int(d) for d in (p.get("dilations") or [1, 1]))
        pre = [int(d) for d in (p.get("pre_padding") or [0, 0])]
        post = [int(d) for d in (p.get("post_padding") or [0, 0])]
        if any(v < 0 for v in pre + post):
            raise TacticRefusal("negative pads run on another tactic")
        n, h, wd, c = (int(d) for d in x.shape)
        if K != kh * kw * c:
            raise TacticRefusal(f"kernel [{K}, {M}] does not match {kh}x{kw} windows of {c} channels")
        oh = (h + pre[0] + post[0] - (kh - 1) * dh - 1) // sh + 1
        ow = (wd + pre[1] + post[1] - (kw - 1) * dw - 1) // sw + 1
        wide = x.dtype == np.float32
        y = out_array(outputs, 0, (n, oh, ow, M), x.dtype) if wide else GpuArray((n, oh, ow, M), np.float32)
        if y.size == 0:
            return [y if wide else out_array(outputs, 0, y.shape, x.dtype)]
        size, P = x.dtype.itemsize, oh * ow
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        if not wide:
            compute = cublas.ComputeType.COMPUTE_32F
        elif op.math == "tf32":
            compute = cublas.ComputeType.COMPUTE_32F_FAST_TF32
        else:
            compute = cublas.ComputeType.COMPUTE_32F_PEDANTIC
        ab = getattr(CudaDataType, _GEMM_TYPE[x.dtype.name])

        def gemm(cols_ptr, rows, y_ptr):
            # Y[rows, M] = cols[rows, K] @ W[K, M]  (column-major: Y^T[M, rows] = W^T[M, K] cols^T[K, rows])
            cublas.gemm_strided_batched_ex(handle(), cublas.Operation.N, cublas.Operation.N, M, rows, K,
                                           one.ctypes.data, w.ptr, ab, M, K * M, cols_ptr, ab, K, K * rows,
                                           zero.ctypes.data, y_ptr, CudaDataType.CUDA_R_32F, M, M * rows, 1,
                                           compute, cublas.GemmAlgo.DEFAULT)
        if kh == kw == 1 and sh == sw == 1 and not any(pre + post):
            gemm(x.ptr, n * P, y.ptr)           # the input is its own im2col
        else:
            cols = GpuArray((P * K,), x.dtype)
            im2col = kernel(SRC, "im2col2d_nhwc" if size == 4 else "im2col2d_nhwc_2")
            for i in range(n):
                launch(im2col, grid_for(cols.size), (256, 1, 1),
                       [np.uint64(cols.ptr), np.uint64(x.ptr + i * h * wd * c * size), np.int64(c), np.int64(h),
                        np.int64(wd), np.int64(kh), np.int64(kw), np.int64(sh), np.int64(sw), np.int64(pre[0]),
                        np.int64(pre[1]), np.int64(dh), np.int64(dw), np.int64(oh), np.int64(ow)])
                gemm(cols.ptr, P, y.ptr + i * P * M * 4)
        bias = op.weights.get("bias")
        if bias is not None:
            binary("ew_sum", y, _stored_weight(bias, op, np.float32).reshape((1, 1, 1, M)), y)
        epilogue(y, op, inputs)
        return [y if wide else cast(y, x.dtype, outputs)]
