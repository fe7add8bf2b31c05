"""The fft tactic: a stride-1 2-D convolution with large kernels as a product in the frequency domain.

Every input channel plane and every kernel (zero-padded to the padded input's size) is transformed with a real
2-D FFT; per frequency the channel sum is a complex [N, C] x [C, M] product (one batched GEMM over all
frequencies); one inverse FFT per output plane gives the circular cross-correlation, whose first Ho x Wo values
are the convolution (a kernel no larger than the input never wraps). Cost ~ (N*C + M*C + N*M) * HW log HW + the
products, independent of the kernel size, so it pays only for large kernels: offered from 5x5 up.

Numerics: the transforms spread each output's rounding over the whole plane, so the error is relative to the
plane's energy (|x| |w| summed over all taps and pixels), not to each output's own terms as in a GEMM: small outputs
next to large ones carry a larger relative error than any GEMM tactic's.
The kernels' transforms depend on the input size and are made on the first run, then kept with the layer.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry, pad_input
from native.cpu.kernels.conv.weights import conv_bias, work_dtype
from native.tactics import Tactic, register_tactic

MIN_KERNEL = 5   # below this a GEMM tactic does fewer operations


def kernel_spectrum(w, size):
    """rfft2 of the kernels, conjugated (correlation, not convolution), zero-padded to `size`: [F, C, M]."""
    w = np.asarray(w, np.float32)
    wf = np.conj(np.fft.rfft2(w, s=size))                       # [M, C, Fh, Fw] complex64
    return np.ascontiguousarray(wf.reshape(w.shape[0], w.shape[1], -1).transpose(2, 1, 0))


@register_tactic
class FftConv(Tactic):
    """Frequency-domain convolution for large kernels (see the module docstring)."""
    kind, name = "Convolution", "fft"
    honours = {"post_ops", "side"}

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        if len(ks) != 2 or max(ks) < MIN_KERNEL:
            return f"2-D kernels of {MIN_KERNEL}x{MIN_KERNEL} or larger only (it pays for large kernels)"
        if any(s != 1 for s in (p.get("strides") or [1, 1])) or any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "stride 1, dilation 1 only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        n, c, h, w = input_shapes[0]
        m = op.params.get("num_output_maps") or c
        return 8 * (n * c + c * m + n * m) * (h + 8) * (w // 2 + 8)   # spectra, complex64

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        io_dtype = x.dtype
        x = x.astype(np.float32, copy=False) if work_dtype(op, x) != np.float64 else x
        const = "kernel" in op.weights
        w = op.weights["kernel"] if const else inputs[1]
        b = conv_bias(op.weights)
        if b is None and not const and len(inputs) > 2:
            b = inputs[2]
        kh, kw = np.shape(w)[2:]
        _, _, pre, post, out = geometry(op.params, x.shape, [kh, kw])
        xp = pad_input(x, pre, post)
        n, c, hp, wp = xp.shape
        size = (hp, wp)
        cached = getattr(op, "_fft_kernel", None) if const else None
        if cached is None or cached[0] != size:
            cached = (size, kernel_spectrum(w, size))
            if const:
                op._fft_kernel = cached   # the layer's own Op: kept for the next run at this input size
        wf = cached[1]                                              # [F, C, M]
        xf = np.fft.rfft2(xp)                                       # [N, C, Fh, Fw]
        fh, fw = xf.shape[2:]
        xf = np.ascontiguousarray(xf.reshape(n, c, -1).transpose(2, 0, 1))   # [F, N, C]
        yf = np.matmul(xf, wf)                                      # [F, N, M]
        m = yf.shape[2]
        yf = yf.transpose(1, 2, 0).reshape(n, m, fh, fw)
        y = np.fft.irfft2(yf, s=size)[:, :, :out[0], :out[1]]
        y = np.ascontiguousarray(y, dtype=x.dtype)
        res = finish(op, y, b, inputs, x.dtype)
        return res if io_dtype == x.dtype else [res[0].astype(io_dtype)] + res[1:]
