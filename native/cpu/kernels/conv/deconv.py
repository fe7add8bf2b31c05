"""Transposed convolution (Deconvolution) tactics: GEMM then col2im scatter, and ONNX Col2Im itself."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_into
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.weights import kernel_and_bias
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split
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



@register_tactic
class DeconvGemmCol2imBands(Tactic):
    """gemm-col2im's tiling case (kernel == stride: the 2x upsamplers) in bands of input rows over the CPU pool:
    per band its GEMM columns, its taps assigned into its output rows, + bias and the activations while the band is in
    cache. Its own floats: OpenBLAS's Haswell kernels round a GEMM cut into column bands differently from the whole
    (by an ulp, at some band widths), so this is a tactic apart, tolerance-tested against gemm-col2im. Its bands
    depend on the shapes only (COLS_BYTES, BAND_MIN_MACS), not on the pool size; an input it was not built for
    (batch > 1 at run time) runs gemm-col2im's whole-tensor path."""
    kind, name = "Deconvolution", "gemm-col2im-bands"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        p = op.params
        why = _tiling_refusal(p)
        if why:
            return why
        if not all(st["op"] == "activation" for st in p.get("post_ops") or ()):
            return "activation post-ops only"
        shape = input_shapes[0] if input_shapes else None
        if shape is not None and (len(shape) != 4 or shape[0] != 1):
            return "batch 1 only"
        return True

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        dtype = x.dtype if x.dtype.kind == "f" else np.float32
        ks = list(op.params["kernel_shape"])
        if x.ndim != 4 or x.shape[0] != 1:   # (a shape the build did not see): gemm-col2im's whole-tensor path
            return DeconvGemmCol2im.run(self, op, inputs)
        _, _, pre, out = deconv_geometry(op.params, list(x.shape[2:]), ks)
        if any(pre) or list(out) != [i * k for i, k in zip(x.shape[2:], ks)]:
            return DeconvGemmCol2im.run(self, op, inputs)
        x = x.astype(dtype, copy=False)
        w = np.asarray(w, dtype)
        c, mg = w.shape[:2]
        wt = w.reshape(c, mg * ks[0] * ks[1]).T                          # [M*taps, C]
        return [_tiles_in_bands(x, wt, b, ks, list(out), op, dtype)]


# a band's GEMM has at least this many multiply-adds (fewer, longer GEMM calls; and clear of OpenBLAS's small-matrix
# kernels, SkylakeX: M*N*K <= 1e6, which sum in another order)
BAND_MIN_MACS = 1 << 22


