"""im2col-gemm's single-threaded path for small stride-1 2-D convolutions whose output rows are as wide as their
input rows (1xK and Kx1 kernels, "same"-padded KxK): the patch matrix built from the flattened input with one copy
of long rows instead of one short row per output row, and what depends only on the weights and the input shape
worked out once.

conv2d_gemm's patch copy for a padded 1x3 convolution reads [C, kh, kw, Ho, Wo] in runs of Wo floats out of a padded
copy of the input: on openWakeWord's embedding model (Wo 2..32) the pad and that copy cost 40 us of a 150 us layer,
and its per-call bookkeeping another 20-40 us on the small layers. Here, when Wo == W and the strides are 1, a tap
(i, j) of output pixel q = oy*W + ox reads the flattened input at q + (i*dh - pre_h)*W + (j*dw - pre_w): a kernel
row's patches are one run of rows*W floats of the input flattened with a zero margin (rows above and below the map
read the margin); the columns where ox + j*dw - pre_w leaves [0, W) read a neighbouring row instead of the padding
and are zeroed after the copy. The patch matrix holds the same values as conv2d_gemm's, in the same layout (C-major,
taps minor, the bias row of ones under it), cut into the same bands, and the GEMM calls and the epilogue are the
same: the same floats (tested bitwise against conv2d_gemm)."""
from __future__ import annotations

import threading

import numpy as np

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import (compiled_steps, region_epilogue, regionable, run_compiled_steps,
                                              view_as)
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import bias_in_gemm, conv_bias, gemm_scale, gemm_weights, kernel_spatial
from native.cpu.threads import num_threads, parallel_for, split

_ALL = (slice(None), slice(None))
# the path keeps a layer's flat input and patch matrices (per thread, made once with their views: on the small layers
# it is for, making the views cost more than the copies, 7.5 of 24 us a layer); above this many bytes it declines
# (conv2d_gemm's band-by-band buffers: ppocr_v4_det's large layers ran 8-13% slower with all bands' buffers at once)
HELD_BYTES = 1 << 21
_as_strided = np.lib.stride_tricks.as_strided


