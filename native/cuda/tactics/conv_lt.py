"""Pointwise (1x1, stride 1, unpadded) NHWC convolutions as one cuBLASLt GEMM with the epilogue in the GEMM:
y[N*H*W, M] = act(x[N*H*W, C] @ W[C, M] + residual + bias), the residual read as cuBLASLt's C (beta = 1), bias and
ReLU by its RELU_BIAS epilogue: one kernel per layer.

Why: cuDNN runs conv + bias + residual add + ReLU graphs on its runtime-fusion engine only (every plan heuristics
modes A and B rank for ResNet-50's bottleneck `conv3 + Add + Relu` is `eng4`/`eng7`, a generated kernel), and those
kernels run these memory-bound layers well below the memory roofline: 0.19 ms for [128, 56, 56, 64] -> 256 on an
H200 (1.7x the bytes over the memory bandwidth), 0.11 ms at [128, 28, 28, 128] -> 512. cuBLASLt's GEMMs, which cuDNN
itself uses for 1x1 convolutions with bias + ReLU (its `eng39`), take the residual in the same pass. Tactics
`cublaslt-1x1-<i>` run the i-th algorithm of cuBLASLt's heuristic (gemm_lt.ALGOS of them); the builder times them
against cuDNN's plans. FP16 / BF16 (FP32 accumulation, epilogue in FP32, one rounding) and FP32 (pedantic, or
TF32 by the layer's math)."""
from __future__ import annotations

import numpy as np

from native.cuda.availability import missing
from native.cuda.tactics.common import FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, storage, weight
from native.cuda.tactics.epilogue import epilogue
from native.cuda.tactics.gemm_lt import ALGOS, gemm
from native.cuda.tactics.pointwise import _ACT
from native.tactics import Tactic, TacticRefusal, register_variants


def pointwise_conv(params) -> str:
    """"" when a ConvolutionNHWC layer's geometry is a plain GEMM over its pixels (1x1 window, stride 1, no
    padding, no dilation, one group), else why not."""
    if [int(k) for k in params.get("kernel_spatial") or ()] != [1, 1]:
        return "not a 1x1 convolution"
    if any(int(s) != 1 for s in params.get("strides") or ()):
        return "strided 1x1 convolutions run on cuDNN"
    if any(int(p) for p in list(params.get("pre_padding") or ()) + list(params.get("post_padding") or ())):
        return "padded 1x1 convolutions run on cuDNN"
    if any(int(d) != 1 for d in params.get("dilations") or ()):
        return "dilated 1x1 convolutions run on cuDNN"
    if int(params.get("groups", 1) or 1) != 1:
        return "grouped convolutions run on cuDNN"
    return ""


def plan_epilogue(post_ops):
    """(cuBLASLt epilogue name, index of the residual input or None, post-ops left for our kernels) of a layer
    whose own bias is a weight: a leading residual add, then a ReLU, fuse into the GEMM."""
    post = list(post_ops or ())
    i, residual = 0, None
    if i < len(post) and post[i]["op"] == "add":
        residual, i = int(post[i]["input"]), i + 1
    relu = i < len(post) and post[i]["op"] == "activation" and post[i]["type"] == "RELU"
    if relu:
        i += 1
    return ("RELU_BIAS" if relu else "BIAS"), residual, post[i:]


class _LtPointwiseConv(Tactic):
    kind, device = "ConvolutionNHWC", "cuda"
    honours = {"post_ops"}
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)
    formats = ("nhwc",)
    index = 0

    def supports(self, op, input_shapes):
        if missing("cublasLt"):
            return missing("cublasLt")
        why = pointwise_conv(op.params)
        if why:
            return why
        if op.weights.get("kernel_hwio") is None:
            return "kernel given as a tensor runs on another tactic"
        if not isinstance(op.weights.get("bias"), np.ndarray):
            return "a convolution without a bias weight runs on cuDNN"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "only 4-D inputs"
        for step in op.params.get("post_ops") or ():
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
            if step["op"] not in ("add", "activation", "bias"):
                return f"post-op {step['op']} has no GPU kernel"
        return None

    def prepare(self, op):
        """The [C, M] kernel and the bias in the layer's storage type (what cuBLASLt reads)."""
        out = dict(op.weights)
        dtype = storage(op)
        out["lt_kernel"] = np.ascontiguousarray(np.asarray(op.weights["kernel_hwio"], np.float32).astype(dtype))
        out["lt_bias"] = np.asarray(op.weights["bias"], np.float32).astype(dtype)
        return out

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        if x.ndim != 4:
            raise TacticRefusal("only 4-D inputs")
        if "lt_kernel" not in op.weights:
            op.weights = self.prepare(op)
        dtype = np.dtype(storage(op))
        if x.dtype != dtype:
            raise TacticRefusal(f"GPU kernel needs one float storage type, got {sorted({x.dtype.name, dtype.name})}")
        w = weight(op.weights["lt_kernel"])
        n, h, wd, c = (int(d) for d in x.shape)
        if w.shape[0] != c:
            raise TacticRefusal(f"kernel [{w.shape[0]}, {w.shape[1]}] does not match {c} input channels")
        m = int(w.shape[1])
        name, residual, rest = plan_epilogue(op.params.get("post_ops"))
        r = None
        if residual is not None:
            r = on_device(inputs[residual])
            if tuple(r.shape) != (n, h, wd, m) or r.dtype != dtype:
                raise TacticRefusal(f"residual {tuple(r.shape)}/{r.dtype} does not match the output "
                                    f"{(n, h, wd, m)}/{dtype}")
            r = r.reshape((n * h * wd, m))
        y = out_array(outputs, 0, (n, h, wd, m), dtype)
        if y.size == 0:
            return [y]
        flat = y.reshape((n * h * wd, m))
        gemm(x.reshape((n * h * wd, c)), w, self.index, tf32=(op.math == "tf32"), out_dtype=dtype, epilogue=name,
             bias=weight(op.weights["lt_bias"]), c=r, outputs=[flat])
        if rest:
            epilogue(y, op, inputs, rest)
        return [y]


register_variants(_LtPointwiseConv, ALGOS, "cublaslt-1x1-{i}",
                  "1x1 NHWC convolution as a cuBLASLt GEMM, residual add + bias + ReLU in its epilogue, heuristic "
                  "algorithm {i}")
