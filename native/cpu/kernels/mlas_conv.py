"""FP32 convolution in ONNX Runtime's rounding order (its MLAS library on x86-64), for Q/DQ groups that ONNX
Runtime's CPU EP leaves in FP32 (backends/engine/builder/passes/qdq_onnxruntime.py).

A float convolution's result depends on the order its products are summed in. To reproduce ONNX Runtime's run of a
Q/DQ model bit for bit, the convolutions it computes in FP32 between a DQ and a Q must be summed as MLAS sums them
(each rounding can move a value across a quantization step of the Q that follows). The facts modelled here, from
MLAS's documented structure (convolve.cpp, sgemm.cpp and its x86-64 kernels), checked against ONNX Runtime 1.32:

* algorithm: a 1x1 convolution with unit strides and no padding is one GEMM on the input (W[M, C] @ x[C, N],
  N = output pixels); otherwise the input is expanded to columns (K = C/g * kh * kw, ordered channel, kernel row,
  kernel column) and multiplied, in slices of K when the columns would be large (below);
* the SGEMM (M > 1, N > 1) walks K in blocks of StrideK (128, adapted to the shape: halved while it is twice K or
  more when N >= K, doubled while StrideN > 16 and StrideN / 2 >= N otherwise); inside a block every output is
  one fused-multiply-add chain from zero in K order, and blocks are added to the result: C = C + block;
* M = 1 (one filter per group, e.g. depthwise): products rounded, summed four at a time ((p0 + p1) + p2) + p3,
  each group of four added to the result; a remainder of two, then one, likewise (no FMA);
* N = 1 (a 1x1 output): eight partial sums per output (lane j sums products k = j mod 8 in order, no FMA),
  reduced as (((l0 + l1) + l2) + l3) + (((l4 + l5) + l6) + l7) for rows in blocks of four (other groupings for a
  remainder of two or one row);
* the bias is added once at the end, then the activation.

FMA is computed as float64 product and sum rounded once to float32: exact for the product (48 bits), and equal to
a true FMA except when the float64 sum itself rounds onto a float32 tie (about one case in 2^29).
Threading is modelled as one thread (MLAS splits output pixels between threads; that changes the K blocking only
for convolutions with fewer output pixels than K / 2)."""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.geometry import geometry, pad_input, tap_slices
from native.cpu.kernels.conv.weights import kernel_and_bias
from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic

STRIDE_N = STRIDE_K = 128
EMULATE = "onnxruntime-mlas"


def _f32(x):
    return np.asarray(x, np.float32)


def fma_chain(a, b, acc=None):
    """acc + sum_k a[..., :, k] * b[..., k, :] as one FMA chain per output, k in order. a [G, M, K], b [G, K, N]."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for k in range(a.shape[-1]):
        prod = a64[..., :, k, None] * b64[..., None, k, :]
        acc = (prod if acc is None else acc.astype(np.float64) + prod).astype(np.float32)
    return acc


def sgemm_strides(n, k):
    """MLAS's (StrideN, StrideK) for an N x K problem."""
    sn, sk = STRIDE_N, STRIDE_K
    if n >= k:
        while sk // 2 >= k:
            sn, sk = sn * 2, sk // 2
    else:
        while sn > 16 and sn // 2 >= n:
            sn, sk = sn // 2, sk * 2
    return sn, sk


def _add(c, t):
    return t if c is None else (t + c).astype(np.float32)


def gemm_m1(a, b, c=None):
    """M = 1: a [G, 1, K], b [G, K, N] -> [G, 1, N]; products rounded, summed in groups of 4, 2, 1 (no FMA)."""
    p = (a[..., 0, :, None] * b).astype(np.float32)          # [G, K, N]
    k4 = p.shape[1] // 4 * 4
    for k in range(0, k4, 4):
        t = ((p[:, k] + p[:, k + 1]) + p[:, k + 2]) + p[:, k + 3]
        c = _add(c, t[:, None, :])
    k = k4
    if (p.shape[1] - k4) & 2:
        c = _add(c, (p[:, k] + p[:, k + 1])[:, None, :])
        k += 2
    if (p.shape[1] - k4) & 1:
        c = _add(c, p[:, k][:, None, :])
    return c


def gemm_n1(a, x, c=None):
    """N = 1: a [G, M, K] (rows), x [G, K] -> [G, M, 1]; eight lanes per row, reduced by blocks of 4 / 2 / 1 rows."""
    p = (a * x[:, None, :]).astype(np.float32)               # [G, M, K]
    g, m, k = p.shape
    pad = (-k) % 8
    if pad:
        p = np.concatenate([p, np.zeros((g, m, pad), np.float32)], axis=2)
    lanes = p[..., 0:8].copy()
    for i in range(8, p.shape[2], 8):
        lanes = (lanes + p[..., i:i + 8]).astype(np.float32)
    l_ = [lanes[..., j] for j in range(8)]
    four = (((l_[0] + l_[1]) + l_[2]) + l_[3]) + (((l_[4] + l_[5]) + l_[6]) + l_[7])
    two = ((l_[0] + l_[2]) + (l_[4] + l_[6])) + ((l_[1] + l_[3]) + (l_[5] + l_[7]))
    one = ((l_[0] + l_[1]) + (l_[2] + l_[3])) + ((l_[4] + l_[5]) + (l_[6] + l_[7]))
    out = four.copy()
    m4 = m // 4 * 4
    rest = m - m4
    if rest & 2:
        out[:, m4:m4 + 2] = two[:, m4:m4 + 2]
    if rest & 1:
        out[:, m - 1] = one[:, m - 1]
    return _add(c, out[..., None])


