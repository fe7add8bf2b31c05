"""Index, integer and detection layers on the GPU (kernels/index.cu): integer / boolean ElementWise and Unary
(comparisons giving bool, logic, integer arithmetic with numpy's wrap-around and the CPU's Div/Mod rules), float
MOD / FMOD / FLOOR_DIV, Gather (DEFAULT on any element size and int32 indices, ELEMENT, ND), TopK, NonZero and
NonMaxSuppression. Each follows the CPU kernel's semantics exactly (ties, NaN order, negative indices), so results
are bit-identical. Data-dependent output sizes (NonZero, NMS) count first and download the count (one sync)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray, to_host
from native.cuda.driver import context
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import on_device, out_array, ptr
from native.errors import ExecutionError
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "index.cu"
PRECISIONS = ("float32", "float16", "bfloat16")
_CODE = {"int64": "i64", "int32": "i32", "bool": "b", "float32": "f32", "float16": "f16"}
# op codes of index.cu
_ARITH = {"SUM": 0, "SUB": 1, "PROD": 2, "DIV": 3, "FLOOR_DIV": 4, "MOD": 5, "FMOD": 6, "MAX": 7, "MIN": 8,
          "BITWISE_AND": 9, "BITWISE_OR": 10, "BITWISE_XOR": 11, "BITSHIFT_LEFT": 12, "BITSHIFT_RIGHT": 13}
_CMP = {"AND": 32, "OR": 33, "XOR": 34, "EQUAL": 35, "GREATER": 36, "LESS": 37, "GREATER_EQUAL": 38,
        "LESS_EQUAL": 39}
_BOOL_ARITH = {"SUM", "PROD", "MAX", "MIN", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR"}
_FLOAT_ARITH = {"MOD", "FMOD", "FLOOR_DIV"}
_UN = {"NOT": 0, "ABS": 1, "NEG": 2, "SIGN": 3, "BITWISE_NOT": 4, "ROUND": 5, "ISNAN": 6, "ISINF": 7}
_BLOCK = (256, 1, 1)


def code(x) -> str:
    """index.cu's type code of a tensor; TacticRefusal for types without kernels (a host layer runs those)."""
    c = _CODE.get(np.dtype(x.dtype).name) if isinstance(x, GpuArray) else None
    if c is None:
        raise TacticRefusal(f"no index kernel for {getattr(x, 'dtype', type(x).__name__)} values")
    return c


def bcast2(out_shape, a_shape, b_shape) -> np.ndarray:
    """index.cu's Bcast: rank, n, dims[8], element strides of a and b (0 along broadcast dims)."""
    from native.cuda.tactics.pointwise import broadcast_params
    return broadcast_params(out_shape, a_shape, b_shape)


def _strides(shape) -> list:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= int(shape[d])
    return out


def _register(cls):
    cls.device = "cuda"
    cls.precisions = PRECISIONS
    cls.writes_outputs = cls.__dict__.get("writes_outputs", True)   # (outputs through out_array)
    return register_tactic(cls)


@_register
class GpuIntElementWise(Tactic):
    """Comparisons and logic of any type (-> bool), integer arithmetic (int32 / int64, wrapping), bool arithmetic,
    float MOD / FMOD / FLOOR_DIV. The float arithmetic the float tactic runs raises TacticRefusal here."""

    kind, name = "ElementWise", "nvrtc-int"

    def supports(self, op, input_shapes):
        name = op.params.get("op")
        if name not in _ARITH and name not in _CMP:
            return f"op {name} has no integer kernel"
        if input_shapes and any(s is not None and len(s) > 8 for s in input_shapes):
            return "rank above 8"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        name = op.params["op"]
        a, b = on_device(inputs[0]), on_device(inputs[1])
        ca, cb = code(a), code(b)
        if ca != cb:
            raise TacticRefusal(f"{a.dtype} {name} {b.dtype}: mixed operand types run on the host")
        shape = np.broadcast_shapes(a.shape, b.shape)
        if len(shape) > 8:
            raise TacticRefusal("rank above 8 runs on the host")
        if name in _CMP:
            fn, dtype, opc = f"icmp_{ca}", np.bool_, _CMP[name]
        elif ca in ("i64", "i32"):
            fn, dtype, opc = f"iarith_{ca}", a.dtype, _ARITH[name]
        elif ca == "b" and name in _BOOL_ARITH:
            fn, dtype, opc = "iarith_b", a.dtype, _ARITH[name]
        elif ca in ("f32", "f16") and name in _FLOAT_ARITH:
            fn, dtype, opc = f"farith_{ca}", a.dtype, _ARITH[name]
        else:
            raise TacticRefusal(f"{name} on {a.dtype} is not an integer kernel")
        out = out_array(outputs, 0, shape, dtype)
        s = bcast2(shape, a.shape, b.shape)
        if out.size:
            launch(kernel(SRC, fn), grid_for(out.size), _BLOCK, [np.uint64(out.ptr), np.uint64(a.ptr),
                                                                 np.uint64(b.ptr), s, np.int32(opc)])
        return [out]


