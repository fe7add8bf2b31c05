"""The depthwise tactic (groups == channels == outputs): per-tap multiply-accumulate over shifted views, no GEMM."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish, region_epilogue, regionable
from native.cpu.kernels.conv.geometry import flat_taps, geometry, pad_input, tap_slices
from native.cpu.kernels.conv.gemm2d import fast_path_ok, recipe
from native.cpu.kernels.conv.weights import kernel_and_bias, kernel_spatial, repacked, work_dtype
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import Tactic, register_tactic

_JIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_ACT_CODES = {"RELU": 1, "HARD_SWISH": 2, "HARD_SWISH_RELU6": 3}


def _epilogue_code(op):
    """The activation code depthwise_planes applies for the layer's post-ops (0: none), or None when they are
    more than one RELU / HARD_SWISH (they then run after it, in place)."""
    steps = op.params.get("post_ops") or ()
    if not steps:
        return 0
    if len(steps) == 1 and steps[0]["op"] == "activation":
        return _ACT_CODES.get(steps[0]["type"])
    return None


def depthwise2d(op, x, taps_w, b, ks, strides, dil, pre, post, out, inputs):
    """Depthwise 2-D convolution as per-tap multiply-accumulate over strided views, blocked so that the
    accumulator (a band of output rows of a chunk of channels, written straight into the output) stays in
    cache across the kh*kw taps; channel chunks run on the thread pool, the epilogue runs per block."""
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = ks, strides, dil, out
    dtype = taps_w.dtype
    y = np.empty((n, c, ho, wo), dtype)
    bias = None if b is None else np.asarray(b, dtype).reshape(-1)
    region = regionable(op, inputs, y.shape)
    # symmetric padding: each channel's plane is padded inside the compiled loop (jit.depthwise_planes) instead
    fused = region and list(pre) == list(post) and x.dtype == dtype and dtype in _JIT_DTYPES
    planes = jit.kernel("depthwise_planes") if fused else None
    xp = x if planes is not None else pad_input(x, pre, post)
    taps = list(itertools.product(range(kh), range(kw)))

    compiled = jit.kernel("depthwise_nchw") if dtype in _JIT_DTYPES and xp.dtype == dtype else None
    code = _epilogue_code(op) if planes is not None else None
    b_arg = np.empty(0, dtype) if bias is None else np.ascontiguousarray(bias, dtype)

    def task(t):
        ni, c0, c1 = t
        if planes is not None:   # the same sums from the unpadded input, padded plane by plane, epilogue fused
            planes(x[ni, c0:c1], taps_w[:, c0:c1], b_arg[c0:c1] if bias is not None else b_arg, y[ni, c0:c1],
                   kh, kw, sh, sw, dh, dw, pre[0], pre[1], code or 0)
            if code is None:   # other post-ops: in place after the bias (region_epilogue's steps, bias done)
                region_epilogue(y, (slice(ni, ni + 1), slice(c0, c1)), op, inputs, None)
            return
        if compiled is not None:   # the same sums in the same order, compiled (native/cpu/jit.py)
            compiled(xp[ni, c0:c1], taps_w[:, c0:c1], y[ni, c0:c1], kh, kw, sh, sw, dh, dw)
            if region:
                region_epilogue(y, (slice(ni, ni + 1), slice(c0, c1)), op, inputs, bias)
            return
        cc = c1 - c0
        step = max(1, min(ho, tuning.DW_BYTES // max(1, cc * wo * y.itemsize)))
        tmp = np.empty((cc, step, wo), dtype)
        wv = taps_w[:, c0:c1, None, None]
        for r0 in range(0, ho, step):
            r1 = min(ho, r0 + step)
            rows = r1 - r0
            acc, tm = y[ni, c0:c1, r0:r1], tmp[:, :rows]
            for k, (i, j) in enumerate(taps):
                y0, x0 = r0 * sh + i * dh, j * dw
                v = xp[ni, c0:c1, y0:y0 + sh * (rows - 1) + 1:sh, x0:x0 + sw * (wo - 1) + 1:sw]
                if k == 0:
                    np.multiply(v, wv[k], out=acc)
                else:
                    np.multiply(v, wv[k], out=tm)
                    acc += tm
            if region:
                region_epilogue(y, (slice(ni, ni + 1), slice(c0, c1), slice(r0, r1)), op, inputs, bias)
    bar = tuning.PARALLEL_MIN_DW_JIT_MACS if planes is not None or compiled is not None else tuning.PARALLEL_MIN_DW_MACS
    parts = max(1, -(-num_threads() // n)) if c * ho * wo * kh * kw * n >= bar else 1
    parallel_for(task, [(ni, c0, c1) for ni in range(n) for c0, c1 in split(c, parts)])
    if not region:
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        y = apply_post_ops(y, op, inputs)
    return [y]


@register_tactic
class Depthwise(Tactic):
    """groups == C == M: y[:, c] = sum over taps of w[c, tap] * shifted view of x[:, c]."""
    kind, name = "Convolution", "depthwise"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        g = op.params.get("groups", 1) or 1
        m = op.params.get("num_output_maps")
        if g == 1 or op.params.get("integer") or m != g:
            return False
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) > 1:
            return input_shapes[0][1] == g
        return True

    def prepare(self, op):
        return repacked(op, "kernel_taps", lambda w: w.reshape(w.shape[0], -1).T)  # [taps, C]

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        fast = recipe(op, "_dw_planes", x, inputs, _Planes.make) if x.ndim == 4 else None
        if fast is not None:
            return fast.run(x)
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        c = x.shape[1]
        taps_w = op.weights.get("kernel_taps")
        taps_w = np.asarray(w, dtype).reshape(c, -1).T if taps_w is None else taps_w.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if fast_path_ok(op, x, ks, pre, post):
            return depthwise2d(op, x, taps_w, b, ks, strides, dil, pre, post, out, inputs)
        xp = pad_input(x, pre, post)
        flat = flat_taps(np.ascontiguousarray(xp), ks, strides, dil, out) if len(ks) == 2 else None
        if flat is not None:
            views, crop = flat
            acc = views[0] * taps_w[0].reshape(1, c, 1)
            tmp = np.empty_like(acc)
            for t in range(1, len(views)):
                np.multiply(views[t], taps_w[t].reshape(1, c, 1), out=tmp)
                acc += tmp
            return finish(op, crop(acc), b, inputs, x.dtype)
        bshape = (1, c) + (1,) * len(out)
        y = np.zeros((x.shape[0], c) + tuple(out), dtype=dtype)
        tmp = np.empty_like(y)
        for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
            view = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
            np.multiply(view, taps_w[t].reshape(bshape), out=tmp)
            y += tmp
        return finish(op, y, b, inputs, x.dtype)


class _Planes:
    """depthwise2d's compiled path (jit.depthwise_planes with its fused bias and activation) with what depends only
    on the weights and the input shape worked out once: per call the output, then the compiled loop per channel
    chunk; the same calls with the same operands, without ~15 us of Python per layer (PaddleOCR's classifier: 11
    depthwise layers of 30-100 us)."""

    __slots__ = ("args", "tasks", "shape", "fn")

    @classmethod
    def make(cls, op, x, inputs):
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        if x.dtype != dtype or dtype not in _JIT_DTYPES or len(ks) != 2:
            return None
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        code = _epilogue_code(op)
        if not fast_path_ok(op, x, ks, pre, post) or code is None or list(pre) != list(post) \
                or not regionable(op, inputs, (x.shape[0], x.shape[1]) + tuple(out)):
            return None
        fn = jit.kernel("depthwise_planes")
        if fn is None:
            return None
        n, c = x.shape[:2]
        taps_w = op.weights.get("kernel_taps")
        taps_w = np.asarray(w, dtype).reshape(c, -1).T if taps_w is None else taps_w.astype(dtype, copy=False)
        b_arg = np.empty(0, dtype) if b is None else np.ascontiguousarray(np.asarray(b, dtype).reshape(-1))
        (kh, kw), (sh, sw), (dh, dw) = ks, strides, dil
        bar = tuning.PARALLEL_MIN_DW_JIT_MACS
        parts = max(1, -(-num_threads() // n)) if c * out[0] * out[1] * kh * kw * n >= bar else 1
        r = cls()
        r.fn, r.shape = fn, (n, c) + tuple(out)
        r.tasks = [(ni, c0, c1, taps_w[:, c0:c1], b_arg[c0:c1] if b is not None else b_arg)
                   for ni in range(n) for c0, c1 in split(c, parts)]
        r.args = (kh, kw, sh, sw, dh, dw, pre[0], pre[1], code)
        return r

    def run(self, x):
        y = np.empty(self.shape, x.dtype)
        fn, args = self.fn, self.args

        def task(t):
            ni, c0, c1, taps, bias = t
            fn(x[ni, c0:c1], taps, bias, y[ni, c0:c1], *args)
        if len(self.tasks) == 1:
            task(self.tasks[0])
        else:
            parallel_for(task, self.tasks)
        return [y]
