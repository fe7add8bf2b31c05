"""Data movement and generators on the GPU (geometry.cu, tensor.cu's strided copy): Padding, Expand,
Tile, Identity, Fill and Range, with the CPU kernels' semantics (native/cpu/kernels/tensor.py, core.py).

Their shape-deciding inputs (pads, repeats, the Expand shape, Fill's shape, Range's bounds) are values: a
build-time constant is read from its host copy (no synchronization, so CUDA graphs capture these layers); a
value computed on the device is downloaded (a synchronizing copy of a few numbers), except while a CUDA graph is
being captured, where the call raises TacticRefusal and the device runs the layer's host twin."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import bcast_strides, code, host_value, on_device, out_array  # noqa: F401  (host_value: resize.py, signal.py)
from native.cuda.tactics.tensor import contiguous_strides, strided_copy
from native.errors import ExecutionError
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "geometry.cu"
ANY = ("float32", "float16", "bfloat16", "fp8", "int8")   # what data movement declares (any element type)


def _ints(v) -> list:
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _arg(inputs, i):
    return inputs[i] if len(inputs) > i else None


def _bits(value, dtype) -> np.uint64:
    """`value` stored as `dtype`, its bit pattern zero-extended to 64 bits (the fill kernels' argument)."""
    dtype = np.dtype(dtype)
    raw = np.asarray(value).astype(dtype).reshape(1).view(f"u{dtype.itemsize}")
    return np.uint64(int(raw[0]))


def _copy_kernel_size(x):
    if x.dtype.itemsize not in (1, 2, 4, 8):
        raise TacticRefusal(f"{x.dtype} elements are moved on the host")


def _gpu(cls):
    cls.device = "cuda"
    cls.precisions = getattr(cls, "generates", None) or ANY   # movers take any storage type
    return register_tactic(cls)


@_gpu
class GpuIdentity(Tactic):
    """The input itself (the CPU kernel also returns its input)."""

    kind, name = "Identity", "alias"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = inputs[0] if inputs else None
        if not isinstance(x, (GpuArray, np.ndarray, np.generic)):   # a sequence, an empty optional: the host twin
            raise TacticRefusal(f"Identity of a {type(x).__name__} runs on the host")
        return [on_device(x)]


@_gpu
class GpuExpand(Tactic):
    """Broadcast to np.broadcast_shapes(x.shape, shape): one strided copy with stride 0 along broadcast axes."""

    kind, name = "Expand", "strided-copy"
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        shape = np.broadcast_shapes(x.shape, tuple(_ints(host_value(inputs[1], "Expand shape"))))
        out = out_array(outputs, 0, shape, x.dtype)
        strided_copy(x, 0, bcast_strides(shape, x.shape), shape, out)
        return [out]


@_gpu
class GpuTile(Tactic):
    """np.tile as one strided copy: the output viewed as [r0, d0, r1, d1, ...] reads x with stride 0 along r."""

    kind, name = "Tile", "strided-copy"
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        reps = _ints(host_value(inputs[1], "Tile repeats"))
        if any(r < 0 for r in reps):
            raise ExecutionError(f"Tile '{op.name}': negative repeats {reps}")
        rank = max(len(reps), x.ndim)
        shape = [1] * (rank - x.ndim) + list(x.shape)
        reps = [1] * (rank - len(reps)) + reps
        strides = contiguous_strides(shape)
        dims, src = [], []
        for d, r, s in zip(shape, reps, strides):
            if r != 1:
                dims.append(r)
                src.append(0)
            if d != 1 or r == 1:
                dims.append(d)
                src.append(s)
        out = out_array(outputs, 0, [d * r for d, r in zip(shape, reps)], x.dtype)
        strided_copy(x, 0, src, dims, out)
        return [out]


_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


@_gpu
class GpuPadding(Tactic):
    """pads [begin..., end...] over `axes` (all by default); negative pads crop; constant / reflect / edge / wrap
    (reflect mirrors about the edge without repeating it, periodically for pads wider than the axis, as numpy)."""

    kind, name = "Padding", "index-kernel"
    writes_outputs = True

    def supports(self, op, input_shapes):
        if op.params.get("mode", "constant") not in _MODES:
            return f"padding mode {op.params.get('mode')} runs on the host"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) > 8:
            return "rank above 8 runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        _copy_kernel_size(x)
        p = op.params
        mode = p.get("mode", "constant")
        if mode not in _MODES or x.ndim > 8:
            raise TacticRefusal(f"padding mode {mode} at rank {x.ndim} runs on the host")
        pads = _ints(host_value(inputs[1], "pads")) if _arg(inputs, 1) is not None else list(p["pads"])
        value = host_value(inputs[2], "pad value") if _arg(inputs, 2) is not None else p.get("value", 0.0)
        axes = _ints(host_value(inputs[3], "pad axes")) if _arg(inputs, 3) is not None else p.get("axes")
        axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
        n = len(axes)
        width = [[0, 0] for _ in range(x.ndim)]
        for i, a in enumerate(axes):
            width[a] = [pads[i], pads[i + n]]
        strides = contiguous_strides(x.shape)
        offset, ext, pre, odims = 0, [], [], []
        for d, (b, e) in enumerate(width):
            start, stop = max(-b, 0), x.shape[d] - max(-e, 0)
            length = max(stop - start, 0)
            if length == 0 and (b > 0 or e > 0) and mode != "constant":
                raise TacticRefusal(f"{mode} padding of an empty axis is reported by the host tactic")
            offset += start * strides[d] if length else 0
            ext.append(length)
            pre.append(max(b, 0))
            odims.append(length + max(b, 0) + max(e, 0))
        out = out_array(outputs, 0, odims, x.dtype)
        if not out.size:
            return [out]
        v = np.asarray(value).reshape(-1)
        s = np.zeros(36, np.int64)
        s[0], s[1] = x.ndim, out.size
        s[2:2 + x.ndim], s[10:10 + x.ndim], s[18:18 + x.ndim], s[26:26 + x.ndim] = odims, ext, strides, pre
        s[34] = _MODES[mode]
        s[35:36] = np.array([_bits(v[0] if v.size else 0, x.dtype)], np.uint64).view(np.int64)
        small = max(out.size, x.size) < 2 ** 31
        size = x.dtype.itemsize
        launch(kernel(SRC, f"pad_s_{size}" if small else f"pad_{size}"), grid_for(out.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(x.ptr + offset * size), s])
        return [out]