def sgemm(a, b, c=None, n_is_contiguous_column=False):
    """MLAS's SGEMM (C = A @ B, or C + A @ B when c is given) in its rounding order. a [G, M, K], b [G, K, N]."""
    m, k = a.shape[1], a.shape[2]
    n = b.shape[2]
    if m == 1:
        return gemm_m1(a, b, c)
    if n == 1 and n_is_contiguous_column:
        return gemm_n1(a, b[..., 0], c)
    _, sk = sgemm_strides(n, k)
    for k0 in range(0, k, sk):
        c = _add(c, fma_chain(a[..., k0:k0 + sk], b[..., k0:k0 + sk, :]))
    return c


def columns(x, kernel, strides, dil, pre, post, out):
    """im2col of one image's groups: x [C, H, W] -> [C * kh * kw, Ho * Wo] (channel, kernel row, kernel column)."""
    xp = pad_input(x[None], pre, post)[0]
    c = x.shape[0]
    cols = np.empty((c, kernel[0], kernel[1], out[0], out[1]), np.float32)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            cols[:, i, j] = xp[(slice(None),) + tap_slices((i, j), dil, strides, out)]
    return cols.reshape(c * kernel[0] * kernel[1], out[0] * out[1])


def conv2d(x, w, strides, dil, pre, post, out, groups):
    """y [N, M, Ho, Wo] (no bias) in MLAS's order. x [N, C, H, W], w [M, C/g, kh, kw]."""
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = list(w.shape[2:])
    mg, cg = m // groups, c // groups
    kk = cg * kernel[0] * kernel[1]
    size = out[0] * out[1]
    a = _f32(w).reshape(groups, mg, kk)
    y = np.empty((n, groups, mg, size), np.float32)
    pointwise = kernel == [1, 1] and all(s == 1 for s in strides) and not any(pre) and not any(post)
    for b in range(n):
        if pointwise:
            y[b] = sgemm(a, x[b].reshape(groups, cg, size), n_is_contiguous_column=size == 1)
            continue
        cols = columns(x[b], kernel, strides, dil, pre, post, out).reshape(groups, kk, size)
        if mg > size:          # ExpandThenGemm: one GEMM over all columns
            y[b] = sgemm(a, cols, n_is_contiguous_column=size == 1)
            continue
        sn, sk = STRIDE_N, STRIDE_K          # ExpandThenGemmSegmented: slices of N, and of K within each
        if size >= kk:
            while sk // 2 >= kk:
                sn, sk = sn * 2, sk // 2
        else:
            while sn > 16 and sn // 2 >= size:
                sn, sk = sn // 2, sk * 2
        for n0 in range(0, size, sn):
            acc = None
            for k0 in range(0, kk, sk):
                acc = sgemm(a[..., k0:k0 + sk], cols[:, k0:k0 + sk, n0:n0 + sn], acc,
                            n_is_contiguous_column=size == 1)
            y[b, :, :, n0:n0 + sn] = acc
    return y.reshape((n, m) + tuple(out))


@register_tactic
class MlasOrderConv(Tactic):
    """FP32 convolution summed in ONNX Runtime's (MLAS's) order; runs only the layers that ask for it (fused
    param emulate='onnxruntime-mlas'), so a Q/DQ model can be run exactly as ONNX Runtime's x86 CPU EP runs it."""
    kind, name = "Convolution", "mlas-order"
    honours = {"post_ops", "emulate"}

    def supports(self, op, input_shapes):
        if op.params.get("emulate") != EMULATE:
            return "runs only layers that emulate ONNX Runtime's MLAS order"
        ks = op.params.get("kernel_shape") or []
        if len(ks) not in (1, 2):
            return "1-D and 2-D convolutions only"
        return None

    def run(self, op, inputs):
        x = _f32(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        w = _f32(w)
        one_d = x.ndim == 3
        if one_d:   # MLAS promotes 1-D convolutions to 2-D
            x, w = x[:, :, None, :], w[:, :, None, :]
        params = dict(op.params)
        if one_d:
            params.update({k: [1 if k != "pre_padding" and k != "post_padding" else 0] + list(v)
                           for k, v in op.params.items()
                           if k in ("strides", "dilations", "pre_padding", "post_padding") and v})
        strides, dil, pre, post, out = geometry(params, x.shape, list(w.shape[2:]))
        y = conv2d(x, w, strides, dil, pre, post, out, op.params.get("groups", 1) or 1)
        if b is not None:
            y = (y + _f32(b).reshape(1, -1, 1, 1)).astype(np.float32)
        if one_d:
            y = y[:, :, 0, :]
        return [apply_post_ops(y, op, inputs)]