class FlatPatches:
    """The recipe (gemm2d.recipe): made once per layer and input shape, None where conv2d_gemm's general path must
    run (strides, Wo != W, a merged shortcut, weights given as inputs, a broadcast residual, buffers over
    HELD_BYTES, a split by output channels). Above
    PARALLEL_MIN_MACS it cuts the rows over the pool as conv2d_gemm does (its tasks, the same floats)."""

    __slots__ = ("shape", "dtype", "wm", "bias", "half", "g", "mg", "m", "ks", "dil", "pre", "out", "margin",
                 "length", "bands", "parts", "biased", "zero_cols", "adds", "steps", "held")

    @classmethod
    def make(cls, op, x, inputs):
        p = op.params
        if x.ndim != 4 or x.dtype.kind != "f" or x.dtype.itemsize < 4 or p.get("integer") or p.get("side"):
            return None
        if "kernel_gemm" not in op.weights and "kernel_gemm_biased" not in op.weights:
            return None   # weights given as inputs: nothing to work out once
        if conv_bias(op.weights) is None and len(inputs) > 2 and inputs[2] is not None:
            return None
        ks = kernel_spatial(op, op.weights.get("kernel"))
        if len(ks) != 2 or list(ks) == [1, 1]:
            return None   # (a 1x1 kernel's patches are its input: 1x1-gemm's direct GEMM, not a copy)
        strides, dil, pre, post, out = geometry(p, x.shape, ks)
        n, c, h, w = x.shape
        if any(s != 1 for s in strides) or min(pre) < 0 or min(post) < 0 or out[1] != w or out[0] < 1:
            return None
        g = p.get("groups", 1) or 1
        wm = gemm_weights(op, None, g, x.dtype, raw=True)
        if wm.dtype != x.dtype:
            return None
        biased = bias_in_gemm(op)
        gg, mg, kdim = wm.shape
        kdim -= int(biased)
        if kdim * gg != c * ks[0] * ks[1] or not regionable(op, inputs, (n, gg * mg) + tuple(out)):
            return None
        scale = gemm_scale(op)
        b = None if biased else conv_bias(op.weights)
        bias = None if b is None else np.asarray(b, x.dtype).reshape(-1)
        half = scale is not None
        if half and bias is not None:
            bias = bias * scale.reshape(())
        r = cls()
        r.shape, r.dtype, r.wm, r.bias, r.half, r.biased = x.shape, x.dtype, wm, bias, half, biased
        r.g, r.mg, r.m, r.ks, r.dil, r.pre, r.out = gg, mg, gg * mg, tuple(ks), tuple(dil), tuple(pre), tuple(out)
        r.margin = pre[0] * w + pre[1]
        r.length = r.margin + h * w + post[0] * w + post[1]
        step = max(1, tuning.COLS_BYTES // max(1, c * ks[0] * ks[1] * out[1] * x.dtype.itemsize))  # as conv2d_gemm
        threads, macs = num_threads(), n * gg * mg * kdim * out[0] * out[1]
        parts = max(1, -(-threads // n)) if threads > 1 and macs >= tuning.PARALLEL_MIN_MACS else 1
        if parts > 1 and out[0] * out[1] < gg * mg and gg == 1:
            return None   # conv2d_gemm splits this one by output channels (a small map), not rows
        # (sample, first row, end row, part): conv2d_gemm's tasks (rows split over the pool) in bands of `step` rows
        r.bands = [(ni, s0, min(r1, s0 + step), k) for ni in range(n) for k, (r0, r1) in enumerate(split(out[0], parts))
                   for s0 in range(r0, r1, step)]
        r.parts = len({(b_[0], b_[3]) for b_ in r.bands})
        # per kernel column j: the output columns whose tap reads outside its row (zeroed after the copy)
        r.zero_cols = []
        for j in range(ks[1]):
            s = j * dil[1] - pre[1]
            if s < 0:
                r.zero_cols.append((j, 0, min(-s, w)))
            elif s > 0:
                r.zero_cols.append((j, max(w - s, 0), w))
        r.adds = [st["input"] for st in p.get("post_ops") or () if st["op"] == "add"]
        r.steps = None if x.dtype not in (np.float32, np.float64) else compiled_steps(p.get("post_ops") or (), half)
        if r.steps is not None and r.bias is not None:
            r.bias = np.ascontiguousarray(r.bias, x.dtype)
        size = n * c * r.length + (c * ks[0] * ks[1] + 1) * out[0] * w
        if size * x.dtype.itemsize > HELD_BYTES:
            return None   # large: conv2d_gemm's band-by-band buffers stay in cache, all the bands' would not
        r.held = threading.local()
        return r

    def residual_ok(self, op, inputs):
        """A fused residual add of the output's own shape (else conv2d_gemm's non-region epilogue runs)."""
        shape = (self.shape[0], self.m) + self.out
        for i in self.adds:
            r = inputs[i]
            if not isinstance(r, np.ndarray) or r.shape != shape:
                return False
        return True

    def _patch_buffer(self, rows):
        """A band's patch matrix [g, C/g*kh*kw (+1), rows*W], conv2d_gemm's layout: its ones row filled."""
        c, w = self.shape[1], self.shape[3]
        size = c * self.ks[0] * self.ks[1] * rows * w
        buf = np.empty(size + (rows * w if self.biased else 0), self.dtype)
        if self.biased:
            buf[size:] = 1
        return buf.reshape(self.g, -1, rows * w)

    def buffers(self):
        """The flat input (margins zeroed) and per band (ni, r0, r1, part, patch matrix, its [C, kh, kw, rows*W]
        view, the strided source of its copy, the views of the columns to zero), made on a thread's first call and
        kept per thread (two contexts may run the layer at once)."""
        kept = getattr(self.held, "kept", None)
        if kept is not None:
            return kept
        n, c, h, w = self.shape
        (kh, kw), (dh, dw) = self.ks, self.dil
        xs = np.zeros((n, c, self.length), self.dtype)
        st = xs.strides
        plans = []
        for ni, r0, r1, part in self.bands:
            rows = r1 - r0
            b = self._patch_buffer(rows)
            cols = b.reshape(-1)[:c * kh * kw * rows * w].reshape(c, kh, kw, rows * w)
            src = _as_strided(xs[ni, :, r0 * w:], cols.shape, (st[1], st[2] * dh * w, st[2] * dw, st[2]))
            zeros = [cols[:, :, j].reshape(c, kh, rows, w)[..., a0:a1] for j, a0, a1 in self.zero_cols]
            plans.append((ni, r0, r1, part, b, cols, src, zeros))
        kept = self.held.kept = (xs[:, :, self.margin:self.margin + h * w], plans)
        return kept

    def run(self, op, x, outputs, inputs):
        n = self.shape[0]
        ho, wo = self.out
        shape = (n, self.m, ho, wo)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == self.dtype else np.empty(shape, self.dtype)
        interior, plans = self.buffers()
        np.copyto(interior, x.reshape(interior.shape))
        if self.parts == 1:
            for plan in plans:
                self._band(plan, y)
        else:   # conv2d_gemm's tasks over the pool: each thread copies and multiplies its own bands
            keys = dict.fromkeys((pl[0], pl[3]) for pl in plans)
            parallel_for(lambda key: [self._band(pl, y) for pl in plans if (pl[0], pl[3]) == key], list(keys))
        if self.bias is not None or op.params.get("post_ops"):
            if self.steps is None or not run_compiled_steps(y, self.bias, self.steps, inputs):
                region_epilogue(y, _ALL, op, inputs, self.bias, self.half)
        return [y]

    @staticmethod
    def _fill(plan):
        _, _, _, _, _, cols, src, zeros = plan
        np.copyto(cols, src)
        for z in zeros:
            z.fill(0)

    def _gemm(self, plan, y):
        ni, r0, r1, _, b = plan[:5]
        np.matmul(self.wm, b, out=view_as(y[ni, :, r0:r1], (self.g, self.mg, (r1 - r0) * self.out[1])))

    def _band(self, plan, y):
        self._fill(plan)
        self._gemm(plan, y)
