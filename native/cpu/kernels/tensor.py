"""CPU kernels: data movement (Shuffle, Slice, Concatenation, Split, Gather, Scatter, Padding, Fill, TopK, NonZero,
OneHot, Tile, Expand, Range) and the built-in plugins Trilu, Unique, ReverseSequence, CenterCropPad."""
import numpy as np

from native.errors import ExecutionError
from native.limits import check_size
from native.plugins import Plugin, register_plugin
from native.tactics import simple_tactic


def _ints(v):
    a = np.asarray(v).reshape(-1)
    if a.dtype.kind in "iu":
        return a.tolist()   # Python ints already, without a numpy scalar per element
    return [int(x) for x in a]


def _arg(inputs, i):
    return inputs[i] if len(inputs) > i else None


@simple_tactic("Shuffle")
def shuffle(op, inputs):
    """first_transpose -> reshape (reshape_dims or input 1; 0 copies the dim when zero_is_placeholder) ->
    second_transpose. With the dims in params (Flatten, Unsqueeze, Squeeze, Transpose, a Reshape of a constant
    shape) the steps are kept per input shape (the permutations as tuples, the reshape's concrete shape): a call
    is the same transpose / reshape / transpose of views, without the lookups and numpy's function dispatch."""
    x = inputs[0]
    if len(inputs) == 1 and type(x) is np.ndarray:
        held = op.__dict__.get("_shuffle")
        if held is not None and x.shape == held[0]:
            _, first, dims, second = held
            if first is not None:
                x = x.transpose(first)
            if dims is not None:
                x = x.reshape(dims)
            return [x if second is None else x.transpose(second)]
        y = _shuffle(op, inputs, x)[0]
        p = op.params
        first, second = p.get("first_transpose"), p.get("second_transpose")
        first = None if first is None else tuple(int(a) for a in first)
        second = None if second is None else tuple(int(a) for a in second)
        dims = None
        if p.get("reshape_dims") is not None:   # the reshape's result: y's shape before the second transpose
            dims = y.shape if second is None else tuple(y.shape[second.index(a)] for a in range(y.ndim))
        op.__dict__["_shuffle"] = (x.shape, first, dims, second)
        return [y]
    return _shuffle(op, inputs, x)


def _shuffle_view(op):
    """The held recipe as a compiled plan writes it out inline (runtime/compiled.py `_view_layer`): (input shape,
    [(ndarray method, argument)]), the same transpose / reshape / transpose as the held call; None before it is held."""
    held = op.__dict__.get("_shuffle")
    if held is None:
        return None
    shape, first, dims, second = held
    return shape, [(m, a) for m, a in (("transpose", first), ("reshape", dims), ("transpose", second)) if a is not None]


shuffle._view = _shuffle_view



def _shuffle(op, inputs, x):
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    p = op.params
    if p.get("first_transpose") is not None:
        x = np.transpose(x, p["first_transpose"])
    dims = inputs[1] if len(inputs) > 1 else None
    dims = p.get("reshape_dims") if dims is None else _ints(dims)
    if dims is not None:
        if p.get("zero_is_placeholder", True) and 0 in dims:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        if x.size == 0 and -1 in dims:
            dims = _infer_empty(x.shape, dims)
        x = x.reshape(dims)
    if p.get("second_transpose") is not None:
        x = np.transpose(x, p["second_transpose"])
    return [x]


def _infer_empty(shape, dims):
    """The -1 of a reshape of an empty tensor, which numpy cannot infer: the size it would have if every 0 dim
    were 1 (Flatten of (0, 4, 2) to [0, -1] is (0, 8)), else 0 when that does not give an empty shape (a reshape
    of (0, 4) to [-1, 2, 2] is (0, 2, 2); Flatten axis 0 of (0, 4) is (1, 0))."""
    known = int(np.prod([max(d, 1) for d in dims if d != -1]))
    whole = int(np.prod([max(d, 1) for d in shape]))
    guess = whole // known if known and whole % known == 0 else 0
    out = [guess if d == -1 else d for d in dims]
    if int(np.prod(out)) != 0:
        out = [0 if d == -1 else d for d in dims]
    return out


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