@_register
class GpuIntUnary(Tactic):
    """NOT (any type -> bool), ISNAN / ISINF (-> bool), integer ABS / NEG / SIGN / BITWISE_NOT / ROUND, float SIGN
    and ROUND (half to even)."""

    kind, name = "Unary", "nvrtc-int"

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _UN:
            return f"op {op.params.get('op')} has no integer kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        name = op.params["op"]
        x = on_device(inputs[0])
        c = code(x)
        flags = 0
        if name in ("NOT", "ISNAN", "ISINF") or (c == "b" and name == "BITWISE_NOT"):
            fn, dtype = f"upred_{c}", np.bool_
            opc = _UN["NOT" if name == "BITWISE_NOT" else name]
            flags = int(bool(op.params.get("detect_positive", True))) | 2 * int(
                bool(op.params.get("detect_negative", True)))
        elif c in ("i64", "i32"):
            fn, dtype, opc = f"iunary_{c}", x.dtype, _UN[name] if name != "ROUND" else 8
        elif c in ("f32", "f16") and name in ("SIGN", "ROUND"):
            fn, dtype, opc = f"funary_{c}", x.dtype, _UN[name]
        else:
            raise TacticRefusal(f"{name} on {x.dtype} is not an integer kernel")
        out = out_array(outputs, 0, x.shape, dtype)
        if x.size:
            args = [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size), np.int32(opc)]
            if fn.startswith("upred"):
                args.append(np.int32(flags))
            launch(kernel(SRC, fn), grid_for(x.size), _BLOCK, args)
        return [out]


def _axis(a, rank):
    a = int(a)
    return a + rank if a < 0 else a


