"""Reductions on the GPU: float SUM / AVG / MAX / MIN over adjacent axes (tensor.cu's gpool), then the
integer and index reductions (index.cu). The CPU's twin: cpu/kernels/reduce.py."""
from __future__ import annotations

import numpy as np

from native.cuda.array import to_host
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, same_float, suffix
from native.cuda.tactics.index import SRC as INDEX_SRC
from native.cuda.tactics.index import BLOCK, IndexKernel, code
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "tensor.cu"


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


def _rows(shape, axis):
    """(outer, n, inner) of a tensor viewed along `axis`."""
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


@register_tactic
class GpuArgReduce(IndexKernel):
    """ArgMax / ArgMin, one thread per output scanning its row: the first extreme wins (the last with
    select_last_index), and the first NaN is the answer, as numpy's argmax / argmin. int64 indices."""

    kind, name = "ArgReduce", "nvrtc-scan"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        c = code(x)
        if c == "b" or x.ndim == 0:
            raise TacticRefusal(f"ArgReduce of {x.dtype} / rank {x.ndim} runs on the host")
        p = op.params
        axis = int(p.get("axis", 0)) % x.ndim
        outer, n, inner = _rows(x.shape, axis)
        if n == 0:
            raise TacticRefusal("an empty ArgReduce axis: the host tactic reports it")
        shape = list(x.shape)
        if p.get("keep_dims", True):
            shape[axis] = 1
        else:
            del shape[axis]
        out = out_array(outputs, 0, shape, np.int64)
        if out.size:
            launch(kernel(INDEX_SRC, f"argreduce_{c}"), grid_for(out.size), BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(p.get("op", "MAX") != "MAX"), np.int32(bool(p.get("select_last_index")))])
        return [out]


_IDENT = {"f32": (np.float32(0), np.float32(1)), "f16": (np.float16(0).view(np.uint16), np.float16(1).view(np.uint16)),
          "i64": (np.int64(0), np.int64(1)), "i32": (np.int32(0), np.int32(1))}


@register_tactic
class GpuCumulative(IndexKernel):
    """Cumulative SUM / PROD (exclusive, reverse), one thread per row in numpy's order: bit-identical sums."""

    kind, name = "Cumulative", "nvrtc-scan"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        c = code(x)
        if c == "b":
            raise TacticRefusal("cumulative sums of booleans run on the host")
        p = op.params
        axis = int(np.asarray(to_host(inputs[1])).reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None \
            else int(p.get("axis", 0))
        axis %= max(x.ndim, 1)
        if x.ndim == 0:
            raise TacticRefusal("a 0-d cumulative sum runs on the host")
        outer, n, inner = _rows(x.shape, axis)
        red = 1 if p.get("op", "SUM") == "SUM" else 2
        out = out_array(outputs, 0, x.shape, x.dtype)
        if x.size:
            launch(kernel(INDEX_SRC, f"cumulative_{c}"), grid_for(outer * inner), BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(red), np.int32(bool(p.get("exclusive"))), np.int32(bool(p.get("reverse"))),
                    _IDENT[c][red - 1]])
        return [out]


_RED = {"SUM": 1, "PROD": 2, "MAX": 3, "MIN": 4}


@register_tactic
class GpuIntReduce(IndexKernel):
    """Integer SUM / PROD / MAX / MIN (int32, int64; wrapping) over one block of adjacent axes; empty reductions
    give the CPU's identities (0, 1, the type's lowest / highest value)."""

    kind, name = "Reduce", "nvrtc-int"

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _RED:
            return f"reduce {op.params.get('op')} has no integer kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        c = code(x)
        if c not in ("i64", "i32"):
            raise TacticRefusal(f"reduce of {x.dtype} is not an integer kernel")
        axes = op.params.get("axes")
        if len(inputs) > 1 and inputs[1] is not None:
            axes = np.asarray(to_host(inputs[1])).reshape(-1).tolist()
        if axes is None or len(axes) == 0:
            if op.params.get("noop_with_empty_axes"):
                raise TacticRefusal("a no-op reduce runs on the host")
            axes = list(range(x.ndim))
        if x.ndim == 0:
            raise TacticRefusal("a 0-d reduce runs on the host")
        axes = sorted({int(a) % x.ndim for a in axes})
        if axes != list(range(axes[0], axes[-1] + 1)):
            raise TacticRefusal("reduce over non-adjacent axes runs on the host")
        outer = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
        n = int(np.prod(x.shape[axes[0]:axes[-1] + 1], dtype=np.int64))
        inner = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64))
        keep = bool(op.params.get("keep_dims", True))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
            tuple(d for i, d in enumerate(x.shape) if i not in axes)
        red = _RED[op.params["op"]]
        info = np.iinfo(x.dtype)
        ident = x.dtype.type({1: 0, 2: 1, 3: info.min, 4: info.max}[red])
        out = out_array(outputs, 0, shape, x.dtype)
        if out.size:
            launch(kernel(INDEX_SRC, f"ireduce_{c}"), grid_for(out.size), BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(red), ident])
        return [out]