@simple_tactic("Slice")
def slice_(op, inputs):
    """ONNX slice semantics: negative starts/ends count from the end, then clamp per the step's sign. A view.
    With the bounds in params (constant operands, passes/fold.py) the index is worked out once per input shape."""
    x = inputs[0] if isinstance(inputs[0], np.ndarray) else np.asarray(inputs[0])
    if len(inputs) == 1:
        held = op.__dict__.get("_slice")
        if held is not None and held[0] == x.shape:
            return [x[held[1]]]
        index = _slice_index(op, x, [x])
        op.__dict__["_slice"] = (x.shape, index)
        return [x[index]]
    return [x[_slice_index(op, x, inputs)]]


def _slice_view(op):
    """The held index as a compiled plan writes it out inline (see _shuffle_view): (input shape, [("getitem",
    index)]); None before it is held."""
    held = op.__dict__.get("_slice")
    return None if held is None else (held[0], [("getitem", held[1])])


slice_._view = _slice_view


def _slice_index(op, x, inputs):
    p = op.params
    starts = _ints(inputs[1]) if _arg(inputs, 1) is not None else p["starts"]
    ends = _ints(inputs[2]) if _arg(inputs, 2) is not None else p["ends"]
    axes = _ints(inputs[3]) if _arg(inputs, 3) is not None else p.get("axes")
    steps = _ints(inputs[4]) if _arg(inputs, 4) is not None else p.get("steps")
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = a + x.ndim if a < 0 else a
        d = x.shape[a]
        if st == 0:
            raise ExecutionError(f"Slice '{op.name}': step 0 on axis {a}")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            index[a] = slice(_clamp(s, 0, d), _clamp(e, 0, d), st)
        else:
            s, e = _clamp(s, -1, d - 1), _clamp(e, -1, d - 1)
            index[a] = slice(0, 0) if s < 0 else slice(s, None if e < 0 else e, st)
    return tuple(index)


@simple_tactic("Concatenation", writes_outputs=True)
def concatenation(op, inputs, outputs=None):
    arrs = [np.asarray(a) for a in inputs if a is not None]
    if arrs[0].ndim == 0:
        return [np.stack(arrs)]
    if outputs is not None and outputs[0] is not None:   # straight into the planned arena view
        return [np.concatenate(arrs, axis=op.params.get("axis", 0), out=outputs[0])]
    return [np.concatenate(arrs, axis=op.params.get("axis", 0))]


@simple_tactic("Split")
def split(op, inputs):
    """Sizes from `split` or input 1; else `num_outputs` parts of ceil(n / parts) (the last one smaller)."""
    x = inputs[0] if type(inputs[0]) is np.ndarray else np.asarray(inputs[0])
    if len(inputs) == 1:   # sizes from params: the parts' indices once per input shape
        held = op.__dict__.get("_split")
        if held is None or held[0] != x.shape:
            held = op.__dict__["_split"] = (x.shape, _split_index(op, x, op.params.get("split")))
        return [x[i] for i in held[1]]
    return [x[i] for i in _split_index(op, x, _ints(inputs[1]) if _arg(inputs, 1) is not None
                                        else op.params.get("split"))]


