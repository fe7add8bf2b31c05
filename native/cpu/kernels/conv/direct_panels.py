"""The direct-panels tactic: a stride-1 2-D convolution on NCHW maps as a compiled GEMM that reads its input in
place (native/cpu/jit_conv_panels.py, the numba extra): no patch matrix, no BLAS, the kernel packed at build time in
blocks of 8 output channels, bias and [LEAKY_RELU] [RELU / CLIP] on each block while it is in registers.

Why: oww_embedding's 1x3 (W padded by 1) and 3x1 convolutions on [1, 24..96, H, W] maps went through im2col-gemm: a
patch matrix copy, OpenBLAS packing both operands each call, then an epilogue pass over the output: 32-76 GMAC/s on
one core; this kernel 70-100 (the same layers, one thread). Pixels are taken 32 at a time along the flattened map,
so the output is NCHW as it is computed; a row's padding is a lane mask, not a copy.

Takes: 2-D, ungrouped, stride and dilation 1, any padding along H, along W up to kw - 1 in all (output rows no
wider than the input's). Where the output rows are narrower than the input's (W pads under kw - 1) they are computed
as wide as the input's ("wide" pixels) into a scratch map and cropped into the output (one copy).

On the CPU pool the panels are cut in two halves, run at once on the caller and the pool's worker without the GIL
(threads.kernel_shares: a hand-off ~1 us instead of a Python one's 25-100, so layers of 15-60 us are worth cutting).

Numerics: each output a chain of fused multiply-adds over (c, i, j) in order from zero, then + bias, then the steps
as jit_act.bias_steps_inplace computes them: its own rounding (the panel GEMM's), tolerance-tested; the same floats
whichever thread ran a half.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.im2col_gemm import Im2colGemm
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.threads import kernel_shares, num_threads, sgemm_address
from native.tactics import Tactic, register_tactic

BLOCK = 8          # output channels a packed block (jit_conv_panels.MR)
_IDENTITY = (1.0, -np.inf, np.inf)   # alpha, lo, hi: the in-kernel epilogue that leaves v as it is
_held = {}


def shape_refusal(p, input_shapes) -> str | None:
    """Why this convolution is not one the kernel takes (None: it is)."""
    ks = list(p.get("kernel_shape") or [])
    if len(ks) != 2:
        return "2-D convolutions only"
    if list(p.get("strides") or [1, 1]) != [1, 1] or list(p.get("dilations") or [1, 1]) != [1, 1]:
        return "stride and dilation 1 only"
    if (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
        return "ungrouped float convolutions without a merged shortcut only"
    if p.get("auto_pad") not in (None, "NOTSET", "VALID"):
        return "explicit pads only"
    pre, post = list(p.get("pre_padding") or [0, 0]), list(p.get("post_padding") or [0, 0])
    if min(pre + post) < 0:
        return "no negative pads (crops)"
    if pre[1] + post[1] > ks[1] - 1:
        return "W pads up to kw - 1 in all (output rows no wider than the input's)"
    if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
        return "2-D convolutions only"
    return None


def in_kernel(steps):
    """(alpha, lo, hi) of post-ops [LEAKY_RELU] [RELU / CLIP] (the kernel's epilogue: leaky, then clip), or None
    for any other (then the common epilogue, `finish`, runs after the kernel)."""
    alpha, lo, hi = _IDENTITY
    kinds = [st.get("type") if st["op"] == "activation" else None for st in steps]
    if kinds not in ([], ["LEAKY_RELU"], ["RELU"], ["CLIP"], ["LEAKY_RELU", "RELU"], ["LEAKY_RELU", "CLIP"]):
        return None
    for st in steps:
        if st["type"] == "LEAKY_RELU":
            a = st.get("alpha", 0.0)
            if type(a) not in (int, float) or not abs(a) < 3e38:
                return None
            alpha = float(a)
        elif st["type"] == "RELU":
            lo, hi = 0.0, np.inf
        else:
            lo, hi = st.get("alpha", 0.0), st.get("beta", 0.0)
            if type(lo) not in (int, float) or type(hi) not in (int, float) or not all(
                    v in (-np.inf, np.inf) or abs(v) < 3e38 for v in (lo, hi)):   # as epilogue.compiled_steps
                return None
    return alpha, float(lo), float(hi)


def pack(w, b):
    """kernel [M, C, kh, kw] (+ bias [M]) -> (blocks [ceil(M / 8), C*kh*kw, 8] float32: block i's channels 8i..8i+7
    at each (c, i, j), zero past M; bias [ceil(M / 8) * 8], zero past M)."""
    w = np.asarray(w, np.float32)
    m = w.shape[0]
    mb = -(-m // BLOCK)
    rows = np.zeros((mb * BLOCK, w[0].size), np.float32)
    rows[:m] = w.reshape(m, -1)
    bias = np.zeros(mb * BLOCK, np.float32)
    if b is not None:
        bias[:m] = np.asarray(b, np.float32).reshape(-1)
    return np.ascontiguousarray(rows.reshape(mb, BLOCK, -1).transpose(0, 2, 1)), bias


def _kit():
    """(native/cpu/jit_conv_panels, whether threads.kernel_shares can run) where numba is, else None."""
    if not jit.available():
        return None
    got = _held.get("kit")
    if got is None:
        got = (jit.module("jit_conv_panels"), bool(sgemm_address()))
        _held["kit"] = got
    return got


def unpack(weights, key="kernel_blocks"):
    """The kernel [M, C, kh, kw] float32 back from `prepare`'s weights, its `pack` blocks under `key` (raw weights:
    their kernel). phase-direct-s2 keeps the same blocks under its own key."""
    if "kernel" in weights:
        return np.asarray(weights["kernel"], np.float32)
    blocks = weights[key]
    m, c, kh, kw = (int(v) for v in weights["kernel_shape4"])
    return np.ascontiguousarray(blocks.transpose(0, 2, 1).reshape(-1, blocks.shape[1])[:m]).reshape(m, c, kh, kw)


def run_unpacked(op, inputs, key="kernel_blocks"):
    """The layer by im2col-gemm on the unpacked kernel (its own floats): a plan that chose a tactic packing its
    weights with `pack` (under `key`), run where the kernel cannot be compiled."""
    weights = {"kernel": unpack(op.weights, key)}
    b = conv_bias(op.weights)
    if b is not None:
        weights["bias"] = b
    plain = dataclasses.replace(op, weights=weights)
    tactic = Im2colGemm()
    plain.weights = tactic.prepare(plain)
    return tactic.run(plain, inputs)


@register_tactic
class DirectPanels(Tactic):
    """Stride-1 NCHW convolution by jit_conv_panels' kernel, reading the input in place (see the module docstring)."""
    kind, name = "Convolution", "direct-panels"
    honours = {"post_ops"}
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = shape_refusal(op.params, input_shapes)
        if why:
            return why
        if "kernel" not in op.weights and "kernel_blocks" not in op.weights:
            return "constant kernels only (packed at build time)"
        return jit.float32_refusal(input_shapes)

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:   # already packed (idempotent)
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_blocks"] = pack(w, None)[0]
        weights["kernel_shape4"] = np.array(np.shape(w), np.int64)
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        kit = _kit()
        if kit is None:     # a plan loaded where numba is not (or DEBUGKIT_JIT=0): im2col-gemm's numpy passes
            return run_unpacked(op, inputs)
        js, shares = kit
        x = np.ascontiguousarray(inputs[0], np.float32)
        n, c, h, w = x.shape
        got = self._layer(op, js, x.shape)
        args, y_wide, fused, m, ho, wo, _ = got   # (the last: what args points at, held while the kernel runs)
        shape = (n, m, ho, wo)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == np.float32 and dst.flags.c_contiguous \
            else np.empty(shape, np.float32)
        into = y.reshape(n, m, ho * wo) if y_wide is None else y_wide
        for ni in range(n):
            if shares and num_threads() > 1:
                kernel_shares(js.conv_share.address, args, x, into, ni, 1)
            else:
                js.conv_block(args, x[ni], into[ni])
        if y_wide is not None:
            js.crop(y_wide, y, w)
        if fused:
            return [y]
        return finish(op, y, conv_bias(op.weights), inputs, np.float32)

    def _layer(self, op, js, shape):
        """(argument block, wide scratch map or None, epilogue in the kernel?, M, Ho, Wo, the arrays the block points
        at) of this layer, input shape and thread, made once (the packed kernel from `prepare`, raw weights
        included)."""
        key = (shape, threading.get_ident())
        layers = op.__dict__.setdefault("_direct_panels", {})
        got = layers.get(key)
        if got is not None and got[-1] is op.weights:
            return got[0]
        wts = self.prepare(op)
        m, _, kh, kw = (int(v) for v in wts["kernel_shape4"])
        n, c, h, w = shape
        _, _, pre, post, (ho, wo) = geometry(op.params, shape, [kh, kw])
        ep = in_kernel(op.params.get("post_ops") or ())
        fused = ep is not None
        blocks = wts["kernel_blocks"]
        bias = pack(np.zeros((m, 1, 1, 1), np.float32), conv_bias(op.weights) if fused else None)[1]
        ep = np.array(ep if fused else _IDENTITY, np.float32)
        geo = np.array([c, h, w, kh, kw, pre[1], ho, ho * w, m, pre[0], post[1]], np.int64)
        offs, uoffs = js.tables(geo)
        masks, edge, tile = js.scratch(geo)
        arrays = {js.WB: blocks, js.BIAS: bias, js.EP: ep, js.OFFS: offs, js.UOFFS: uoffs, js.MASKS: masks,
                  js.EDGE: edge, js.TILE: tile}
        args = js.block(geo, arrays)
        y_wide = None if wo == w else np.empty((n, m, ho * w), np.float32)
        if len(layers) >= 64:     # shapes that vary from run to run: keep the recent ones
            layers.clear()
        layers[key] = ((args, y_wide, fused, m, ho, wo, arrays), op.weights)
        return layers[key][0]
