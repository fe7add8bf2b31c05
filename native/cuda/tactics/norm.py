"""Reductions on the GPU (kernels/tensor.cu): layer normalization and 2-D / global pooling in NCHW and NHWC,
with the pooled layer's fused activation. FP32, FP16 and BF16 storage, float32 statistics and accumulation."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import FLOAT_PRECISIONS, on_device, out_array, ptr, same_float, suffix
from native.cuda.tactics.pointwise import _ACT, activate
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "tensor.cu"


@register_tactic
class GpuLayerNorm(Tactic):
    """LAYER mode over the trailing axes: one block per row, mean then centred variance in float32."""

    kind, name, device = "Normalization", "row-kernel", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS

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
        if not p.get("global"):
            if len(p.get("window") or []) != 2:
                return "only 2-D windows run on the GPU"
            if p.get("ceil_mode"):
                return "ceil mode runs on the host"
            if (p.get("auto_pad") or "NOTSET") not in ("NOTSET", "VALID"):
                return "SAME padding runs on the host"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "only 4-D tensors run on the GPU"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        dtype = same_float([x])
        sfx = suffix(dtype)
        p = op.params
        mode = 0 if p["type"] == "MAX" else 1
        if self.nhwc:
            n, h, w, c = x.shape
            xs = (h * w * c, 1, w * c, c)
        else:
            n, c, h, w = x.shape
            xs = (c * h * w, h * w, w, 1)
        if p.get("global"):
            y = out_array(outputs, 0, (n, 1, 1, c) if self.nhwc else (n, c, 1, 1), dtype)
            P, sP = h * w, (c if self.nhwc else 1)
            if y.size:
                launch(kernel(SRC, "gpool" + sfx), grid_for(n * c), (256, 1, 1),
                       [np.uint64(y.ptr), np.uint64(x.ptr), np.int64(n), np.int64(P), np.int64(c),
                        np.int64(xs[0]), np.int64(sP), np.int64(xs[1]), np.int64(c), np.int64(1), np.int32(mode)])
            return [_post_ops(y, op)]
        kh, kw = p["window"]
        sh, sw = p.get("strides") or [1, 1]
        dh, dw = p.get("dilations") or [1, 1]
        pre = list(p.get("pre_padding") or [0, 0])
        post = list(p.get("post_padding") or [0, 0])
        oh = (h + pre[0] + post[0] - (kh - 1) * dh - 1) // sh + 1
        ow = (w + pre[1] + post[1] - (kw - 1) * dw - 1) // sw + 1
        y = out_array(outputs, 0, (n, oh, ow, c) if self.nhwc else (n, c, oh, ow), dtype)
        ys = (oh * ow * c, 1, ow * c, c) if self.nhwc else (c * oh * ow, oh * ow, ow, 1)
        exclude = 1 if p.get("average_count_excludes_padding", True) else 0
        params = np.array([n, c, h, w, oh, ow, kh, kw, sh, sw, pre[0], pre[1], dh, dw, *xs, *ys, mode | (exclude << 32)],
                          dtype=np.int64)
        if y.size:
            launch(kernel(SRC, "pool2d" + sfx), grid_for(y.size), (256, 1, 1),
                   [np.uint64(y.ptr), np.uint64(x.ptr), params])
        return [_post_ops(y, op)]


_REDUCE_MODES = {"MAX": 0, "AVG": 1, "SUM": 2, "MIN": 3}


@register_tactic
class GpuReduce(Tactic):
    """SUM / AVG / MAX / MIN over one contiguous block of axes (x viewed as [outer, reduced, inner]), float32
    accumulation; a squeeze-excite's spatial mean, a layer's feature sum."""

    kind, name, device = "Reduce", "axes-kernel", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS

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