def _split_index(op, x, sizes):
    axis = op.params.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    if sizes is None:
        n = int(op.params.get("num_outputs") or 1)
        d = x.shape[axis]
        chunk = -(-d // n)
        sizes = [min(chunk, max(d - i * chunk, 0)) for i in range(n)]
    index, out, start = [slice(None)] * x.ndim, [], 0
    for size in sizes:  # plain slicing: views, without np.split's per-call overhead
        index[axis] = slice(start, start + int(size))
        out.append(tuple(index))
        start += int(size)
    return out


def _fix_neg(idx, dim):
    idx = np.asarray(idx).astype(np.int64, copy=False)
    return np.where(idx < 0, idx + dim, idx)


@simple_tactic("Gather")
def gather(op, inputs):
    x, idx = inputs[0], inputs[1]
    if type(idx) is np.ndarray and idx.ndim == 0 and type(x) is np.ndarray:
        held = op.__dict__.get("_gather")   # one index on a DEFAULT axis: (x's shape, the leading slices, size)
        if held is not None and held[0] == x.shape and idx.dtype.kind in "iu":
            i = int(idx)
            if not -held[2] <= i < held[2]:
                raise IndexError(f"index {i} is out of bounds for axis {len(held[1])} with size {held[2]}")
            return [x[held[1] + (i, Ellipsis)]]
    x, idx = np.asarray(x), np.asarray(idx)
    mode = op.params.get("mode", "DEFAULT")
    if mode == "DEFAULT":
        axis = op.params.get("axis", 0)
        axis = axis + x.ndim if axis < 0 else axis
        if idx.ndim == 0 and idx.dtype.kind in "iu":   # one index (a state's layer, a shape's dim): a view
            i = int(idx)
            if not -x.shape[axis] <= i < x.shape[axis]:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {x.shape[axis]}")
            op.__dict__["_gather"] = (x.shape, (slice(None),) * axis, x.shape[axis])
            return [x[(slice(None),) * axis + (i, Ellipsis)]]   # (Ellipsis: a 0-d view, not a scalar)
        if idx.dtype.kind in "iu":   # np.take wraps a negative index once and raises past either end: Gather's rule
            return [np.take(x, idx, axis=axis)]
        return [np.asarray(np.take(x, _fix_neg(idx, x.shape[axis]), axis=axis))]
    if mode == "ELEMENT":
        axis = op.params.get("axis", 0)
        axis = axis + x.ndim if axis < 0 else axis
        return [np.take_along_axis(x, _fix_neg(idx, x.shape[axis]), axis=axis)]
    # ND with batch_dims
    b = op.params.get("batch_dims", 0)
    m = idx.shape[-1]
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xr = x.reshape((batch,) + x.shape[b:])
    ir = idx.reshape((batch, -1, m)).astype(np.int64)
    ir = np.where(ir < 0, ir + np.array(x.shape[b:b + m], np.int64), ir)
    bi = np.arange(batch)[:, None]
    res = xr[(bi,) + tuple(ir[..., j] for j in range(m))]
    return [res.reshape(idx.shape[:-1] + x.shape[b + m:])]


def _gather_view(op, idx):
    """Gather's held one-index view (see _shuffle_view) for an index the plan holds as a constant: (input shape,
    [("getitem", the index)]); None before it is held, or for another index (the kernel then checks it)."""
    held = op.__dict__.get("_gather")
    if held is None or type(idx) is not np.ndarray or idx.ndim != 0 or idx.dtype.kind not in "iu":
        return None
    i = int(idx)
    if not -held[2] <= i < held[2]:
        return None
    return held[0], [("getitem", held[1] + (i, Ellipsis))]


gather._view = _gather_view


_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@simple_tactic("Scatter")
def scatter(op, inputs):
    data, idx, upd = np.asarray(inputs[0]), np.asarray(inputs[1]), np.asarray(inputs[2])
    out = data.copy()
    red = op.params.get("reduction", "none") or "none"
    if op.params.get("mode", "ND") == "ELEMENT":
        axis = op.params.get("axis", 0)
        axis = axis + data.ndim if axis < 0 else axis
        grid = list(np.indices(idx.shape, sparse=True))
        grid[axis] = _fix_neg(idx, data.shape[axis])
        where = tuple(grid)
        upd = np.broadcast_to(upd, idx.shape)
    else:
        m = idx.shape[-1]
        ii = _fix_neg(idx, np.array(data.shape[:m], np.int64))
        where = tuple(ii[..., j] for j in range(m))
    if red == "none":
        out[where] = upd
    else:
        _REDUCE[red].at(out, where, upd)
    return [out]


@simple_tactic("Padding")
def padding(op, inputs):
    """pads [begin..., end...] for `axes` (all by default); negative pads crop; modes constant/reflect/edge/wrap.
    With pads, value and axes in params (constant operands, passes/fold.py) the geometry is worked out once per
    input shape and dtype."""
    x = inputs[0] if type(inputs[0]) is np.ndarray else np.asarray(inputs[0])
    p = op.params
    if len(inputs) == 1:
        held = op.__dict__.get("_pad")
        if held is None or held[0] != x.shape or held[1] != x.dtype:
            geo = _pad_geometry(op, x, list(p["pads"]), p.get("value", 0.0), p.get("axes"))
            held = op.__dict__["_pad"] = (x.shape, x.dtype) + geo + (_border_fills(x, *geo),)
        fill = held[6]
        if fill is not None:   # a constant or reflect pad: its output shape, interior and border indices kept
            shape, inner, borders, value = fill
            out = np.empty(shape, x.dtype)
            out[inner] = x
            for where, src in borders:
                out[where] = value if src is None else out[src]
            return [out]
        crop, width, mode, value = held[2:6]
    else:
        crop, width, mode, value = _pad_geometry(
            op, x, _ints(inputs[1]) if _arg(inputs, 1) is not None else list(p["pads"]),
            inputs[2] if _arg(inputs, 2) is not None else p.get("value", 0.0),
            _ints(inputs[3]) if _arg(inputs, 3) is not None else p.get("axes"))
    if crop is not None:
        x = x[crop]
    return [_pad_axes(x, width, mode, value)]


def _border_fills(x, crop, width, mode, value):
    """(output shape, interior index, per border (destination index, source index in the output or None for the
    fill value), fill value) of an uncropped constant or reflect pad that _pad_axes does itself, so a call is one
    empty, one copy and the border writes: _pad_axes' writes, in its order (the same values); else None."""
    if crop is not None or mode not in ("constant", "reflect") or not any(b or e for b, e in width) or \
            (mode == "reflect" and any((b or e) and (b >= d or e >= d) for d, (b, e) in zip(x.shape, width))):
        return None
    shape = tuple(d + b + e for d, (b, e) in zip(x.shape, width))
    borders = []
    for a, (b, e) in enumerate(width):
        lead = (slice(None),) * a
        d = x.shape[a]
        if b:
            borders.append((lead + (slice(0, b),), None if mode == "constant" else lead + (slice(2 * b, b, -1),)))
        if e:
            stop = b + d - 2 - e
            borders.append((lead + (slice(b + d, None),), None if mode == "constant" else
                            lead + (slice(b + d - 2, stop if stop >= 0 else None, -1),)))
    return shape, tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, width)), tuple(borders), value


