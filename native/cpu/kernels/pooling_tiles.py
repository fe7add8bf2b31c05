"""Pooling "max-tiles": max pooling whose windows tile the map exactly (window = stride, 1 or 2 taps an axis, no
padding or dilation, the map a whole number of windows) over float32 NCHW, as one compiled run over every plane
(native/cpu/jit_pool_tiles.py, the numba extra).

Why: oww_embedding's five max pools (1x2 / 2x2, stride = window, over [1, 24..96, 72..6, 32..2] maps) cost ~117 us
of its ~900 with strided-taps' compiled loop (a short loop per input row and plane: 43 us for [1, 48, 32, 16]'s
1x2 pool) or nhwc-window's transposes; here the planes are one flat run. The same floats as strided-taps (each pair
as np.maximum combines it, in its order: tested bit for bit), but a tactic of its own that the builder times.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.pooling import pool_geometry
from native.tactics import Tactic, register_tactic


@register_tactic
class MaxTiles(Tactic):
    """MAX pooling over exactly tiling 1x2 / 2x1 / 2x2 windows (stride = window), float32 NCHW."""
    kind, name = "Pooling", "max-tiles"

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("type", "MAX") != "MAX" or p.get("global") or p.get("num_outputs", 1) > 1:
            return "MAX pooling with one output only"
        if p.get("post_ops"):
            return "no post-ops"
        if not input_shapes or input_shapes[0] is None or len(input_shapes[0]) != 4 \
                or any(d is None or d < 1 for d in input_shapes[0]):
            return "a 4-D input of known shape only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 only"
        ks = list(p.get("window") or [])
        if len(ks) != 2 or any(k not in (1, 2) for k in ks) or list(p.get("strides") or [1, 1]) != ks:
            return "1 or 2 taps an axis, stride = window"
        if any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "no dilation"
        h, w = input_shapes[0][2:]
        _, _, _, pre, post, extra, out = pool_geometry(p, [h, w])
        if any(pre) or any(post) or any(extra) or out != [h // ks[0], w // ks[1]] or h % ks[0] or w % ks[1]:
            return "windows that tile the map exactly (no padding, no remainder)"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def run(self, op, inputs):
        x = inputs[0]
        if type(x) is not np.ndarray or x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, np.float32)
        n, c, h, w = x.shape
        kh, kw = op.params["window"]
        ho, wo = h // kh, w // kw
        y = np.empty((n, c, ho, wo), np.float32)
        jit.kernel("max_pool_tiles")(x.reshape(-1), y.reshape(-1), n * c * ho, wo, w, kh, kw)
        return [y]
