"""Reductions on the GPU (kernels/tensor.cu): layer normalization and 2-D / global pooling in NCHW and NHWC,
with the pooled layer's fused activation. FP32, FP16 and BF16 storage, float32 statistics and accumulation."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import (FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, ptr,
    same_float, suffix)
from native.cuda.tactics.pointwise import _ACT, activate
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "tensor.cu"


@register_tactic
class GpuLayerNorm(Tactic):
    """LAYER mode over the trailing axes: one block per row, mean then centred variance in float32."""

    kind, name, device = "Normalization", "row-kernel", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if op.params.get("mode", "LAYER") != "LAYER":
            return f"{op.params.get('mode')} normalization runs on the host"
        if input_shapes and input_shapes[0] is not None:
            rank = len(input_shapes[0])
            axes = sorted(a % rank for a in op.params.get("axes", [-1]))
            if axes != list(range(axes[0], rank)):
                return "normalized axes are not the trailing ones"
            cols = int(np.prod(input_shapes[0][axes[0]:], dtype=np.int64))
            for s in input_shapes[1:3]:
                if s is not None and int(np.prod(s, dtype=np.int64)) != cols:
                    return "scale/bias broadcast along the normalized axes runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        g = on_device(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
        b = on_device(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
        dtype = same_float([x, g, b])
        axes = sorted(a % x.ndim for a in op.params.get("axes", [-1]))
        cols = int(np.prod(x.shape[axes[0]:], dtype=np.int64))
        rows = x.size // max(cols, 1)
        y = out_array(outputs, 0, x.shape, dtype)
        stat_shape = x.shape[:axes[0]] + (1,) * len(axes)
        mean, inv = out_array(outputs, 1, stat_shape, np.float32), out_array(outputs, 2, stat_shape, np.float32)
        if rows and cols:
            launch(kernel(SRC, "layernorm" + suffix(dtype)), (rows, 1, 1), (256, 1, 1),
                   [np.uint64(y.ptr), np.uint64(x.ptr), ptr(g), ptr(b), np.uint64(mean.ptr), np.uint64(inv.ptr),
                    np.int64(rows), np.int64(cols), np.float32(op.params.get("epsilon", 1e-5))])
        return [y, mean, inv]


def _post_ops(y, op):
    for step in op.params.get("post_ops") or ():
        if step["op"] != "activation":
            raise TacticRefusal(f"pooling post-op {step['op']} runs on the host")
        activate(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
    return y


class _GpuPool(Tactic):
    device = "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    honours = {"post_ops"}
    nhwc = False

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("type") not in ("MAX", "AVERAGE"):
            return f"{p.get('type')} pooling runs on the host"
        if p.get("num_outputs", 1) > 1:
            return "max pooling with indices runs on the host"
        for step in p.get("post_ops") or ():
            if step["op"] != "activation" or step["type"] not in _ACT:
                return "a fused post-op without a GPU kernel"
        rank = len(input_shapes[0]) if input_shapes and input_shapes[0] is not None else None
        if self.nhwc and rank not in (None, 4):
            return "channels-last pooling is 2-D"
        if not p.get("global"):
            window = len(p.get("window") or [])
            if window not in (1, 2, 3):
                return f"{window}-D windows run on the host"
            if rank is not None and rank != window + 2:
                return f"a {window}-D window over a rank-{rank} tensor runs on the host"
            if p.get("ceil_mode"):
                return "ceil mode runs on the host"
            if (p.get("auto_pad") or "NOTSET") not in ("NOTSET", "VALID"):
                return "SAME padding runs on the host"
        elif rank is not None and rank < 3:
            return "global pooling needs a spatial axis"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        dtype = same_float([x])
        p = op.params
        mode = 0 if p["type"] == "MAX" else 1
        if p.get("global"):
            return [_post_ops(self._global(x, dtype, mode, outputs), op)]
        window = len(p["window"])
        strides = list(p.get("strides") or [1] * window)
        dil = list(p.get("dilations") or [1] * window)
        pre = list(p.get("pre_padding") or [0] * window)
        post = list(p.get("post_padding") or [0] * window)
        exclude = bool(p.get("average_count_excludes_padding", True))
        if self.nhwc:
            n, h, w, c = x.shape
            y = _pool2d(x, (n, c, h, w), (h * w * c, 1, w * c, c), p["window"], strides, dil, pre, post, mode,
                        exclude, dtype, outputs, nhwc=True)
        elif window == 1:     # (N, C, L): a 2-D window of height 1
            n, c, length = x.shape
            y = _pool2d(x, (n, c, 1, length), (c * length, length, length, 1), [1, *p["window"]], [1, *strides],
                        [1, *dil], [0, *pre], [0, *post], mode, exclude, dtype, outputs, out_shape=lambda oh, ow:
                        (n, c, ow))
        elif window == 2:
            n, c, h, w = x.shape
            y = _pool2d(x, (n, c, h, w), (c * h * w, h * w, w, 1), p["window"], strides, dil, pre, post, mode,
                        exclude, dtype, outputs)
        else:                 # (N, C, D, H, W): max and average are separable: the (H, W) window per depth, then D
            n, c, d, h, w = x.shape
            hw = _pool2d(x, (n * c, d, h, w), (d * h * w, h * w, w, 1), p["window"][1:], strides[1:], dil[1:],
                         pre[1:], post[1:], mode, exclude, dtype, None)
            oh, ow = hw.shape[2], hw.shape[3]
            y = _pool2d(hw, (n * c, 1, d, oh * ow), (d * oh * ow, 0, oh * ow, 1), [p["window"][0], 1],
                        [strides[0], 1], [dil[0], 1], [pre[0], 0], [post[0], 0], mode, exclude, dtype, outputs,
                        out_shape=lambda od, _: (n, c, od, oh, ow))
        return [_post_ops(y, op)]

    def _global(self, x, dtype, mode, outputs):
        """Global max / average over every spatial axis, at any rank >= 3 (NCHW...) or NHWC."""
        if self.nhwc:
            n, h, w, c = x.shape
            y = out_array(outputs, 0, (n, 1, 1, c), dtype)
            P, sN, sP, sC = h * w, h * w * c, c, 1
        else:
            n, c = x.shape[:2]
            P = int(np.prod(x.shape[2:], dtype=np.int64))
            y = out_array(outputs, 0, (n, c) + (1,) * (x.ndim - 2), dtype)
            sN, sP, sC = c * P, 1, P
        if y.size:
            launch(kernel(SRC, "gpool" + suffix(dtype)), grid_for(n * c), (256, 1, 1),
                   [np.uint64(y.ptr), np.uint64(x.ptr), np.int64(n), np.int64(P), np.int64(c),
                    np.int64(sN), np.int64(sP), np.int64(sC), np.int64(c), np.int64(1), np.int32(mode)])
        return y


def _pool2d(x, dims, xs, window, strides, dil, pre, post, mode, exclude, dtype, outputs, nhwc=False,
            out_shape=None):
    """One launch of tensor.cu's pool2d: x read as (n, c, h, w) with element strides `xs`; the output is
    contiguous NCHW (NHWC when `nhwc`), shaped out_shape(oh, ow) when given (a view of the same elements)."""
    n, c, h, w = dims
    kh, kw = window
    oh = (h + pre[0] + post[0] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + pre[1] + post[1] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    shape = (n, oh, ow, c) if nhwc else (out_shape(oh, ow) if out_shape else (n, c, oh, ow))
    y = out_array(outputs, 0, shape, dtype)
    ys = (oh * ow * c, 1, ow * c, c) if nhwc else (c * oh * ow, oh * ow, ow, 1)
    params = np.array([n, c, h, w, oh, ow, kh, kw, strides[0], strides[1], pre[0], pre[1], dil[0], dil[1], *xs, *ys,
                       mode | (int(exclude) << 32)], dtype=np.int64)
    if y.size:
        launch(kernel(SRC, "pool2d" + suffix(dtype)), grid_for(y.size), (256, 1, 1),
               [np.uint64(y.ptr), np.uint64(x.ptr), params])
    return y


_REDUCE_MODES = {"MAX": 0, "AVG": 1, "SUM": 2, "MIN": 3}


@register_tactic
class GpuReduce(Tactic):
    """SUM / AVG / MAX / MIN over one contiguous block of axes (x viewed as [outer, reduced, inner]), float32
    accumulation; a squeeze-excite's spatial mean, a layer's feature sum."""

    kind, name, device = "Reduce", "axes-kernel", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _REDUCE_MODES:
            return f"reduce {op.params.get('op')} runs on the host"
        if input_shapes and len(input_shapes) > 1 and input_shapes[1] is not None:
            return "axes given as a tensor run on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if len(inputs) > 1 and inputs[1] is not None:
            raise TacticRefusal("axes given as a tensor run on the host")
        x = on_device(inputs[0])
        dtype = same_float([x])
        axes = op.params.get("axes")
        if axes is None or len(axes) == 0:
            if op.params.get("noop_with_empty_axes"):
                raise TacticRefusal("a no-op reduce runs on the host")
            axes = list(range(x.ndim))
        axes = sorted(int(a) % max(x.ndim, 1) for a in axes)
        if axes != list(range(axes[0], axes[-1] + 1)):
            raise TacticRefusal("reduce over non-adjacent axes runs on the host")
        outer = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
        red = int(np.prod(x.shape[axes[0]:axes[-1] + 1], dtype=np.int64))
        inner = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64))
        if red == 0:
            raise TacticRefusal("an empty reduction runs on the host")
        keep = bool(op.params.get("keep_dims", True))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
            tuple(d for i, d in enumerate(x.shape) if i not in axes)
        y = out_array(outputs, 0, shape, dtype)
        if y.size:
            launch(kernel(SRC, "gpool" + suffix(dtype)), grid_for(outer * inner), (256, 1, 1),
                   [np.uint64(y.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(red), np.int64(inner),
                    np.int64(red * inner), np.int64(inner), np.int64(1), np.int64(inner), np.int64(1),
                    np.int32(_REDUCE_MODES[op.params["op"]])])
        return [y]


@register_tactic
class GpuPooling(_GpuPool):
    kind, name = "Pooling", "window-kernel"


@register_tactic
class GpuPoolingNHWC(_GpuPool):
    kind, name, nhwc = "PoolingNHWC", "window-kernel", True
    formats = ("nhwc",)