def _pad_geometry(op, x, pads, value, axes):
    """(crop index or None, per-axis (begin, end) widths, numpy mode, fill value) of a Padding of `x`."""
    axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    n = len(axes)
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + n]]
    crop = None
    if any(b < 0 or e < 0 for b, e in width):
        crop = tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(width))
    shape = x[crop].shape if crop is not None else x.shape
    width = [(max(b, 0), max(e, 0)) for b, e in width]
    check_size(op, [d + b + e for d, (b, e) in zip(shape, width)], x.dtype.itemsize)
    mode = op.params.get("mode", "constant")
    if mode == "constant":
        v = np.asarray(value).reshape(-1)
        v = v[0] if v.size else 0
        return crop, width, "constant", np.asarray(v).astype(x.dtype)
    return crop, width, {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode], None


def _pad_axes(x, width, mode, value=None):
    """np.pad(x, width, mode) with the same values, without np.pad's per-call overhead (tens of microseconds,
    which a padded STFT frame of a few hundred samples pays many times over): one output buffer, the interior
    copied once, then each padded axis in turn fills its borders from what is already in place (as np.pad pads
    one axis after the other, so corners match). Reflect pads wider than the axis, and edge/wrap, go to np.pad."""
    if mode != "constant" and (mode != "reflect" or any((b or e) and (b >= d or e >= d)
                                                         for d, (b, e) in zip(x.shape, width))):
        return np.pad(x, width, mode=mode)
    if not any(b or e for b, e in width):
        return x.copy()
    shape = tuple(d + b + e for d, (b, e) in zip(x.shape, width))
    out = np.empty(shape, x.dtype)
    out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, width))] = x
    for a, (b, e) in enumerate(width):
        if not (b or e):
            continue
        d = x.shape[a]
        lead = (slice(None),) * a
        if mode == "constant":
            if b:
                out[lead + (slice(0, b),)] = value
            if e:
                out[lead + (slice(b + d, None),)] = value
        else:   # reflect about the first and last element: out[b - i] = out[b + i], out[b+d-1 + i] = out[b+d-1 - i]
            if b:
                out[lead + (slice(0, b),)] = out[lead + (slice(2 * b, b, -1),)]
            if e:
                stop = b + d - 2 - e
                out[lead + (slice(b + d, None),)] = out[lead + (slice(b + d - 2, stop if stop >= 0 else None, -1),)]
    return out