@_register
class GpuIndexGather(Tactic):
    """Gather in every mode: DEFAULT (any element size, int64 or int32 indices), ELEMENT (GatherElements, with
    take_along_axis's broadcasting) and ND (GatherND with batch_dims). Negative indices count from the end."""

    kind, name = "Gather", "nvrtc-index"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        return [self._gather(op, inputs, outputs)]

    def _gather(self, op, inputs, outputs):
        x, idx = on_device(inputs[0]), on_device(inputs[1])
        if not isinstance(x, GpuArray) or not isinstance(idx, GpuArray) or x.dtype.itemsize not in (1, 2, 4, 8) \
                or idx.dtype not in (np.int64, np.int32):
            raise TacticRefusal(f"gather of {getattr(x, 'dtype', x)} by {getattr(idx, 'dtype', idx)} runs on the host")
        sfx = f"{x.dtype.itemsize}" + ("_i32" if idx.dtype == np.int32 else "")
        mode = op.params.get("mode", "DEFAULT")
        if mode == "ND":
            return self._nd(op, x, idx, sfx, outputs)
        axis = _axis(op.params.get("axis", 0), x.ndim)
        if not 0 <= axis < x.ndim:
            raise TacticRefusal("axis out of range: the host tactic reports it")
        xs = _strides(x.shape)
        ist = _strides(idx.shape)
        if mode == "ELEMENT":
            if idx.ndim != x.ndim:
                raise TacticRefusal("indices of another rank: the host tactic reports it")
            shape = []
            for d in range(x.ndim):
                if d == axis:
                    shape.append(idx.shape[d])
                elif x.shape[d] == idx.shape[d] or 1 in (x.shape[d], idx.shape[d]):
                    shape.append(max(x.shape[d], idx.shape[d]) if min(x.shape[d], idx.shape[d]) else 0)
                else:
                    raise TacticRefusal("shapes do not broadcast: the host tactic reports it")
            gx = [0 if d == axis or x.shape[d] == 1 else xs[d] for d in range(x.ndim)]
            gi = [0 if idx.shape[d] == 1 else ist[d] for d in range(x.ndim)]
        elif mode == "DEFAULT":
            shape = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:])
            gx = xs[:axis] + [0] * idx.ndim + xs[axis + 1:]
            gi = [0] * axis + ist + [0] * (x.ndim - axis - 1)
        else:
            raise TacticRefusal(f"gather mode {mode} runs on the host")
        if len(shape) > 8:
            raise TacticRefusal("rank above 8 runs on the host")
        out = out_array(outputs, 0, shape, x.dtype)
        g = np.zeros(28, dtype=np.int64)
        g[0], g[1], g[2], g[3] = len(shape), out.size, x.shape[axis], xs[axis]
        g[4:4 + len(shape)] = shape
        g[12:12 + len(shape)] = gx
        g[20:20 + len(shape)] = gi
        if out.size:
            launch(kernel(SRC, f"gather1_{sfx}"), grid_for(out.size), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.uint64(idx.ptr), g])
        return out

    def _nd(self, op, x, idx, sfx, outputs):
        b = int(op.params.get("batch_dims", 0) or 0)
        if idx.ndim < 1:
            raise TacticRefusal("GatherND needs indices of rank >= 1: the host tactic reports it")
        m = idx.shape[-1]
        if m > 8 or b + m > x.ndim or tuple(idx.shape[:b]) != tuple(x.shape[:b]):
            raise TacticRefusal("GatherND indices that do not fit the data: the host tactic reports it")
        batch = int(np.prod(x.shape[:b], dtype=np.int64))
        inner = int(np.prod(x.shape[b + m:], dtype=np.int64))
        dims = [int(d) for d in x.shape[b:b + m]]
        if m == 0:
            raise TacticRefusal("GatherND with empty index tuples runs on the host")
        nidx = idx.size // max(batch * m, 1)
        shape = tuple(idx.shape[:-1]) + tuple(x.shape[b + m:])
        out = out_array(outputs, 0, shape, x.dtype)
        g = np.zeros(13, dtype=np.int64)
        g[0], g[1], g[2], g[3], g[4] = batch, nidx, m, inner, int(np.prod(dims, dtype=np.int64))
        g[5:5 + m] = dims
        if out.size:
            launch(kernel(SRC, f"gathernd_{sfx}"), grid_for(out.size), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.uint64(idx.ptr), g])
        return out


def _scalar_k(op, inputs) -> int:
    """TopK's k: the param, or input 1 (downloaded: one sync)."""
    if len(inputs) > 1 and inputs[1] is not None:
        return int(np.asarray(to_host(inputs[1])).reshape(-1)[0])
    return int(op.params["k"])


_RANK_WORK = 1 << 36   # comparisons a rank-counting launch may do before the host's sort is the better choice


