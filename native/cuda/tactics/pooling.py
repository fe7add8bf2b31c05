"""Pooling on the GPU (tensor.cu's pool2d and gpool): max and average, global at any rank >= 3, windows
over rank 3 (1-D), 4 (2-D, NCHW and NHWC) and 5 (3-D, separable), with the pooled layer's fused activation.
FP32, FP16 and BF16 storage, float32 accumulation. The CPU's twin: cpu/kernels/pooling.py. Also the INT8 max pool
between int8 NHWC tensors (passes/int8_io.py), whose CPU twin is cpu/kernels/pooling_int8.py."""
from __future__ import annotations

import numpy as np

from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, same_float, suffix
from native.cuda.tactics.pointwise import _ACT, activate
from native.shared.int8_io import max_pool_refusal
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "tensor.cu"


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
            relu = _fused_relu(op)
            y = _pool2d_nhwc_vec(x, p["window"], strides, dil, pre, post, mode, exclude, dtype, outputs, relu)
            if y is not None:
                return [y if relu else _post_ops(y, op)]
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


def _fused_relu(op) -> bool:
    """Whether the layer's post-ops are exactly one ReLU (the vector kernel applies it as it stores)."""
    steps = op.params.get("post_ops") or ()
    return len(steps) == 1 and steps[0]["op"] == "activation" and steps[0]["type"] == "RELU"


_INT_MAX = 2 ** 31 - 1


def _suffix(dtype) -> str:
    """The pool kernels' name suffix: the float storage types', and `_i8` for the INT8 max pool."""
    return "_i8" if np.dtype(dtype) == np.int8 else suffix(dtype)


def _pool2d_nhwc_vec(x, window, strides, dil, pre, post, mode, exclude, dtype, outputs, relu):
    """tensor.cu's pool2d_nhwc_v: an NHWC window pool reading 16 bytes of channels per load; None where it does
    not apply (channels not a multiple of the vector, unaligned buffers, 2^31 vectors or more): _pool2d then runs."""
    n, h, w, c = (int(d) for d in x.shape)
    vec = 16 // np.dtype(dtype).itemsize
    kh, kw = (int(k) for k in window)
    oh = (h + pre[0] + post[0] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + pre[1] + post[1] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    if oh <= 0 or ow <= 0 or c % vec or x.ptr % 16 or x.size // vec > _INT_MAX or n * max(oh, 0) * max(ow, 0) * c // vec > _INT_MAX:
        return None
    y = out_array(outputs, 0, (n, oh, ow, c), dtype)
    if y.ptr % 16:
        return None
    params = np.array([n, c, h, w, oh, ow, kh, kw, strides[0], strides[1], pre[0], pre[1], dil[0], dil[1], mode,
                       int(exclude), int(relu)], dtype=np.int32)
    if y.size:
        launch(kernel(SRC, "pool2d_nhwc_v" + _suffix(dtype)), grid_for(y.size // vec), (256, 1, 1),
               [np.uint64(y.ptr), np.uint64(x.ptr), params])
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
        launch(kernel(SRC, "pool2d" + _suffix(dtype)), grid_for(y.size), (256, 1, 1),
               [np.uint64(y.ptr), np.uint64(x.ptr), params])
    return y


@register_tactic
class GpuPooling(_GpuPool):
    kind, name = "Pooling", "window-kernel"


@register_tactic
class GpuPoolingNHWC(_GpuPool):
    kind, name, nhwc = "PoolingNHWC", "window-kernel", True
    formats = ("nhwc",)


@register_tactic
class GpuInt8MaxPoolNHWC(Tactic):
    """A 2-D max pool [+ ReLU] from an int8 NHWC tensor to one of the same scale (passes/int8_io.py moves the
    quantizing Reformat in front of a max pool whose readers are INT8 layers: rounding is monotone, so quantizing
    then pooling gives the values pooling then quantizing gives, on a quarter of an FP32 tensor's bytes). The max of
    int8 values is one of them: bit-equal to the CPU's `int8-max-nhwc`."""

    device = "cuda"
    kind, name = "PoolingNHWC", "int8-max-kernel"
    writes_outputs = True
    precisions, formats = ("int8",), ("nhwc",)
    input_dtypes, dtype_inputs = frozenset({"int8"}), (0,)
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        return max_pool_refusal(op, input_shapes)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        if np.dtype(x.dtype) != np.int8:
            raise TacticRefusal(f"the INT8 max pool reads int8, got {x.dtype}")
        p = op.params
        strides, dil = list(p.get("strides") or [1, 1]), list(p.get("dilations") or [1, 1])
        pre, post = list(p.get("pre_padding") or [0, 0]), list(p.get("post_padding") or [0, 0])
        relu = _fused_relu(op)
        y = _pool2d_nhwc_vec(x, p["window"], strides, dil, pre, post, 0, False, np.int8, outputs, relu)
        if y is None:
            n, h, w, c = x.shape
            # mode 2: max, then the ReLU
            y = _pool2d(x, (n, c, h, w), (h * w * c, 1, w * c, c), p["window"], strides, dil, pre, post,
                        2 if relu else 0, False, np.int8, outputs, nhwc=True)
        return [y]