def _dtype(name, default=np.float32):
    if name is None:
        return np.dtype(default)
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@simple_tactic("Fill")
def fill(op, inputs):
    """CONSTANT (weights 'value'), EYE_LIKE (`k`), LINSPACE (alpha start, beta step), RANDOM_UNIFORM (alpha low,
    beta high), RANDOM_NORMAL (alpha mean, beta scale); *_LIKE variants take input 0's shape (and dtype)."""
    p = op.params
    kind = p.get("op", "CONSTANT")
    src = _arg(inputs, 0)
    if kind == "EYE_LIKE":
        x = np.asarray(src)
        dt = _dtype(p.get("dtype"), x.dtype)
        return [np.eye(x.shape[0], x.shape[1], k=int(p.get("k", 0)), dtype=dt)]
    if kind.endswith("_LIKE"):
        x = np.asarray(src)
        shape, dt = x.shape, _dtype(p.get("dtype"), x.dtype)
        kind = kind[:-5]
    else:
        shape = tuple(_ints(src)) if src is not None else tuple(p.get("shape") or ())
        dt = None
    made = dt if dt is not None else np.asarray(op.weights.get("value", 0.0)).dtype if kind == "CONSTANT" \
        else _dtype(p.get("dtype"))
    check_size(op, shape, made.itemsize)
    if kind == "CONSTANT":
        v = np.asarray(op.weights.get("value", np.zeros(1, np.float32))).reshape(-1)
        return [np.full(shape, v[0], dtype=v.dtype if dt is None else dt)]
    dt = _dtype(p.get("dtype")) if dt is None else dt
    alpha, beta = float(p.get("alpha", 0.0)), float(p.get("beta", 1.0))
    if kind == "LINSPACE":
        n = int(np.prod(shape, dtype=np.int64))
        return [(alpha + beta * np.arange(n)).reshape(shape).astype(dt)]
    seed = p.get("seed")
    rng = np.random.default_rng(None if seed is None else int(seed))
    if kind == "RANDOM_UNIFORM":
        return [rng.uniform(alpha, beta, shape).astype(dt)]
    if kind == "RANDOM_NORMAL":
        return [rng.normal(alpha, beta, shape).astype(dt)]
    raise ExecutionError(f"Fill '{op.name}': unsupported op {kind}")


@simple_tactic("TopK")
def topk(op, inputs):
    """Full stable sort along the axis; equal values keep the smaller index first."""
    x = np.asarray(inputs[0])
    k = int(np.asarray(inputs[1]).reshape(-1)[0]) if _arg(inputs, 1) is not None else int(op.params["k"])
    axis = op.params.get("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= k <= x.shape[axis]:   # k is data: a mutated k must not size an index array first
        raise ExecutionError(f"TopK '{op.name}': k={k} is outside 0..{x.shape[axis]} (the size of axis {axis} of "
                             f"input shape {list(x.shape)})")
    if op.params.get("op", "MAX") == "MAX":
        n = x.shape[axis]
        rev = np.flip(x, axis=axis)
        order = np.flip(np.argsort(rev, axis=axis, kind="stable"), axis=axis)
        idx = (n - 1 - order)
    else:
        idx = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, idx, axis=axis), idx]


@simple_tactic("NonZero")
def nonzero(op, inputs):
    x = np.asarray(inputs[0])
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