@_register
class GpuTopK(Tactic):
    """TopK by rank counting: every element counts the elements that come before it (shared-memory tiles), and
    those ranked below k write themselves. Order as the CPU's stable sort: MAX descending with NaN first, MIN
    ascending with NaN last, equal values lower index first. float32, float16, int32, int64."""

    kind, name = "TopK", "nvrtc-rank"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        c = code(x)
        if c == "b":
            raise TacticRefusal("TopK of booleans runs on the host")
        k = _scalar_k(op, inputs)
        axis = _axis(op.params.get("axis", -1), x.ndim)
        if not 0 <= axis < x.ndim:
            raise TacticRefusal("axis out of range: the host tactic reports it")
        n = x.shape[axis]
        if not 0 <= k <= n:
            raise ExecutionError(f"TopK '{op.name}': k={k} is outside 0..{n} (the size of axis {axis} of input "
                                 f"shape {list(x.shape)})")
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        rows = outer * inner
        if rows * n * n > _RANK_WORK or (n + 255) // 256 > 65535 or rows >= 2 ** 31:
            raise TacticRefusal(f"TopK over {rows} rows of {n}: the host's sort is faster")
        shape = list(x.shape)
        shape[axis] = k
        vals = out_array(outputs, 0, shape, x.dtype)
        idx = out_array(outputs, 1, shape, np.int64)
        if k and rows:
            mode = 0 if op.params.get("op", "MAX") == "MAX" else 1
            launch(kernel(SRC, f"rank_{c}"), (rows, (n + 255) // 256, 1), _BLOCK,
                   [np.uint64(x.ptr), np.uint64(vals.ptr), np.uint64(idx.ptr), np.uint64(0), np.uint64(0),
                    np.int64(rows), np.int64(n), np.int64(inner), np.int64(k), np.int32(mode), np.uint64(0)])
        return [vals, idx]


_NZ_MASK = {1: np.uint8(0xFF), 2: np.uint16(0xFFFF), 4: np.uint32(0xFFFFFFFF), 8: np.uint64(0xFFFFFFFFFFFFFFFF)}
_NZ_FLOAT_MASK = {2: np.uint16(0x7FFF), 4: np.uint32(0x7FFFFFFF), 8: np.uint64(0x7FFFFFFFFFFFFFFF)}


@_register
class GpuNonZero(Tactic):
    """NonZero: a count pass per block of 256 elements, the counts downloaded (one sync) and scanned, then an
    ordered fill (warp ballots) of the int64 coordinates [rank, count] in row-major order. Floats: -0 is zero,
    NaN is not."""

    kind, name = "NonZero", "nvrtc-scan"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        if not isinstance(x, GpuArray) or x.dtype.itemsize not in _NZ_MASK or x.ndim > 8:
            raise TacticRefusal(f"NonZero of {getattr(x, 'dtype', x)} runs on the host")
        is_float = x.dtype.kind == "f" or x.dtype.name == "bfloat16"
        if x.dtype.kind not in "biu" and not is_float:
            raise TacticRefusal(f"NonZero of {x.dtype} runs on the host")
        mask = (_NZ_FLOAT_MASK if is_float else _NZ_MASK)[x.dtype.itemsize]
        if x.ndim == 0:
            return [out_array(outputs, 0, (0, int(bool(to_host(x)))), np.int64)]
        n = x.size
        blocks = (n + 255) // 256
        counts = GpuArray((max(blocks, 1),), np.int32)
        if n:
            launch(kernel(SRC, f"nz_count_{x.dtype.itemsize}"), (blocks, 1, 1), _BLOCK,
                   [np.uint64(counts.ptr), np.uint64(x.ptr), np.int64(n), mask])
        host = to_host(counts)[:blocks].astype(np.int64)
        total = int(host.sum())
        out = out_array(outputs, 0, (x.ndim, total), np.int64)
        if total:
            offs = GpuArray.from_host(np.concatenate([[0], np.cumsum(host)[:-1]]).astype(np.int64))
            dims = np.zeros(10, dtype=np.int64)
            dims[0], dims[1] = x.ndim, total
            dims[2:2 + x.ndim] = x.shape
            launch(kernel(SRC, f"nz_fill_{x.dtype.itemsize}"), (blocks, 1, 1), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(n), mask, np.uint64(offs.ptr), dims])
        return [out]


_NMS_SCRATCH = 2 << 30   # bytes of IoU bitmask one NMS layer may use before the host's clustered pass is better


def _opt_scalar(inputs, i, dtype):
    """Input i as a device scalar of `dtype`, or None where absent or empty (the CPU plugin's defaults)."""
    v = inputs[i] if len(inputs) > i else None
    if v is None:
        return None
    v = on_device(v)
    if not isinstance(v, GpuArray) or v.size == 0:
        return None
    if v.dtype != dtype:
        raise TacticRefusal(f"NMS scalar input {i} of type {v.dtype} runs on the host")
    return v


