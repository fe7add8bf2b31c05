"""Transposed convolution (Deconvolution) tactics: GEMM then col2im scatter, and ONNX Col2Im itself."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu.kernels.conv.weights import kernel_and_bias
from native.cpu.kernels.fused import apply_post_ops
from native.shared.conv_geometry import deconv_geometry  # noqa: F401  (the math both devices use)
from native.tactics import Tactic, register_tactic


def scatter_taps(cols, ks, strides, dil, pre, out, in_sizes):
    """col2im: add cols[:, :, tap, i...] into y[:, :, i*s + tap*d - pre] for every kernel tap (one strided
    whole-tensor add per tap). cols: [N, M, taps, *in_sizes] -> y: [N, M, *out]."""
    n, m = cols.shape[:2]
    y = np.zeros((n, m) + tuple(out), dtype=cols.dtype)
    for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
        src, dst = [], []
        for i, tap in enumerate(taps):
            off = tap * dil[i] - pre[i]        # output position of input index j is j*s + off
            s = strides[i]
            j0 = 0 if off >= 0 else -(off // s)
            j1 = min(in_sizes[i], (out[i] - 1 - off) // s + 1) if out[i] - 1 - off >= 0 else 0
            if j1 <= j0:
                break
            src.append(slice(j0, j1))
            dst.append(slice(j0 * s + off, (j1 - 1) * s + off + 1, s))
        else:
            y[(slice(None), slice(None)) + tuple(dst)] += cols[(slice(None), slice(None), t) + tuple(src)]
    return y


@register_tactic
class Col2Im(Tactic):
    """ONNX Col2Im as a Deconvolution with params col2im: the input already holds the columns."""
    kind, name = "Deconvolution", "col2im"
    honours = {"col2im"}

    def supports(self, op, input_shapes):
        return bool(op.params.get("col2im"))

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        image = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        ks = [int(v) for v in np.asarray(inputs[2]).reshape(-1)]
        nd = len(image)
        strides = list(op.params.get("strides") or [1] * nd)
        dil = list(op.params.get("dilations") or [1] * nd)
        pre = list(op.params.get("pre_padding") or [0] * nd)
        post = list(op.params.get("post_padding") or [0] * nd)
        blocks = [(image[i] + pre[i] + post[i] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
        ntaps = int(np.prod(ks))
        n = x.shape[0]
        cols = x.reshape((n, x.shape[1] // ntaps, ntaps) + tuple(blocks))
        return [scatter_taps(cols, ks, strides, dil, pre, image, blocks)]


@register_tactic
class DeconvGemmCol2im(Tactic):
    """y = col2im(W^T @ x): one GEMM per group, then a scatter-add of each kernel tap into strided output views."""
    kind, name = "Deconvolution", "gemm-col2im"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        return not op.params.get("col2im")

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        dtype = x.dtype if x.dtype.kind == "f" else np.float32
        x = x.astype(dtype, copy=False)
        w = np.asarray(w, dtype)
        g = op.params.get("groups", 1) or 1
        n, c = x.shape[:2]
        ks = list(op.params.get("kernel_shape") or w.shape[2:])
        in_sizes = list(x.shape[2:])
        strides, dil, pre, out = deconv_geometry(op.params, in_sizes, ks)
        mg = w.shape[1]
        ntaps = int(np.prod(ks))
        wt = w.reshape(g, c // g, mg * ntaps).transpose(0, 2, 1)            # [g, Mg*taps, Cg]
        cols = np.matmul(wt, x.reshape(n, g, c // g, -1))                   # [n, g, Mg*taps, P]
        cols = cols.reshape((n, g * mg, ntaps) + tuple(in_sizes))
        tiles = all(k == s and d == 1 for k, d, s in zip(ks, dil, strides)) and not any(pre) and \
            all(o == i * s for o, i, s in zip(out, in_sizes, strides))
        if tiles:  # kernel == stride (the usual 2x upsampler): taps tile the output exactly, plain assignments
            y = np.empty((n, g * mg) + tuple(out), dtype=dtype)
            for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
                y[(slice(None), slice(None)) + tuple(slice(tp * d, None, s) for tp, d, s in zip(taps, dil, strides))] = \
                    cols[:, :, t]
        else:
            y = scatter_taps(cols, ks, strides, dil, pre, out, in_sizes)
        if b is not None:
            y += np.asarray(b, dtype).reshape((1, -1) + (1,) * len(out))
        return [apply_post_ops(y, op, inputs)]
