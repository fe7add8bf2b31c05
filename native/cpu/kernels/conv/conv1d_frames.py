"""The conv1d-frames tactic: a 1-D convolution with a long kernel as one GEMM over its input frames.

Audio front ends write an STFT as a Conv ([1, 1, L] * [257 or 514, 1, 512], stride 160) and a polyphase resampler
as a height-1 2-D Conv ([1, 1, 1, L] * [160, 1, 1, 475], stride 441): 7-26M multiply-adds in one GEMM whose patch
matrix is the input's overlapping frames. im2col-gemm gathers that matrix tap by tap with the frame index innermost
(a 640-byte stride) and runs the GEMM on one thread; here the frames are copied once as rows ([T, C*k]: each row C
runs of k contiguous samples), and the GEMM W [M, C*k] @ frames^T runs in two fixed bands of output channels over
the CPU pool (both cores: ONNX Runtime's two threads run this layer ~1.5x faster than one), each band's bias and
post-ops applied in the band. Its own GEMM calls (another operand layout, channel bands), so its own tactic, timed
against im2col-gemm and conv1d-gemm.
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.conv1d_direct import as_1d
from native.cpu.kernels.conv.epilogue import region_epilogue
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import work_dtype
from native.cpu import threads as pool
from native.tactics import Tactic, register_tactic

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
MIN_TAPS = 16   # shorter kernels: the frames are mostly copies of one another, the patch GEMMs do better
BANDS = 2       # output-channel bands, one GEMM each (a 2-core machine's pool); fixed, see `run`


@register_tactic
class Conv1dFrames(Tactic):
    """Ungrouped float 1-D convolutions with at least MIN_TAPS taps as frames x weights (module docstring)."""
    kind, name = "Convolution", "conv1d-frames"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        shape = input_shapes[0] if input_shapes else None
        if not as_1d(shape, ks):
            return "1-D convolutions (or height-1 2-D ones) of known input shape only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
            return "ungrouped float convolutions only"
        if ks[-1] < MIN_TAPS:
            return f"kernels of at least {MIN_TAPS} taps only"
        pads = list(p.get("pre_padding") or []) + list(p.get("post_padding") or [])
        if any(v < 0 for v in pads):
            return "no cropping pads"
        if len(ks) == 2 and any((p.get(key) or [0, 0])[0] for key in ("pre_padding", "post_padding")):
            return "no padding along the height-1 axis"
        if any(s["op"] == "add" or (s["op"] == "bias" and s.get("axis", 1) != 1) for s in p.get("post_ops") or ()):
            return "no fused residual add"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {key: v for key, v in op.weights.items() if key != "kernel"}
        w = np.asarray(w)
        weights["kernel_frames"] = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        dtype = work_dtype(op, x)
        if dtype not in _DTYPES:
            dtype = np.dtype(np.float32)
        wm = op.weights.get("kernel_frames")
        if wm is None:
            w = op.weights.get("kernel")
            w = np.asarray(w if w is not None else inputs[1])
            wm = w.reshape(w.shape[0], -1)
        wm = wm.astype(dtype, copy=False)
        b = op.weights.get("bias")
        if b is None and "kernel" not in op.weights and "kernel_frames" not in op.weights and len(inputs) > 2:
            b = inputs[2]
        bias = None if b is None else np.asarray(b, dtype).reshape(-1)
        out_shape4 = x.ndim == 4
        x3 = x.reshape(x.shape[0], x.shape[1], x.shape[-1]).astype(dtype, copy=False)
        n, c, length = x3.shape
        m = wm.shape[0]
        k = wm.shape[1] // c
        strides, dil, pre, post, out = geometry(op.params, x.shape, [1, k] if out_shape4 else [k])
        s, d, pre, post, t = strides[-1], dil[-1], pre[-1], post[-1], out[-1]
        if pre or post:
            xp = np.zeros((n, c, length + pre + post), dtype)
            xp[:, :, pre:pre + length] = x3
            x3 = xp
        shape = (n, m, 1, t) if out_shape4 else (n, m, t)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == dtype and dst.flags.c_contiguous \
            else np.empty(shape, dtype)
        y4 = y.reshape(n, m, 1, t)
        epilogue = bias is not None or bool(op.params.get("post_ops"))   # per-channel only (supports)
        # the cut is fixed (BANDS bands whatever the pool), so the floats do not depend on the thread count
        bands = pool.split(m, BANDS)
        spread = pool.num_threads() > 1 and n * m * c * k * t >= tuning.PARALLEL_MIN_MACS
        sn, sc, sl = x3.strides
        for ni in range(n):
            # frame r is row r: C runs of k samples (every d-th) from r * s, as one contiguous copy
            frames = np.ascontiguousarray(np.lib.stride_tricks.as_strided(
                x3[ni], (t, c, k), (sl * s, sc, sl * d), writeable=False)).reshape(t, c * k)
            ft = frames.T

            def band(rng, ni=ni, ft=ft):
                m0, m1 = rng
                np.matmul(wm[m0:m1], ft, out=y4[ni, m0:m1, 0])
                if epilogue:
                    region_epilogue(y4, (slice(ni, ni + 1), slice(m0, m1)), op, inputs, bias)
            if spread:
                pool.parallel_for(band, bands)
            else:
                for rng in bands:
                    band(rng)
        return [y]
