"""Convolution on the GPU: an NVRTC im2col kernel and a cuBLAS GEMM per batch item (all groups in one strided
batched call), then the fused epilogue (bias, activation, residual add) with our pointwise kernels.
2-D, NCHW, FP32 (TF32 when the layer's math says so)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.driver import CudaError
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import on_device, out_array, weight
from native.cuda.tactics.gemm import handle
from native.cuda.tactics.pointwise import SRC, _ACT, activate, binary
from native.tactics import Tactic, register_tactic


def _geometry(op, x_shape, k_shape):
    from native.cpu.kernels.conv.geometry import geometry
    return geometry(op.params, x_shape, list(k_shape[2:]))


def epilogue(y: GpuArray, op, inputs, steps=None):
    """Apply `steps` (default: params['post_ops']) in order, in place on y (y's storage type throughout)."""
    for step in op.params.get("post_ops") or () if steps is None else steps:
        if step["op"] == "bias":
            b = weight(op.weights[step["weight"]], y.dtype)
            shape = [1] * y.ndim
            shape[step.get("axis", 1)] = -1
            binary("ew_sum", y, b.reshape(tuple(b.size if d == -1 else d for d in shape)), y)
        elif step["op"] == "add":
            binary("ew_sum", y, on_device(inputs[step["input"]]), y)
        elif step["op"] == "activation":
            activate(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
        else:
            raise CudaError(f"post-op {step['op']!r} has no GPU implementation")
    return y


@register_tactic
class Im2colCublasConv(Tactic):
    """im2col (NVRTC) + cuBLAS strided-batched GEMM over the groups + pointwise epilogue."""

    kind, name, device = "Convolution", "im2col-cublas", "cuda"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
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
        if x.dtype != np.float32:
            raise TypeError(f"GPU convolution takes float32, got {x.dtype}")
        wh = op.weights["kernel"]
        w = weight(wh)
        M, Cg, kh, kw = (int(d) for d in wh.shape)
        g = int(op.params.get("groups", 1) or 1)
        n, c, h, wd = x.shape
        strides, dil, pre, post, out = _geometry(op, x.shape, wh.shape)
        if any(p < 0 for p in pre + post):
            raise TypeError("negative pads run on the host")
        oh, ow = out
        P, K, Mg = oh * ow, Cg * kh * kw, M // g
        y = out_array(outputs, 0, (n, M, oh, ow), np.float32)
        if y.size == 0:
            return [y]
        cols = GpuArray((c * kh * kw * P,), np.float32)
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        compute = cublas.ComputeType.COMPUTE_32F_FAST_TF32 if op.math == "tf32" else \
            cublas.ComputeType.COMPUTE_32F_PEDANTIC
        item = c * h * wd
        for i in range(n):
            launch(kernel(SRC, "im2col2d"), grid_for(cols.size), (256, 1, 1),
                   [np.uint64(cols.ptr), np.uint64(x.ptr + i * item * 4), np.int64(c), np.int64(h), np.int64(wd),
                    np.int64(kh), np.int64(kw), np.int64(strides[0]), np.int64(strides[1]), np.int64(pre[0]),
                    np.int64(pre[1]), np.int64(dil[0]), np.int64(dil[1]), np.int64(oh), np.int64(ow)])
            # per group: Y[Mg, P] = W[Mg, K] @ cols[K, P]  (column-major: Y^T = cols^T W^T)
            cublas.gemm_strided_batched_ex(handle(), cublas.Operation.N, cublas.Operation.N, P, Mg, K,
                                           one.ctypes.data, cols.ptr, CudaDataType.CUDA_R_32F, P, K * P,
                                           w.ptr, CudaDataType.CUDA_R_32F, K, Mg * K, zero.ctypes.data,
                                           y.ptr + i * M * P * 4, CudaDataType.CUDA_R_32F, P, Mg * P, g,
                                           compute, cublas.GemmAlgo.DEFAULT)
        bias = op.weights.get("bias")
        if bias is not None:
            binary("ew_sum", y, weight(bias).reshape((1, M, 1, 1)), y)
        elif len(inputs) > 2 and inputs[2] is not None:
            b = on_device(inputs[2])
            binary("ew_sum", y, b.reshape((1, M, 1, 1)), y)
        return [epilogue(y, op, inputs)]