@_register
class GpuNonMaxSuppression(Tactic):
    """The NonMaxSuppression plugin on the GPU: per (batch, class) the candidates above the score threshold are
    ranked by score (descending, stable, NaN last), an IoU bitmask of every ordered pair is built in parallel
    (float64, as the CPU plugin computes IoU), and one block per class walks it greedily, 64 candidates at a time,
    up to max_output_boxes.
    The kept counts are downloaded (one sync) to size the [n, 3] int64 output."""

    kind, name = "Plugin", "nvrtc-nms"

    def supports(self, op, input_shapes):
        if op.params.get("plugin_type") != "NonMaxSuppression":
            return f"plugin {op.params.get('plugin_type')} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if op.params.get("plugin_type") != "NonMaxSuppression":
            raise TacticRefusal(f"plugin {op.params.get('plugin_type')} runs on the host")
        boxes, scores = on_device(inputs[0]), on_device(inputs[1])
        c = code(boxes)
        if c not in ("f32", "f16") or scores.dtype != boxes.dtype or boxes.ndim != 3 or scores.ndim != 3 \
                or boxes.shape[2] != 4 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise TacticRefusal("NMS inputs outside [B, n, 4] / [B, C, n] float32/float16 run on the host")
        max_out = _opt_scalar(inputs, 2, np.int64)
        iou_thr = _opt_scalar(inputs, 3, np.float32)
        score_thr = _opt_scalar(inputs, 4, np.float32)
        fields = dict(op.params.get("fields") or {})
        fields.update(op.weights or {})
        center = int(np.asarray(fields.get("center_point_box", 0)).reshape(-1)[0])
        B, C, n = scores.shape
        bc = B * C
        words = (n + 63) // 64
        if not (n and bc and max_out is not None):
            return [out_array(outputs, 0, (0, 3), np.int64)]
        if bc * n * words * 8 > _NMS_SCRATCH or bc > 65535 or words * 8 > 48 * 1024 or n >= 2 ** 31:
            raise TacticRefusal(f"NMS of {bc} classes x {n} boxes: the host's clustered pass is the better choice")
        ctx = context()
        count = GpuArray((bc,), np.int32)
        ctx.memset0(count.ptr, count.nbytes)
        order = GpuArray((bc, n), np.int32)
        launch(kernel(SRC, f"rank_{c}"), (bc, (n + 255) // 256, 1), _BLOCK,
               [np.uint64(scores.ptr), np.uint64(0), np.uint64(0), np.uint64(order.ptr), np.uint64(count.ptr),
                np.int64(bc), np.int64(n), np.int64(1), np.int64(n), np.int32(2), ptr(score_thr)])
        mask = GpuArray((bc, n, words), np.uint64)
        launch(kernel(SRC, f"nms_mask_{c}"), (words, (n + 63) // 64, bc), (64, 1, 1),
               [np.uint64(mask.ptr), np.uint64(boxes.ptr), np.uint64(order.ptr), np.uint64(count.ptr), np.int64(C),
                np.int64(n), np.int64(words), np.int32(center), ptr(iou_thr)])
        kept = GpuArray((bc, n), np.int32)
        nkept = GpuArray((bc,), np.int32)
        launch(kernel(SRC, "nms_scan"), (bc, 1, 1), _BLOCK,
               [np.uint64(kept.ptr), np.uint64(nkept.ptr), np.uint64(mask.ptr), np.uint64(order.ptr),
                np.uint64(count.ptr), np.int64(n), np.int64(words), ptr(max_out)], shared=words * 8)
        total = int(to_host(nkept).astype(np.int64).sum())
        out = out_array(outputs, 0, (total, 3), np.int64)
        if total:
            launch(kernel(SRC, "nms_rows"), (bc, 1, 1), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(kept.ptr), np.uint64(nkept.ptr), np.int64(C), np.int64(n)])
        return [out]


def _rows(shape, axis):
    """(outer, n, inner) of a tensor viewed along `axis`."""
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


@_register
class GpuArgReduce(Tactic):
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
            launch(kernel(SRC, f"argreduce_{c}"), grid_for(out.size), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(p.get("op", "MAX") != "MAX"), np.int32(bool(p.get("select_last_index")))])
        return [out]


_IDENT = {"f32": (np.float32(0), np.float32(1)), "f16": (np.float16(0).view(np.uint16), np.float16(1).view(np.uint16)),
          "i64": (np.int64(0), np.int64(1)), "i32": (np.int32(0), np.int32(1))}


@_register
class GpuCumulative(Tactic):
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
            launch(kernel(SRC, f"cumulative_{c}"), grid_for(outer * inner), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(red), np.int32(bool(p.get("exclusive"))), np.int32(bool(p.get("reverse"))),
                    _IDENT[c][red - 1]])
        return [out]


_RED = {"SUM": 1, "PROD": 2, "MAX": 3, "MIN": 4}


@_register
class GpuIntReduce(Tactic):
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
            launch(kernel(SRC, f"ireduce_{c}"), grid_for(out.size), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(outer), np.int64(n), np.int64(inner),
                    np.int32(red), ident])
        return [out]