@simple_tactic("OneHot")
def onehot(op, inputs):
    idx = np.asarray(inputs[0])
    depth = int(np.asarray(inputs[1]).reshape(-1)[0])
    values = np.asarray(inputs[2]).reshape(-1)
    axis = op.params.get("axis", -1)
    axis = axis + idx.ndim + 1 if axis < 0 else axis
    ii = idx.astype(np.int64)
    ii = np.where(ii < 0, ii + depth, ii)
    ii = np.expand_dims(ii, axis)
    shape = [1] * (idx.ndim + 1)
    shape[axis] = depth
    check_size(op, ii.shape[:axis] + (max(depth, 0),) + ii.shape[axis + 1:], max(values.dtype.itemsize, 1))
    hot = np.arange(depth).reshape(shape) == ii
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


@simple_tactic("Tile")
def tile(op, inputs):
    x, reps = np.asarray(inputs[0]), _ints(inputs[1])
    if any(r < 0 for r in reps):
        raise ExecutionError(f"Tile '{op.name}': negative repeats {reps}")
    lead = [1] * max(len(reps) - x.ndim, 0) + list(x.shape)
    check_size(op, [d * r for d, r in zip(lead, [1] * max(x.ndim - len(reps), 0) + reps)], x.dtype.itemsize)
    return [np.tile(x, reps)]


@simple_tactic("Expand")
def expand(op, inputs):
    """x broadcast to the shape (a copy). The result shape is kept per (x's shape, shape) on the op: a run repeats
    neither numpy's broadcast_shapes nor the size check (~4 us of bert_mini's mask Expand, whose shape does not
    change: then x itself, as a Reshape hands back a view; the runtime tracks what aliases what)."""
    x = np.asarray(inputs[0])
    dims = tuple(_ints(inputs[1]))
    held = op.__dict__.get("_expand")
    if held is not None and held[0] == x.shape and held[1] == dims:
        shape = held[2]
    else:
        shape = np.broadcast_shapes(x.shape, dims)
        check_size(op, shape, x.dtype.itemsize)
        op.__dict__["_expand"] = (x.shape, dims, shape)
    if shape == x.shape:
        return [x]
    return [np.array(np.broadcast_to(x, shape))]


@simple_tactic("Range")
def range_(op, inputs):
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    count = np.ceil((float(limit) - float(start)) / float(delta))
    if not np.isfinite(count):
        raise ExecutionError(f"Range '{op.name}': start {start}, limit {limit}, delta {delta} give no finite length")
    n = max(int(count), 0)
    check_size(op, [n], start.dtype.itemsize)
    # opset 27: float16/bfloat16 compute in the stash type, float32 (TensorProto code 1) unless the model says so
    if start.dtype.itemsize == 2 and start.dtype.kind == "f" or start.dtype.name == "bfloat16":
        if int(op.params.get("stash_type", 1)) == 1:
            work = np.float32
            return [(work(start) + np.arange(n, dtype=work) * work(delta)).astype(start.dtype)]
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]


# --- built-in plugins for ops with no layer of their own -------------------------------------------------------

class TriluPlugin(Plugin):
    """Keep the upper (upper=1) or lower triangle of the last two dims, shifted by k (input 1)."""
    name = "Trilu"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        k = int(np.asarray(inputs[1]).reshape(-1)[0]) if _arg(inputs, 1) is not None else 0
        n, m = x.shape[-2:]
        r, c = np.arange(n)[:, None], np.arange(m)[None, :]
        keep = (c - r >= k) if fields.get("upper", 1) else (c - r <= k)
        return [np.where(keep, x, np.zeros((), x.dtype))]


class UniquePlugin(Plugin):
    """Unique values (flattened, or slices along `axis`); sorted or in first-occurrence order; outputs values,
    first indices, inverse indices, counts (int64)."""
    name = "Unique"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        axis = fields.get("axis")
        if axis is None:
            flat = x.reshape(-1)
            vals, first, inv, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
        else:
            axis = axis + x.ndim if axis < 0 else axis
            vals, first, inv, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                                 axis=axis)
        inv = inv.reshape(-1)
        if not fields.get("sorted", 1):
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            vals = np.take(vals, order, axis=0 if axis is None else axis)
            first, counts, inv = first[order], counts[order], rank[inv]
        return [vals, first.astype(np.int64), inv.astype(np.int64), counts.astype(np.int64)]