_LINSPACE = ("float32", "float16", "float64", "int32", "int64")   # the types geometry.cu fills linearly


def _fill_dtype(name, default):
    if name is None:
        return np.dtype(default)
    try:
        return np.dtype(name)
    except TypeError:
        raise TacticRefusal(f"Fill of {name} runs on the host") from None


@_gpu
class GpuFill(Tactic):
    """CONSTANT (weights 'value'), EYE_LIKE (diagonal k) and LINSPACE (alpha + beta * i in float64, cast once);
    *_LIKE take input 0's shape and dtype. Random fills run on the host (numpy's generator gives their values)."""

    kind, name = "Fill", "generator-kernel"
    writes_outputs = True
    generates = ("float32",)   # the values' type is the layer's own (FP32_ONLY in native/cpu/precision.py)

    def supports(self, op, input_shapes):
        if str(op.params.get("op", "CONSTANT")).startswith("RANDOM"):
            return "random fills run on the host (numpy's generator decides their values)"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        p = op.params
        kind = p.get("op", "CONSTANT")
        src = _arg(inputs, 0)
        if kind.startswith("RANDOM") or kind.endswith("_LIKE") and src is None:
            raise TacticRefusal(f"Fill {kind} runs on the host")
        if kind.endswith("_LIKE"):
            x = on_device(src)
            shape, dt = tuple(x.shape), _fill_dtype(p.get("dtype"), x.dtype)
            if kind == "EYE_LIKE" and len(shape) != 2:
                raise TacticRefusal("EYE_LIKE of a non-matrix is reported by the host tactic")
            kind = "EYE" if kind == "EYE_LIKE" else kind[:-5]
        else:
            shape = tuple(_ints(host_value(src, "Fill shape"))) if src is not None else tuple(p.get("shape") or ())
            dt = None
        value = np.asarray(op.weights.get("value", np.zeros(1, np.float32))).reshape(-1)
        if dt is None:
            dt = value.dtype if kind == "CONSTANT" else _fill_dtype(p.get("dtype"), np.float32)
        if dt.itemsize not in (1, 2, 4, 8) or dt.kind not in "biuf":
            raise TacticRefusal(f"Fill of {dt} runs on the host")
        out = out_array(outputs, 0, shape, dt)
        n = out.size
        if n == 0:
            return [out]
        size = dt.itemsize
        if kind == "CONSTANT":
            launch(kernel(SRC, f"fill_{size}"), grid_for(n), (256, 1, 1),
                   [np.uint64(out.ptr), _bits(value[0], dt), np.int64(n)])
        elif kind == "EYE":
            launch(kernel(SRC, f"eye_{size}"), grid_for(n), (256, 1, 1),
                   [np.uint64(out.ptr), np.int64(shape[0]), np.int64(shape[1]), np.int64(int(p.get("k", 0))),
                    _bits(1, dt), _bits(0, dt)])
        elif kind == "LINSPACE":
            if dt.name not in _LINSPACE:
                raise TacticRefusal(f"LINSPACE of {dt} runs on the host")
            launch(kernel(SRC, f"linspace_{code(dt)}"), grid_for(n), (256, 1, 1),
                   [np.uint64(out.ptr), np.float64(p.get("alpha", 0.0)), np.float64(p.get("beta", 1.0)),
                    np.int64(n)])
        else:
            raise TacticRefusal(f"Fill {kind} runs on the host")
        return [out]


_RANGE = ("float32", "float64", "int32", "int64")   # the types geometry.cu's range_* make


@_gpu
class GpuRange(Tactic):
    """start + i * delta for i < ceil((limit - start) / delta), in start's type (the length is computed on the
    host from the three scalars, as the CPU kernel does)."""

    kind, name = "Range", "generator-kernel"
    writes_outputs = True
    generates = ("float32",)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        start, limit, delta = (host_value(v, "Range bounds").reshape(()) for v in inputs[:3])
        if start.dtype.name not in _RANGE:
            raise TacticRefusal(f"Range of {start.dtype} runs on the host")
        count = np.ceil((float(limit) - float(start)) / float(delta)) if float(delta) else np.inf
        if not np.isfinite(count):
            raise ExecutionError(f"Range '{op.name}': start {start}, limit {limit}, delta {delta} give no finite "
                                 f"length")
        n = max(int(count), 0)
        t = start.dtype.type
        out = out_array(outputs, 0, (n,), start.dtype)
        if n:
            launch(kernel(SRC, f"range_{code(start.dtype)}"), grid_for(n), (256, 1, 1),
                   [np.uint64(out.ptr), t(start), t(np.asarray(delta).astype(t)), np.int64(n)])
        return [out]