@_register
class GpuOneHot(Tactic):
    """OneHot: values[1] where the index (negative + depth) equals the position along the new axis, else values[0].
    depth is downloaded (one sync: it sizes the output)."""

    kind, name = "OneHot", "nvrtc-index"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        idx, values = on_device(inputs[0]), on_device(inputs[2])
        ic = {"int64": "i64", "int32": "i32", "float32": "f32"}.get(getattr(idx, "dtype", np.dtype("O")).name)
        if ic is None or not isinstance(values, GpuArray) or values.size != 2 \
                or values.dtype.itemsize not in (1, 2, 4, 8):
            raise TacticRefusal("OneHot of these index / value types runs on the host")
        depth = int(np.asarray(to_host(inputs[1])).reshape(-1)[0])
        if depth < 0:
            raise TacticRefusal("a negative depth: the host tactic reports it")
        axis = int(op.params.get("axis", -1))
        axis = axis + idx.ndim + 1 if axis < 0 else axis
        if not 0 <= axis <= idx.ndim:
            raise TacticRefusal("axis out of range: the host tactic reports it")
        shape = list(idx.shape[:axis]) + [depth] + list(idx.shape[axis:])
        from native.limits import check_size
        check_size(op, shape, values.dtype.itemsize)
        outer = int(np.prod(idx.shape[:axis], dtype=np.int64))
        inner = int(np.prod(idx.shape[axis:], dtype=np.int64))
        out = out_array(outputs, 0, shape, values.dtype)
        if out.size:
            launch(kernel(SRC, f"onehot_{ic}_{values.dtype.itemsize}"), grid_for(out.size), _BLOCK,
                   [np.uint64(out.ptr), np.uint64(idx.ptr), np.uint64(values.ptr), np.int64(outer), np.int64(depth),
                    np.int64(inner)])
        return [out]


_SCATTER_WORK = 1 << 34   # update pairs compared before the host's sequential scatter is the better choice