class ReverseSequencePlugin(Plugin):
    """Reverse the first seq_lens[b] steps along time_axis for every batch entry b."""
    name = "ReverseSequence"

    def enqueue(self, inputs, fields):
        x, lens = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
        ta, ba = fields.get("time_axis", 0), fields.get("batch_axis", 1)
        t = np.arange(x.shape[ta])
        shape = [1] * x.ndim
        shape[ta] = x.shape[ta]
        tt = t.reshape(shape)
        bshape = [1] * x.ndim
        bshape[ba] = x.shape[ba]
        ll = lens.reshape(bshape)
        src = np.where(tt < ll, ll - 1 - tt, tt)
        src = np.broadcast_to(src, np.broadcast_shapes(src.shape, [x.shape[i] if i in (ta, ba) else 1
                                                                    for i in range(x.ndim)]))
        src = np.broadcast_to(src, x.shape)
        return [np.take_along_axis(x, np.ascontiguousarray(src), axis=ta)]


class CenterCropPadPlugin(Plugin):
    """Center-crop or zero-pad the `axes` (all by default) to the sizes of input 1."""
    name = "CenterCropPad"

    def enqueue(self, inputs, fields):
        x, target = np.asarray(inputs[0]), _ints(inputs[1])
        axes = fields.get("axes")
        axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
        out = x
        for a, t in zip(axes, target):
            d = out.shape[a]
            if t < d:
                s = (d - t) // 2
                out = np.take(out, np.arange(s, s + t), axis=a)
            elif t > d:
                b = (t - d) // 2
                width = [(0, 0)] * out.ndim
                width[a] = (b, t - d - b)
                out = np.pad(out, width)
        return [out]


class SqueezePlugin(Plugin):
    """Squeeze with axes from input 1 or `axes` (None: every size-1 dim), for axes known only at run time."""
    name = "Squeeze"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        axes = _ints(inputs[1]) if _arg(inputs, 1) is not None else fields.get("axes")
        if axes is None:
            return [x.reshape([d for d in x.shape if d != 1])]
        axes = tuple(a + x.ndim if a < 0 else a for a in axes)
        shape = x.shape
        if len(set(axes)) == len(axes) and all(0 <= a < len(shape) and shape[a] == 1 for a in axes):
            return [x.reshape([d for i, d in enumerate(shape) if i not in axes])]   # np.squeeze's view, cheaper
        return [np.squeeze(x, axis=axes)]   # its error names the bad axis


class UnsqueezePlugin(Plugin):
    """Unsqueeze with axes (of the output) from input 1 or `axes`."""
    name = "Unsqueeze"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        axes = _ints(inputs[1]) if _arg(inputs, 1) is not None else fields.get("axes")
        rank = x.ndim + len(axes)
        norm = sorted(a + rank if a < 0 else a for a in axes)
        if len(set(norm)) == len(norm) and all(0 <= a < rank for a in norm):
            shape = list(x.shape)
            for a in norm:   # np.expand_dims's view, without its per-call overhead
                shape.insert(a, 1)
            return [x.reshape(shape)]
        return [np.expand_dims(x, tuple(axes))]   # its error names the bad axis


class DropoutPlugin(Plugin):
    """Dropout with ratio (input 1, default 0.5) and training_mode (input 2) known at run time: identity and an
    all-True mask when not training or ratio is 0; else a random keep-mask (seeded by `seed`) and x / (1 - ratio)."""
    name = "Dropout"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        ratio = float(np.asarray(inputs[1]).reshape(-1)[0]) if _arg(inputs, 1) is not None else 0.5
        training = bool(np.asarray(inputs[2]).reshape(-1)[0]) if _arg(inputs, 2) is not None else False
        if not training or ratio == 0.0:
            return [x, np.ones(x.shape, bool)]
        seed = fields.get("seed")
        mask = np.random.default_rng(None if seed is None else int(seed)).uniform(size=x.shape) >= ratio
        return [(x * mask / (1.0 - ratio)).astype(x.dtype), mask]


for _cls in (DropoutPlugin, SqueezePlugin, UnsqueezePlugin, TriluPlugin, UniquePlugin, ReverseSequencePlugin, CenterCropPadPlugin):
    register_plugin(_cls, override=True)
