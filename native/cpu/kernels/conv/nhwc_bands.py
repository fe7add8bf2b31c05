"""The nhwc-gemm-bands tactic: nhwc-gemm split into bands of output rows over the CPU pool, epilogue in the band.

nhwc-gemm (nhwc_gemm.py) gathers channel-last patches and runs one single-threaded GEMM over the whole output, then
the bias, activation and residual add in NCHW after the reformat back: on a 2-core machine one core idles through
the layer (yolov8n's 3x3 convolutions on 40x40-80x80 maps: 20-60M multiply-adds each). Here the output rows are cut
into bands, one per pool thread, and each band gathers its own patches (in cache-sized sub-bands), runs its GEMM, its
epilogue (bias, activations, the residual read through a channel-last view: elementwise, the same operations as
the NCHW epilogue) and writes its rows of the NCHW output. The input reformat is one copy, itself split into bands of
rows over the pool when large (nhwc_gemm.nhwc_padded).

Numerics: per output, the GEMM's reduction over (kh, kw, C) as in nhwc-gemm, but BLAS may sum a sub-band's rows in
another order than the whole matrix's, so this is its own tactic (the builder times it; one thread: not offered).
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.activations import activation_into
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.nhwc_gemm import NhwcGemm, nhwc_padded, nhwc_windows
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import register_tactic


def _band_epilogue_ok(op, inputs, shape):
    """The post-ops run per band channel-last: bias along channels, activations, same-shaped residual adds."""
    for step in op.params.get("post_ops") or ():
        if step["op"] == "add":
            r = inputs[step["input"]]
            if not isinstance(r, np.ndarray) or r.shape != shape:
                return False
        elif step["op"] == "bias" and step.get("axis", 1) != 1:
            return False
    return True


def _epilogue(yb, op, inputs, bias, n, h0, h1):
    """Bias and post-ops in place on one band's channel-last result yb [rows, Wo, M] (output rows h0..h1 of
    sample n), in the order the NCHW epilogue (`finish`) runs them."""
    if bias is not None:
        yb += bias
    for step in op.params.get("post_ops") or ():
        kind = step["op"]
        if kind == "bias":
            yb += np.asarray(op.weights[step["weight"]], yb.dtype).reshape(-1)
        elif kind == "activation":
            activation_into(yb, step)
        else:   # "add": the residual's rows, channel-last (a view)
            yb += inputs[step["input"]][n, :, h0:h1].transpose(1, 2, 0)


@register_tactic
class NhwcGemmBands(NhwcGemm):
    """nhwc-gemm in bands of output rows over the pool (see the module docstring)."""
    kind, name = "Convolution", "nhwc-gemm-bands"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        why = NhwcGemm.supports(self, op, input_shapes)
        if why is not None:
            return why
        if op.params.get("side"):
            return "no merged shortcut (nhwc-gemm runs it)"
        if num_threads() < 2:
            return "one CPU thread: nhwc-gemm is the same work unsplit"
        return None

    def run(self, op, inputs):
        x, k, b = NhwcGemm.operands(op, inputs)
        dtype = x.dtype
        n, c = x.shape[:2]
        ks = list(op.params.get("kernel_shape") or [])
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        ho, wo = out
        m = k.shape[1]
        if x.ndim != 4 or min(pre) < 0 or min(post) < 0 or k.shape[0] != c * ks[0] * ks[1]:
            return NhwcGemm.run(self, op, inputs)
        kdim = k.shape[0]
        threads = num_threads() if n * ho * wo * kdim * m >= tuning.PARALLEL_MIN_MACS else 1
        xh = nhwc_padded(x, pre, post, threads)
        win = nhwc_windows(xh, ks, strides, dil, out)                   # [N, Ho, Wo, kh, kw, C], a view
        y = np.empty((n, m, ho, wo), dtype)
        in_band = _band_epilogue_ok(op, inputs, y.shape)
        bias = None if b is None else np.asarray(b, dtype).reshape(-1)
        step = max(1, tuning.COLS_BYTES // max(1, wo * kdim * k.itemsize))   # patch rows that stay in cache
        tasks = [(ni, r0, r1) for ni in range(n) for r0, r1 in split(ho, max(1, -(-threads // n)))]

        def band(task):
            ni, r0, r1 = task
            for h0 in range(r0, r1, step):
                h1 = min(r1, h0 + step)
                cols = win[ni, h0:h1].reshape((h1 - h0) * wo, kdim)     # the patches: one copy
                yb = (cols @ k).reshape(h1 - h0, wo, m)
                if in_band:
                    _epilogue(yb, op, inputs, bias, ni, h0, h1)
                y[ni, :, h0:h1] = yb.transpose(2, 0, 1)
        parallel_for(band, tasks)
        if in_band:
            return [y]
        return finish(op, y, b, inputs, x.dtype)
