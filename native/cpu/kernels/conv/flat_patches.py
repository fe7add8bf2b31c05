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
from native.cpu.threads import num_threads

_ALL = (slice(None), slice(None))
# a layer keeps its flat input and patch matrices (per thread) when they fit in this many bytes, else allocates them
# per call: on the small layers this path is for, the views cost more than the copies (7.5 of 24 us a layer)
HELD_BYTES = 1 << 21
_as_strided = np.lib.stride_tricks.as_strided


class FlatPatches:
    """The recipe (gemm2d.recipe): made once per layer and input shape, None where conv2d_gemm's general path must
    run (strides, Wo != W, groups with a bias column, a merged shortcut, unpacked weights, a split over the pool)."""

    __slots__ = ("shape", "dtype", "wm", "bias", "half", "g", "mg", "m", "ks", "dil", "pre", "out", "margin",
                 "length", "bands", "biased", "zero_cols", "adds", "steps", "held")

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
        if len(ks) != 2:
            return None
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
        if num_threads() > 1 and n * gg * mg * kdim * out[0] * out[1] >= tuning.PARALLEL_MIN_MACS:
            return None   # conv2d_gemm splits this one over the pool
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
        r.bands = [(s0, min(out[0], s0 + step)) for s0 in range(0, out[0], step)]
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
        size = n * c * r.length + max(c * ks[0] * ks[1] + 1, 1) * step * w * max(1, len(r.bands))
        r.held = threading.local() if size * x.dtype.itemsize <= HELD_BYTES else None
        return r

    def residual_ok(self, op, inputs):
        """A fused residual add of the output's own shape (else conv2d_gemm's non-region epilogue runs)."""
        shape = (self.shape[0], self.m) + self.out
        for i in self.adds:
            r = inputs[i]
            if not isinstance(r, np.ndarray) or r.shape != shape:
                return False
        return True

    def flat_input(self, x):
        """x [N, C, H, W] as [N, C, margin + H*W + margin'] with zero margins (one copy of the interior)."""
        n, c, h, w = self.shape
        xs = np.empty((n, c, self.length), self.dtype)
        xs[:, :, :self.margin] = 0
        xs[:, :, self.margin + h * w:] = 0
        xs[:, :, self.margin:self.margin + h * w] = x.reshape(n, c, h * w)
        return xs

    def patches(self, xs_n, r0, r1):
        """The band's patch matrix [g, C/g*kh*kw (+1), rows*W], conv2d_gemm's layout and values."""
        c, w = self.shape[1], self.shape[3]
        (kh, kw), (dh, dw) = self.ks, self.dil
        rows = r1 - r0
        size = c * kh * kw * rows * w
        buf = np.empty(size + (rows * w if self.biased else 0), self.dtype)
        if self.biased:
            buf[size:] = 1
        cols = buf[:size].reshape(c, kh, kw, rows * w)
        st = xs_n.strides
        np.copyto(cols, _as_strided(xs_n[:, r0 * w:], (c, kh, kw, rows * w),
                                    (st[0], st[1] * dh * w, st[1] * dw, st[1])))
        for j, a, b in self.zero_cols:
            cols[:, :, j].reshape(c, kh, rows, w)[..., a:b] = 0
        return buf.reshape(self.g, -1, rows * w)

    def buffers(self):
        """This thread's kept buffers and their views (made on its first call): the flat input with its margins
        zeroed once, and per sample and band the patch matrix (its ones row filled once), the strided source of its
        copy and the views of the columns to zero. Kept per thread: two contexts may run the layer at once."""
        n, c, h, w = self.shape
        xs = np.zeros((n, c, self.length), self.dtype)
        interior = xs[:, :, self.margin:self.margin + h * w]
        plans = []
        for ni in range(n):
            for r0, r1 in self.bands:
                b = self.patches(xs[ni], r0, r1)
                rows = r1 - r0
                cols = b.reshape(-1)[:c * self.ks[0] * self.ks[1] * rows * w].reshape(c, self.ks[0], self.ks[1],
                                                                                        rows * w)
                st = xs.strides
                src = _as_strided(xs[ni, :, r0 * w:], cols.shape,
                                  (st[1], st[2] * self.dil[0] * w, st[2] * self.dil[1], st[2]))
                zeros = [cols[:, :, j].reshape(c, self.ks[0], rows, w)[..., a0:a1] for j, a0, a1 in self.zero_cols]
                plans.append((ni, r0, r1, b, cols, src, zeros))
        return interior, plans

    def run(self, op, x, outputs, inputs):
        n = self.shape[0]
        ho, wo = self.out
        shape = (n, self.m, ho, wo)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == self.dtype else np.empty(shape, self.dtype)
        wm, g, mg = self.wm, self.g, self.mg
        held = self.held
        if held is not None:
            kept = getattr(held, "kept", None)
            if kept is None:
                kept = held.kept = self.buffers()
            interior, plans = kept
            np.copyto(interior, x.reshape(interior.shape))
            for ni, r0, r1, b, cols, src, zeros in plans:
                np.copyto(cols, src)
                for z in zeros:
                    z.fill(0)
                np.matmul(wm, b, out=view_as(y[ni, :, r0:r1], (g, mg, (r1 - r0) * wo)))
        else:
            xs = self.flat_input(np.ascontiguousarray(x))
            for ni in range(n):
                for r0, r1 in self.bands:
                    np.matmul(wm, self.patches(xs[ni], r0, r1), out=view_as(y[ni, :, r0:r1], (g, mg, (r1 - r0) * wo)))
        if self.bias is not None or op.params.get("post_ops"):
            if self.steps is None or not run_compiled_steps(y, self.bias, self.steps, inputs):
                region_epilogue(y, _ALL, op, inputs, self.bias, self.half)
        return [y]