def _tiles_in_bands(x, wt, b, ks, out, op, dtype):
    """The gemm-col2im-bands tactic's work: y [1, M, H*kh, W*kw] from x [1, C, H, W] and wt [M*taps, C] (rows
    channel-major, taps minor), a band of input rows at a time (see the class)."""
    _, c, h, w = x.shape
    ntaps = ks[0] * ks[1]
    m = wt.shape[0] // ntaps
    (sh, sw), (oh, ow) = ks, out
    y = np.empty((1, m, oh, ow), dtype)
    bias = None if b is None else np.asarray(b, dtype).reshape(-1, 1, 1)
    steps = op.params.get("post_ops") or ()
    row_macs = wt.shape[0] * c * w
    per = max(1, tuning.COLS_BYTES // (wt.shape[0] * w * y.itemsize), -(-BAND_MIN_MACS // row_macs))
    chunks = [(r, min(h, r + per)) for r in range(0, h, per)]
    if len(chunks) > 1 and (chunks[-1][1] - chunks[-1][0]) * row_macs < BAND_MIN_MACS:
        chunks[-2:] = [(chunks[-2][0], h)]   # no small last band
    threads = num_threads() if row_macs * h >= tuning.PARALLEL_MIN_MACS else 1

    def band(rng):
        for r0, r1 in chunks[rng[0]:rng[1]]:
            cols = np.matmul(wt, x[0, :, r0:r1].reshape(c, -1)).reshape(m, ntaps, r1 - r0, w)
            yb = y[0, :, r0 * sh:r1 * sh]
            for t, (i, j) in enumerate((i, j) for i in range(sh) for j in range(sw)):
                yb[:, i::sh, j::sw] = cols[:, t]
            if bias is not None:
                yb += bias
            for st in steps:
                activation_into(yb, st)
    parallel_for(band, split(len(chunks), threads))
    return y


_DECONV_ACTS = {"RELU": 1, "SIGMOID": 2}
# deconv-tiles-jit: at most this many outputs an input pixel (M * kh * kw): above it a GEMM's register blocking wins
TILES_MAX_TAPS = 16


def _deconv_tiles_kernel():
    """jit_deconv.deconv_tiles, or None without numba."""
    if not jit.available():
        return None
    try:
        return jit.kernel("deconv_tiles")
    except Exception:  # noqa: BLE001 - any failure to compile means the tactic is not offered
        return None


@register_tactic
class DeconvTilesJit(Tactic):
    """A 2-D transposed convolution whose kernel tiles the output (kernel == stride) and which makes few outputs an
    input pixel (M * kh * kw <= TILES_MAX_TAPS), as one compiled loop over input rows (the numba extra): the taps'
    sums over channels, + bias and a RELU / SIGMOID, written straight into the interleaved output rows.

    PaddleOCR v4's detector ends in a 24 -> 1 channel 2x2 stride-2 ConvTranspose + bias + Sigmoid over 320x320:
    gemm-col2im ran it in 2.0 ms one thread (a GEMM of 4 rows, four strided tap assignments, a bias pass and numpy's
    sigmoid over 640x640) against ONNX Runtime's 0.9. Its own floats (channel sums in order, polyexp's sigmoid as
    packed-gemm-direct's), tolerance-tested against gemm-col2im; float32, bands of input rows over the CPU pool."""
    kind, name = "Deconvolution", "deconv-tiles-jit"
    honours = {"post_ops"}
    precisions = ("float32",)
    own_precisions = True

    def supports(self, op, input_shapes):
        p = op.params
        why = _tiling_refusal(p)
        if why:
            return why
        steps = p.get("post_ops") or ()
        if len(steps) > 1 or any(st["op"] != "activation" or st["type"] not in _DECONV_ACTS for st in steps):
            return "one RELU / SIGMOID post-op at most"
        k = op.weights.get("kernel")
        if k is None or np.asarray(k).ndim != 4:
            return "constant weights only"
        if k.shape[1] * k.shape[2] * k.shape[3] > TILES_MAX_TAPS:     # (kernel == stride: the taps tile)
            return f"at most {TILES_MAX_TAPS} outputs an input pixel (a GEMM wins above)"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D only"
        if _deconv_tiles_kernel() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        k = op.weights.get("kernel")
        if k is None:
            return op.weights
        weights = dict(op.weights)
        weights["kernel_tiles"] = np.ascontiguousarray(np.asarray(k, np.float32).reshape(k.shape[0], -1))
        return weights

    def run(self, op, inputs):
        fn = _deconv_tiles_kernel()
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        k = op.weights["kernel"]
        wt = op.weights.get("kernel_tiles")
        if wt is None:
            wt = np.ascontiguousarray(np.asarray(k, np.float32).reshape(k.shape[0], -1))
        b = op.weights.get("bias")
        if b is None and len(inputs) > 2 and inputs[2] is not None:
            b = inputs[2]
        bias = np.empty(0, np.float32) if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
        kh, kw = op.params["kernel_shape"]
        steps = op.params.get("post_ops") or ()
        act = _DECONV_ACTS[steps[0]["type"]] if steps else 0
        n, c, h, w = x.shape
        m = k.shape[1]
        y = np.empty((n, m, h * kh, w * kw), np.float32)
        threads = num_threads() if n * wt.shape[1] * c * h * w >= tuning.PARALLEL_MIN_MACS else 1
        tasks = [(ni, r0, r1) for ni in range(n) for r0, r1 in split(h, max(1, -(-threads // n)))]

        def band(task):
            ni, r0, r1 = task
            fn(x[ni], wt, bias, y[ni], kh, kw, act, r0, r1, np.empty((wt.shape[1], w), np.float32))
        parallel_for(band, tasks)
        return [y]


def _tiling_refusal(p) -> str | None:
    """Why a transposed convolution's taps do not tile its output (2-D, one group, kernel == stride, no padding or
    dilation), None where they do: gemm-col2im-bands' and deconv-tiles-jit's shape."""
    ks = list(p.get("kernel_shape") or [])
    if p.get("col2im") or len(ks) != 2 or (p.get("groups", 1) or 1) != 1:
        return "2-D, one group only"
    if list(p.get("strides") or [1, 1]) != ks or any(d != 1 for d in p.get("dilations") or [1, 1]) \
            or any(p.get("pre_padding") or [0]) or any(p.get("post_padding") or [0]) \
            or any(p.get("output_padding") or [0]):
        return "kernel == stride, no padding or dilation only (taps that tile the output)"
    return None
