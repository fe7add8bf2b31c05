"""Data movement on the GPU (tensor.cu): Constant (uploaded once), Shuffle, Slice, Split, Concatenation,
Reformat (storage casts), Gather, Select. Reshapes are views; everything else is one strided-copy launch per
output, for any element type."""
from __future__ import annotations

import numpy as np

from native import numerics
from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import code, on_device, out_array, weight
from native.tactics import Tactic, TacticRefusal, register_tactic
from native.cuda.tactics.common import bcast_strides, cast, host_value  # noqa: F401  (cast: callers import it from here too)

SRC = "tensor.cu"
ANY = ("float32", "float16", "bfloat16", "fp8", "int8")
_FLOATS = ("float32", "float16", "bfloat16")     # float storage types of our kernels
_CASTS = ("float32", "float16", "bfloat16", "int64", "int32", "bool")   # the element types tensor.cu casts between
_COPY = {1: "copy_nd_1", 2: "copy_nd_2", 4: "copy_nd_4", 8: "copy_nd_8", 16: "copy_nd_16"}


def contiguous_strides(shape) -> list:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= int(shape[d])
    return out


def strided_copy(src: GpuArray, src_offset: int, src_strides, dims, dst: GpuArray, dst_offset: int = 0,
                 dst_strides=None):
    """dst[dst_offset + idx . dst_strides] = src[src_offset + idx . src_strides] for every idx of `dims`
    (offsets and strides in elements; dst_strides default: contiguous `dims`)."""
    dims = [int(d) for d in dims]
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if n == 0:
        return
    size = src.dtype.itemsize
    if size not in _COPY or len(dims) > 8:
        raise TacticRefusal(f"strided copy of {size}-byte elements at rank {len(dims)} runs on the host")
    dst_strides = contiguous_strides(dims) if dst_strides is None else list(dst_strides)
    src_strides = list(src_strides)
    # rows contiguous on both sides move as 16-byte elements (a head split's [.., 64] fp16 rows: 8 moves each)
    w = 16 // size if size < 16 else 1
    if dims and w > 1 and src_strides[-1] == 1 and dst_strides[-1] == 1 and dims[-1] % w == 0 \
            and all(s % w == 0 for s in src_strides[:-1] + dst_strides[:-1]) and src_offset % w == 0 \
            and dst_offset % w == 0 and (src.ptr + src_offset * size) % 16 == 0 \
            and (dst.ptr + dst_offset * size) % 16 == 0:
        dims = dims[:-1] + [dims[-1] // w]
        src_strides = [s // w for s in src_strides[:-1]] + [1]
        dst_strides = [s // w for s in dst_strides[:-1]] + [1]
        src_offset, dst_offset, size, n = src_offset // w, dst_offset // w, 16, n // w
    s = np.zeros(26, dtype=np.int64)
    s[0], s[1] = len(dims), n
    s[2:2 + len(dims)] = dims
    s[10:10 + len(dims)] = src_strides
    s[18:18 + len(dims)] = dst_strides
    small = max(n, src.nbytes // size, dst.nbytes // size) < 2 ** 31    # 32-bit index arithmetic suffices
    launch(kernel(SRC, _COPY[size].replace("copy_nd", "copy_s") if small else _COPY[size]), grid_for(n), (256, 1, 1),
           [np.uint64(dst.ptr + dst_offset * size), np.uint64(src.ptr + src_offset * size), s])


_FEW = {1: "few_channels_1", 2: "few_channels_2", 4: "few_channels_4", 8: "few_channels_8"}
FEW_CHANNELS = 4     # NCHW <-> NHWC transposes of at most this many channels run few_channels (tensor.cu)


def transpose(x: GpuArray, perm) -> GpuArray:
    perm = [int(p) for p in perm]
    if perm == list(range(x.ndim)):
        return x
    strides = contiguous_strides(x.shape)
    out = GpuArray(tuple(x.shape[p] for p in perm), x.dtype)
    if _few_channels(x, perm, out):
        return out
    strided_copy(x, 0, [strides[p] for p in perm], out.shape, out)
    return out


def _few_channels(x: GpuArray, perm, out: GpuArray) -> bool:
    """NCHW -> NHWC (perm [0, 2, 3, 1]) or back ([0, 3, 1, 2]) of a 4-D tensor of at most FEW_CHANNELS channels
    in one few_channels launch; False (nothing launched) for any other transpose."""
    if x.ndim != 4 or perm not in ([0, 2, 3, 1], [0, 3, 1, 2]) or x.dtype.itemsize not in _FEW:
        return False
    to_nhwc = perm == [0, 2, 3, 1]
    n, c, h, w = x.shape if to_nhwc else (x.shape[0], x.shape[3], x.shape[1], x.shape[2])
    total = int(n) * int(h) * int(w)
    if not 1 <= c <= FEW_CHANNELS or total * int(c) >= 2 ** 31 or total == 0:
        return False
    launch(kernel(SRC, _FEW[x.dtype.itemsize]), grid_for(total), (256, 1, 1),
           [np.uint64(out.ptr), np.uint64(x.ptr), np.int32(total), np.int32(int(h) * int(w)), np.int32(c),
            np.int32(to_nhwc)])
    return True


def _gpu(tactic_cls):
    tactic_cls.device = "cuda"
    tactic_cls.precisions = ANY
    return register_tactic(tactic_cls)


@_gpu
class GpuConstant(Tactic):
    """The weight uploaded once per process; every execution reads the same device buffer."""

    kind, name = "Constant", "device-constant"
    constant = True

    def supports(self, op, input_shapes):
        v = op.weights.get("value")
        if not isinstance(v, np.ndarray) or (v.dtype.kind not in "biuf" and v.dtype.name not in _FLOATS):
            return "non-numeric constants stay on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        """A float value in the storage type its readers expect (the precision pass gives a constant its readers'
        precision: a BF16 LayerNorm's gamma is stored as bfloat16), rounded once (RNE) when uploaded."""
        v = op.weights["value"]
        to = (op.output_types[0] if op.output_types else None) or op.precision
        if to in ("float16", "bfloat16") and v.dtype.name in _FLOATS:
            return [weight(v, numerics.storage_numpy_dtype(to))]
        return [weight(v)]


@_gpu
class GpuShuffle(Tactic):
    """first transpose -> reshape (a view) -> second transpose."""

    kind, name = "Shuffle", "strided-copy"

    def supports(self, op, input_shapes):
        if input_shapes and len(input_shapes) > 1 and input_shapes[1] is not None:
            return "reshape dims given as a tensor run on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if len(inputs) > 1 and inputs[1] is not None:
            raise TacticRefusal("reshape dims given as a tensor run on the host")
        x = on_device(inputs[0])
        if not isinstance(x, GpuArray):
            raise TacticRefusal(f"{type(x).__name__} values are shuffled on the host")
        p = op.params
        if p.get("first_transpose") is not None:
            x = transpose(x, p["first_transpose"])
        dims = p.get("reshape_dims")
        if dims is not None:
            dims = list(dims)
            if p.get("zero_is_placeholder", True) and 0 in dims:
                dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
            x = x.reshape(dims)
        if p.get("second_transpose") is not None:
            x = transpose(x, p["second_transpose"])
        return [x]


def _axis(op, rank):
    a = int(op.params.get("axis", 0))
    return a + rank if a < 0 else a


@_gpu
class GpuSplit(Tactic):
    """Sizes from `split`, or from input 1 (a constant's host copy, else downloaded: geometry.host_value), else
    `num_outputs` parts of ceil(n / parts), as the CPU kernel."""

    kind, name = "Split", "strided-copy"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        axis = _axis(op, x.ndim)
        sizes = op.params.get("split")
        if len(inputs) > 1 and inputs[1] is not None:
            sizes = [int(v) for v in host_value(inputs[1], "split sizes").reshape(-1)]
        if sizes is None:
            n = int(op.params.get("num_outputs") or 1)
            d = x.shape[axis]
            chunk = -(-d // n)
            sizes = [min(chunk, max(d - i * chunk, 0)) for i in range(n)]
        strides, outs, start = contiguous_strides(x.shape), [], 0
        for size in sizes:
            shape = list(x.shape)
            shape[axis] = int(size)
            out = out_array(outputs, len(outs), shape, x.dtype)
            strided_copy(x, start * strides[axis], strides, shape, out)
            outs.append(out)
            start += int(size)
        return outs


@_gpu
class GpuConcatenation(Tactic):
    kind, name = "Concatenation", "strided-copy"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        xs = [on_device(a) for a in inputs if a is not None]
        if xs[0].ndim == 0 or len({x.dtype for x in xs}) != 1:
            raise TacticRefusal("scalar stacks and mixed types are concatenated on the host")
        axis = _axis(op, xs[0].ndim)
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = out_array(outputs, 0, shape, xs[0].dtype)
        ostr, start = contiguous_strides(shape), 0
        for x in xs:
            strided_copy(x, 0, contiguous_strides(x.shape), x.shape, out, start * ostr[axis], ostr)
            start += x.shape[axis]
        return [out]


@_gpu
class GpuSlice(Tactic):
    """starts/ends/axes/steps from the params or from inputs 1-4 (a constant's host copy, else downloaded:
    geometry.host_value), resolved as the CPU kernel resolves them; one strided copy."""

    kind, name = "Slice", "strided-copy"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def supports(self, op, input_shapes):
        given = [s is not None for s in (input_shapes or [])[1:3]] + [False, False]
        if (op.params.get("starts") is None and not given[0]) or (op.params.get("ends") is None and not given[1]):
            return "slice bounds unknown"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        params = dict(op.params)
        for i, k in enumerate(("starts", "ends", "axes", "steps"), 1):
            if len(inputs) > i and inputs[i] is not None:
                params[k] = [int(v) for v in host_value(inputs[i], f"slice {k}").reshape(-1)]
        if params.get("starts") is None or params.get("ends") is None:
            raise TacticRefusal("slice bounds unknown: the host tactic reports it")
        index = _slice_index(params, x.shape)
        strides = contiguous_strides(x.shape)
        offset = sum(s.start * st for s, st in zip(index, strides))
        out = out_array(outputs, 0, [len(range(s.start, s.stop, s.step)) for s in index], x.dtype)
        strided_copy(x, offset, [s.step * st for s, st in zip(index, strides)], out.shape, out)
        return [out]


def _slice_index(p, shape):
    """Per axis a slice with explicit start and step (the CPU kernel's clamping rules), from resolved params."""
    starts, ends = list(p["starts"]), list(p["ends"])
    axes = p.get("axes") or list(range(len(starts)))
    steps = p.get("steps") or [1] * len(starts)
    index = [slice(0, d, 1) for d in shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = a + len(shape) if a < 0 else a
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st == 0:
            raise TacticRefusal("step 0 is reported by the host tactic")
        if st > 0:
            s, e = max(0, min(d, s)), max(0, min(d, e))
        else:
            s, e = max(-1, min(d - 1, s)), max(-1, min(d - 1, e))
        index[a] = slice(0, 0, st) if (st < 0 and s < 0) else slice(s, e, st)
    return index


@_gpu
class GpuReformat(Tactic):
    """Storage casts between float32, float16 and bfloat16 (widen exactly, round once to nearest even: the CPU
    Reformat's rounding)."""

    kind, name = "Reformat", "cast-kernel"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    own_precisions = True

    def supports(self, op, input_shapes):
        pair = (op.params.get("from"), op.params.get("to"))
        if pair[0] not in _FLOATS or pair[1] not in _FLOATS:
            return f"{pair[0]} -> {pair[1]} runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        return [cast(on_device(inputs[0]), numerics.storage_numpy_dtype(op.params["to"]), outputs)]


@_gpu
class GpuCast(Tactic):
    """ONNX Cast between float32, float16, bfloat16, int64, int32 and bool (floats to integers truncate; to bool is
    != 0)."""

    kind, name = "Cast", "cast-kernel"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        try:
            to = op.params.get("to")
            to = numerics.storage_numpy_dtype(to) if to == "bfloat16" else np.dtype(to)   # (ml_dtypes' name)
        except TypeError:
            raise TacticRefusal(f"cast to {op.params.get('to')} runs on the host") from None
        if not isinstance(x, GpuArray) or x.dtype.name not in _CASTS or to.name not in _CASTS:
            raise TacticRefusal(f"cast {getattr(x, 'dtype', type(x).__name__)} -> {to} runs on the host")
        if x.dtype == to:
            return [x]
        if x.dtype.name in _FLOATS and to.name in _FLOATS:
            return [cast(x, to, outputs)]
        name = f"cast_{code(x.dtype)}_{code(to)}"
        out = out_array(outputs, 0, x.shape, to)
        if x.size:
            try:
                fn = kernel(SRC, name)
            except Exception:
                raise TacticRefusal(f"cast {x.dtype} -> {to} runs on the host") from None
            launch(fn, grid_for(x.size), (256, 1, 1), [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size)])
        return [out]


@_gpu
class GpuGather(Tactic):
    """DEFAULT-mode gather along one axis (embedding lookups); int64 or int32 indices."""

    kind, name = "Gather", "index-kernel"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def supports(self, op, input_shapes):
        if op.params.get("mode", "DEFAULT") != "DEFAULT":
            return f"gather mode {op.params.get('mode')} runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x, idx = on_device(inputs[0]), on_device(inputs[1])
        if idx.dtype not in (np.int64, np.int32) or x.dtype.itemsize not in (2, 4, 8):
            raise TacticRefusal(f"gather of {x.dtype} by {idx.dtype} runs on the host")
        if idx.dtype == np.int32:
            raise TacticRefusal("int32 indices are gathered on the host")
        axis = _axis(op, x.ndim)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        out = out_array(outputs, 0, x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
        if out.size:
            launch(kernel(SRC, f"gather_{x.dtype.itemsize}"), grid_for(out.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.uint64(idx.ptr), np.int64(outer),
                    np.int64(x.shape[axis]), np.int64(inner), np.int64(idx.size)])
        return [out]


@_gpu
class GpuSelect(Tactic):
    kind, name = "Select", "index-kernel"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        c, a, b = (on_device(x) for x in inputs[:3])
        if c.dtype != np.bool_ or a.dtype != b.dtype or a.dtype.itemsize not in (2, 4, 8):
            raise TacticRefusal(f"select on {c.dtype}/{a.dtype}/{b.dtype} runs on the host")
        return [select(c, a, b, outputs, SRC)]


def select(c: GpuArray, a: GpuArray, b: GpuArray, outputs, src: str) -> GpuArray:
    """where(c, a, b) with broadcasting, by the `select_<itemsize>` kernel of <src> (its Select struct:
    rank, size, dims[8] and the element strides of c, a and b, 0 where broadcast)."""
    shape = np.broadcast_shapes(c.shape, a.shape, b.shape)
    if len(shape) > 8:
        raise TacticRefusal("rank above 8")
    out = out_array(outputs, 0, shape, a.dtype)
    s = np.zeros(34, dtype=np.int64)
    s[0], s[1] = len(shape), out.size
    s[2:2 + len(shape)] = shape
    for base, x in ((10, c), (18, a), (26, b)):
        s[base:base + len(shape)] = bcast_strides(shape, x.shape)
    if out.size:
        launch(kernel(src, f"select_{a.dtype.itemsize}"), grid_for(out.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(c.ptr), np.uint64(a.ptr), np.uint64(b.ptr), s])
    return out