@_register
class GpuScatter(Tactic):
    """ScatterND and ScatterElements with reductions none / add / mul / max / min, in the CPU's sequential order:
    the first update of each destination applies all of that destination's updates in index order (so duplicate
    indices give the CPU's answer bit for bit: the last write wins, float sums round in the same order)."""

    kind, name = "Scatter", "nvrtc-ordered"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        data, idx, upd = (on_device(x) for x in inputs[:3])
        if not all(isinstance(v, GpuArray) for v in (data, idx, upd)) or idx.dtype not in (np.int64, np.int32) \
                or upd.dtype != data.dtype:
            raise TacticRefusal("Scatter of these types runs on the host")
        ic = "i64" if idx.dtype == np.int64 else "i32"
        red = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}.get(op.params.get("reduction", "none") or "none")
        c = _CODE.get(data.dtype.name)
        if red is None or (red and c not in ("f32", "f16", "i64", "i32")):
            raise TacticRefusal(f"scatter reduction {op.params.get('reduction')} on {data.dtype} runs on the host")
        out = out_array(outputs, 0, data.shape, data.dtype)
        if out.ptr != data.ptr:
            context().copy(out.ptr, data.ptr, data.nbytes)
        if op.params.get("mode", "ND") == "ELEMENT":
            axis = _axis(op.params.get("axis", 0), data.ndim)
            if idx.ndim != data.ndim or tuple(upd.shape) != tuple(idx.shape) or data.ndim > 8 \
                    or not 0 <= axis < data.ndim \
                    or any(i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
                raise TacticRefusal("ScatterElements with broadcast updates runs on the host")
            nupd, inner = idx.size, 1
            s = np.zeros(20, dtype=np.int64)
            s[0], s[1], s[2], s[3] = idx.ndim, idx.size, axis, data.shape[axis]
            s[4:4 + idx.ndim] = idx.shape
            s[12:12 + idx.ndim] = _strides(data.shape)
            dest_fn = f"scatter_dest_el_{ic}"
        else:
            m = idx.shape[-1] if idx.ndim else 0
            if idx.ndim == 0 or m == 0 or m > 8 or m > data.ndim \
                    or tuple(upd.shape) != tuple(idx.shape[:-1]) + tuple(data.shape[m:]):
                raise TacticRefusal("ScatterND with broadcast updates runs on the host")
            nupd = idx.size // m
            inner = int(np.prod(data.shape[m:], dtype=np.int64))
            s = np.zeros(10, dtype=np.int64)
            s[0], s[1] = nupd, m
            s[2:2 + m] = data.shape[:m]
            dest_fn = f"scatter_dest_nd_{ic}"
        if nupd * nupd * max(inner, 1) > _SCATTER_WORK:
            raise TacticRefusal(f"Scatter of {nupd} updates: the host's sequential pass is faster")
        if nupd == 0 or inner == 0:
            return [out]
        dest = GpuArray((nupd,), np.int64)
        head = GpuArray((nupd,), np.uint8)
        launch(kernel(SRC, dest_fn), grid_for(nupd), _BLOCK, [np.uint64(dest.ptr), np.uint64(idx.ptr), s])
        launch(kernel(SRC, "scatter_heads"), grid_for(nupd), _BLOCK,
               [np.uint64(head.ptr), np.uint64(dest.ptr), np.int64(nupd)])
        if c in ("f32", "f16", "i64", "i32"):
            fn, args = f"scatter_apply_{c}", [np.int32(red)]
        elif data.dtype.itemsize in (1, 2):
            fn, args = f"scatter_copy_{data.dtype.itemsize}", []
        else:
            raise TacticRefusal(f"Scatter of {data.dtype} runs on the host")
        launch(kernel(SRC, fn), grid_for(nupd * inner), _BLOCK,
               [np.uint64(out.ptr), np.uint64(upd.ptr), np.uint64(dest.ptr), np.uint64(head.ptr), np.int64(nupd),
                np.int64(inner)] + args)
        return [out]


@_register
class GpuSelect1(Tactic):
    """Select on 1-byte values (bool, int8, uint8, fp8); the wider types run on tensor.py's select kernels."""

    kind, name = "Select", "nvrtc-select1"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.tensor import select
        cnd, a, b = (on_device(x) for x in inputs[:3])
        if not all(isinstance(v, GpuArray) for v in (cnd, a, b)) or cnd.dtype != np.bool_ or a.dtype != b.dtype \
                or a.dtype.itemsize != 1:
            raise TacticRefusal("Select of these types runs on another kernel or the host")
        return [select(cnd, a, b, outputs, SRC)]


_VIEW_PLUGINS = ("Squeeze", "Unsqueeze")


@_register
class GpuShapePlugin(Tactic):
    """The Squeeze / Unsqueeze plugins (axes known only at run time, as in ssdlite320, ppocr_v4_rec, silero_vad):
    a reshaped view of the input, no kernel (axes given as a tensor are downloaded: one sync)."""

    kind, name = "Plugin", "device-view"
    writes_outputs = False

    def supports(self, op, input_shapes):
        if op.params.get("plugin_type") not in _VIEW_PLUGINS:
            return f"plugin {op.params.get('plugin_type')} is not a view"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        kind = op.params.get("plugin_type")
        x = on_device(inputs[0])
        if kind not in _VIEW_PLUGINS or not isinstance(x, GpuArray):
            raise TacticRefusal(f"plugin {kind} runs on the host")
        fields = dict(op.params.get("fields") or {})
        axes = fields.get("axes")
        if len(inputs) > 1 and inputs[1] is not None:
            axes = [int(a) for a in np.asarray(to_host(inputs[1])).reshape(-1)]
        probe = np.broadcast_to(np.zeros((), np.uint8), x.shape)     # shape arithmetic without memory
        try:
            if kind == "Unsqueeze":
                shape = np.expand_dims(probe, tuple(axes)).shape
            elif axes is None:
                shape = [d for d in x.shape if d != 1]
            else:
                shape = np.squeeze(probe, axis=tuple(a + x.ndim if a < 0 else a for a in axes)).shape
        except (ValueError, TypeError, IndexError) as e:
            raise TacticRefusal(f"{kind} axes {axes} on shape {list(x.shape)}: the host plugin reports it ({e})") from None
        return [x.reshape(shape)]


_SHAPES: dict = {}   # shape tuple -> its int64 device array, uploaded once (read-only: no tactic writes its inputs)


@_register
class GpuShape(Tactic):
    """Shape (with start / end): the input's shape is known on the host, so the result is an int64 device array
    uploaded once per distinct shape and reused, with no copy or sync per execution (CUDA-graph safe)."""

    kind, name = "Shape", "device-shape"
    writes_outputs = False

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = inputs[0]
        if not hasattr(x, "shape"):
            raise TacticRefusal(f"Shape of {type(x).__name__} runs on the host")
        s = np.array(x.shape, dtype=np.int64)
        start, end = op.params.get("start", 0) or 0, op.params.get("end")
        s = s[start:end] if end is not None else s[start:]
        key = tuple(int(v) for v in s)
        hit = _SHAPES.get(key)
        if hit is None:
            if len(_SHAPES) >= 4096:
                _SHAPES.clear()
            hit = _SHAPES[key] = GpuArray.from_host(s)
        return [hit]
