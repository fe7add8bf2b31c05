"""Convolution weights: finding kernel and bias (packed by `prepare` or raw inputs), and packing them.

Weights are pre-packed at build time in a tactic's `prepare` ([g, M/g, C/g*k] contiguous for the GEMM tactics,
[taps, C] for depthwise, [taps, M, C] for shifted-gemm); `run` also accepts unpacked weights (the builder's first
run and constant folding use them)."""
from __future__ import annotations

import numpy as np


def kernel_and_bias(op, inputs):
    w = op.weights.get("kernel")
    packed = ("kernel_gemm" in op.weights or "kernel_gemm_biased" in op.weights or "kernel_taps" in op.weights
              or "kernel_tap_gemm" in op.weights)
    if w is None and not packed and len(inputs) > 1:
        w = inputs[1]
    b = conv_bias(op.weights)
    if b is None and len(inputs) > 2:
        b = inputs[2]
    return w, b


def conv_bias(weights):
    """A convolution's bias weight, also when prepare moved it into the GEMM matrix's last column (see
    `pack_gemm`); None when it has none."""
    if "kernel_gemm_biased" not in weights:
        return weights.get("bias")
    col = weights["kernel_gemm_biased"][0, :, -1]
    scale = weights.get("kernel_gemm_scale")
    return col if scale is None else col / scale.reshape(())


def kernel_spatial(op, w):
    ks = op.params.get("kernel_shape")
    if ks:
        return list(ks)
    return list(np.shape(w)[2:])


def work_dtype(op, x):
    if op.params.get("integer"):
        return np.float64
    return x.dtype if x.dtype.kind == "f" else np.float32


def integer_inputs(op, x, w, inputs):
    """ConvInteger: subtract zero points and compute exactly in float64."""
    xz = inputs[3] if len(inputs) > 3 and inputs[3] is not None else 0
    wz = inputs[4] if len(inputs) > 4 and inputs[4] is not None else 0
    x = x.astype(np.float64) - np.asarray(xz, np.float64)
    w = np.asarray(w).astype(np.float64)
    wz = np.asarray(wz, np.float64)
    if wz.ndim == 1 and wz.size > 1:
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    return x, w - wz


def side_cin(op) -> int:
    """Input channels of the merged 1x1 shortcut (0 when there is none)."""
    return int(op.weights["side_kernel"].shape[1]) if op.params.get("side") else 0


def silu_first(op):
    """The layer's first post-op is SiLU (YOLO's conv + SiLU): worth pre-scaling the GEMM by 1/2, see `pack_gemm`."""
    post = op.params.get("post_ops") or ()
    return bool(post) and post[0]["op"] == "activation" and post[0]["type"] == "SILU"


def gemm_scale(op):
    """The pre-scale of the packed GEMM weights (see `pack_gemm`), or None."""
    packed = "kernel_gemm" in op.weights or "kernel_gemm_biased" in op.weights
    return op.weights.get("kernel_gemm_scale") if packed else None


def bias_in_gemm(op):
    """The packed GEMM weights carry the bias as a last column (see `pack_gemm`)."""
    return "kernel_gemm_biased" in op.weights


def gemm_weights(op, w, groups, dtype, raw=False):
    """The packed [g, M/g, C/g*prod(k)] GEMM matrix: from `prepare` when there, else a reshape of w. `raw`: as
    packed, possibly pre-scaled by op.weights["kernel_gemm_scale"] and with the bias column of
    "kernel_gemm_biased" (only conv2d_gemm handles those)."""
    packed = op.weights.get("kernel_gemm")
    if packed is None and "kernel_gemm_biased" in op.weights:
        packed = op.weights["kernel_gemm_biased"]
        if not raw:
            packed = packed[..., :packed.shape[2] - 1 - side_cin(op)]
    if packed is not None:
        scale = gemm_scale(op)
        if scale is not None and not raw:
            packed = packed / scale.reshape(())  # exact: the scale is a power of two
        return packed if packed.dtype == dtype else packed.astype(dtype)
    w = np.asarray(w)
    return w.astype(dtype, copy=False).reshape(groups, w.shape[0] // groups, -1)


def repacked(op, key, pack):
    """op.weights with 'kernel' replaced by weights[key] = pack(kernel), C-contiguous (as they are without one)."""
    w = op.weights.get("kernel")
    if w is None:
        return op.weights
    weights = {k: v for k, v in op.weights.items() if k != "kernel"}
    weights[key] = np.ascontiguousarray(pack(np.asarray(w)))
    return weights


def pack_gemm(op):
    """Replace 'kernel' by its contiguous GEMM form: 'kernel_gemm' [g, M/g, C/g*k], or, for an ungrouped float
    convolution with a bias weight, 'kernel_gemm_biased' [1, M, C*k + 1] whose last column is the bias: the patch
    matrix then gets a row of ones and the GEMM adds the bias itself (one pass over the output less)."""
    w = op.weights.get("kernel")
    if w is None or op.params.get("integer"):
        return op.weights
    weights = {k: v for k, v in op.weights.items() if k != "kernel"}
    groups = op.params.get("groups", 1) or 1
    packed = np.ascontiguousarray(gemm_weights(op, w, groups, np.float32 if w.dtype.kind != "f" else w.dtype))
    key = "kernel_gemm"
    bias = weights.get("bias")
    if bias is not None and groups == 1 and packed.dtype.kind == "f" and np.size(bias) == packed.shape[1]:
        cols = [packed]
        if op.params.get("side"):  # the merged shortcut's weights multiply its input rows of the patch matrix
            cols.append(np.asarray(weights["side_kernel"], packed.dtype)[None])
        packed = np.concatenate(cols + [np.asarray(bias, packed.dtype).reshape(1, -1, 1)], axis=2)
        del weights["bias"]
        key = "kernel_gemm_biased"
    if silu_first(op) and packed.dtype.itemsize >= 4:
        # silu(z) = h + h*tanh(h) with h = z/2: a GEMM with weights (and bias) halved -- exact, a power of two --
        # yields h directly, so the epilogue saves the z/2 pass and the SiLU is 3 passes over the band
        packed = packed * 0.5
        weights["kernel_gemm_scale"] = np.full(1, 0.5, packed.dtype)
    weights[key] = packed
    return weights
