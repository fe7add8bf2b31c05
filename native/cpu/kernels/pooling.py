"""CPU kernels: pooling (max / average / Lp, global), max-unpooling and max-RoI pooling.

Window reductions loop over the kernel taps only (k*k strided views of the padded input, each a whole-tensor
numpy op); average-pool divisors come from the same tap loop run on a small spatial mask.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import flat_taps, pad_input, resolve_pads, tap_slices
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import simple_tactic

# below this many elements touched a pool hand-off (25-100 us on a VM) costs more than the split saves
PARALLEL_MIN_ELEMENTS = 1 << 19
# output rows narrower than this (loops too short to vectorise) pool channel-last, given at least this many planes
# (one thread: YOLO SPPF's 5x5 / 1 on [128, 10, 10] 0.071 -> 0.029 ms; 17 planes of 21 columns lost, 10.9 -> 16.8 us)
CL_MAX_WIDTH, CL_MIN_PLANES = 16, 64
STACK_MAX_PLANE = 1024   # planes this small pool as one stacked plane where their windows allow (_max_pool_2d_jit)


def pool_geometry(params, spatial):
    nd = len(spatial)
    ks = list(params["window"])
    strides = list(params.get("strides") or [1] * nd)
    dil = list(params.get("dilations") or [1] * nd)
    pre, post = resolve_pads(params.get("auto_pad"), spatial, ks, strides, dil,
                             params.get("pre_padding"), params.get("post_padding"))
    out = []
    for i in range(nd):
        span = spatial[i] + pre[i] + post[i] - (ks[i] - 1) * dil[i] - 1
        if params.get("ceil_mode"):
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= spatial[i] + pre[i]:   # last window would start in the end padding
                o -= 1
        else:
            o = span // strides[i] + 1
        out.append(o)
    if (params.get("auto_pad") or "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-spatial[i] // strides[i]) for i in range(nd)]
    extra = [max(0, (out[i] - 1) * strides[i] + (ks[i] - 1) * dil[i] + 1 - (spatial[i] + pre[i] + post[i]))
             for i in range(nd)]
    return ks, strides, dil, pre, post, extra, out


def _pad(x, pre, post, extra, value):
    width = [(0, 0)] * (x.ndim - len(pre)) + [(a, b + e) for a, b, e in zip(pre, post, extra)]
    return np.pad(x, width, constant_values=value) if any(a or b for a, b in width) else x


def _min_value(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool(x, params, want_indices):
    spatial = list(x.shape[2:])
    ks, strides, dil, pre, post, extra, out = pool_geometry(params, spatial)
    if not want_indices and len(ks) == 2 and x.ndim == 4:
        return [_max_pool_2d(x, ks, strides, dil, pre, [b + e for b, e in zip(post, extra)], out)]
    xp = _pad(x, pre, post, extra, _min_value(x.dtype))
    if not want_indices and len(ks) == 2 and x.ndim == 4:
        flat = flat_taps(np.ascontiguousarray(xp), ks, strides, dil, out)
        if flat is not None:
            views, crop = flat
            acc = views[0].copy()
            for v in views[1:]:
                np.maximum(acc, v, out=acc)
            return [crop(acc)]
    lead = (slice(None), slice(None))
    y = best_tap = None
    for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
        view = xp[lead + tap_slices(taps, dil, strides, out)]
        if y is None:
            y = view.copy()
            best_tap = np.zeros(y.shape, np.int64) if want_indices else None
            continue
        if want_indices:
            better = view > y
            best_tap[better] = t
            np.copyto(y, view, where=better)
        else:
            np.maximum(y, view, out=y)
    if not want_indices:
        return [y]
    tap_idx = np.unravel_index(best_tap, ks)
    pos = []
    for i in range(len(ks)):
        o = np.arange(out[i]).reshape((-1,) + (1,) * (len(ks) - 1 - i))
        pos.append(o * strides[i] + tap_idx[i] * dil[i] - pre[i])
    n, c = x.shape[:2]
    base = (np.arange(n).reshape(-1, 1) * c + np.arange(c)).reshape((n, c) + (1,) * len(ks))
    if params.get("storage_order", 0) == 1 and len(ks) == 2:
        flat = (base * spatial[1] + pos[1]) * spatial[0] + pos[0]
    else:
        flat = base
        for i in range(len(ks)):
            flat = flat * spatial[i] + pos[i]
    return [y, flat.astype(np.int64)]


def _max_pool_2d(x, ks, strides, dil, pre, post, out):
    """Separable 2-D max pooling: max over the kw column taps into [.., Hp, Wo], then over the kh row taps;
    (kw-1) + (kh-1) whole-slab np.maximum calls instead of kh*kw, split over channels on the thread pool."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = ks, strides, dil, out
    n, c = x.shape[:2]
    fast = jit.kernel("max_pool_2d") if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else None
    if fast is not None:
        return _max_pool_2d_jit(fast, x, ks, strides, dil, pre, out)
    xp = pad_input(x, pre, post, _min_value(x.dtype)).reshape((n * c,) + tuple(s + a + b for s, a, b in
                                                                               zip(x.shape[2:], pre, post)))
    hp = xp.shape[1]
    y = np.empty((n * c, ho, wo), x.dtype)

    def chunk(rng):
        c0, c1 = rng
        src = xp[c0:c1]
        cols = np.empty((c1 - c0, hp, wo), x.dtype)
        np.copyto(cols, src[:, :, 0:sw * (wo - 1) + 1:sw])
        for j in range(1, kw):
            np.maximum(cols, src[:, :, j * dw:j * dw + sw * (wo - 1) + 1:sw], out=cols)
        dst = y[c0:c1]

        def rows(i):
            return cols[:, i * dh:i * dh + sh * (ho - 1) + 1:sh]
        if kh == 1:
            np.copyto(dst, rows(0))
            return
        np.maximum(rows(0), rows(1), out=dst)
        for i in range(2, kh):
            np.maximum(dst, rows(i), out=dst)
    work = n * c * hp * wo * kw + y.size * kh  # elements the two max passes touch
    parallel_for(chunk, split(n * c, num_threads() if work >= PARALLEL_MIN_ELEMENTS else 1))
    return y.reshape(n, c, ho, wo)


def _max_pool_2d_jit(fast, x, ks, strides, dil, pre, out):
    """_max_pool_2d's floats in one compiled pass per plane (native/cpu/jit_pool.py): no padded copy, no
    temporaries; planes split over the pool as the numpy path splits them."""
    n, c, h, w = x.shape
    xs = np.ascontiguousarray(x).reshape(n * c, h, w)
    y = np.empty((n * c,) + tuple(out), x.dtype)
    work = n * c * h * out[1] * ks[1] + y.size * ks[0]
    threads = num_threads() if work >= PARALLEL_MIN_ELEMENTS else 1
    if threads == 1 and pre[0] == 0 and out[0] * strides[0] == h and (ks[0] - 1) * dil[0] < strides[0] \
            and h * w <= STACK_MAX_PLANE:
        # windows that tile the planes' rows exactly, no row padding: the planes stacked into one tall plane have
        # the same windows (none reaches into the next plane), in one call instead of a short loop per plane
        # (PaddleOCR's classifier: a 2x2 / 2 pool of 200 [2, 96] planes, with jit_pool's 2x2 loops: 30 -> 8 us)
        fast(xs.reshape(1, n * c * h, w), y.reshape(1, n * c * out[0], out[1]),
             np.empty((n * c * h, out[1]), x.dtype), 0, 1, *ks, *strides, *dil, *pre)
        return y.reshape(n, c, *out)

    narrow = _channel_last() if out[1] < CL_MAX_WIDTH and n * c >= CL_MIN_PLANES else None
    if narrow is not None:
        def chunk(rng):
            narrow(xs, y, rng[0], rng[1], *ks, *strides, *dil, *pre)
    else:
        def chunk(rng):
            fast(xs, y, np.empty((h, out[1]), x.dtype), rng[0], rng[1], *ks, *strides, *dil, *pre)
    parallel_for(chunk, split(n * c, threads))
    return y.reshape(n, c, *out)


def _channel_last():
    """jit_pool.max_pool_2d_cl (max_pool_2d's floats over planes turned channel-last) where numba runs, else None."""
    try:
        return jit.kernel("max_pool_2d_cl")
    except Exception:  # noqa: BLE001 - any failure to compile means the per-plane loops
        return None


def _window_sum(xp, ks, dil, strides, out, dtype):
    lead = (slice(None),) * (xp.ndim - len(ks))
    acc = None
    for taps in itertools.product(*[range(k) for k in ks]):
        view = xp[lead + tap_slices(taps, dil, strides, out)]
        if acc is None:
            acc = view.astype(dtype, copy=True)
        else:
            acc += view
    return acc


def _avg_pool(x, params):
    spatial = list(x.shape[2:])
    ks, strides, dil, pre, post, extra, out = pool_geometry(params, spatial)
    xp = _pad(x, pre, post, extra, 0)
    acc = _window_sum(xp, ks, dil, strides, out, x.dtype)
    mask = np.ones(spatial, dtype=np.float64)
    if params.get("average_count_excludes_padding", True):
        mask = _pad(mask, pre, post, extra, 0)
    else:
        mask = _pad(np.pad(mask, list(zip(pre, post)), constant_values=1), [0] * len(ks), [0] * len(ks), extra, 0)
    count = _window_sum(mask, ks, dil, strides, out, np.float64)
    return [(acc / np.maximum(count, 1)).astype(x.dtype)]


def _lp_pool(x, params):
    p = float(params.get("p", 2))
    spatial = list(x.shape[2:])
    ks, strides, dil, pre, post, extra, out = pool_geometry(params, spatial)
    xp = _pad(np.abs(x) ** p, pre, post, extra, 0)
    acc = _window_sum(xp, ks, dil, strides, out, x.dtype)
    return [(acc ** (1.0 / p)).astype(x.dtype)]


def _global(x, params):
    axes = tuple(range(2, x.ndim))
    kind = params.get("type", "MAX")
    if kind == "MAX":
        return [np.max(x, axis=axes, keepdims=True)]
    if kind == "AVERAGE":   # np.mean's own steps (a float64 add.reduce, then true_divide by the count as an intp)
        # without its Python wrapper: the same values, ~10 us less per squeeze-excite
        s = np.add.reduce(x, axes, np.float64, None, True)
        np.true_divide(s, np.intp(math.prod(x.shape[2:])), out=s, casting="unsafe")
        return [s.astype(x.dtype)]
    p = float(params.get("p", 2))
    return [(np.sum(np.abs(x) ** p, axis=axes, keepdims=True) ** (1.0 / p)).astype(x.dtype)]


def _max_unpool(x, indices, out_shape, params):
    spatial = list(x.shape[2:])
    nd = len(spatial)
    ks = list(params["window"])
    strides = list(params.get("strides") or [1] * nd)
    pre = list(params.get("pre_padding") or [0] * nd)
    post = list(params.get("post_padding") or [0] * nd)
    default = list(x.shape[:2]) + [(spatial[i] - 1) * strides[i] + ks[i] - pre[i] - post[i] for i in range(nd)]
    out_shape = default if out_shape is None else [int(v) for v in out_shape]
    idx = np.asarray(indices).reshape(-1)
    if out_shape != default:   # indices address the default-shaped tensor: re-address them in the requested one
        idx = np.ravel_multi_index(np.unravel_index(idx, default), out_shape)
    y = np.zeros(int(np.prod(out_shape)), dtype=x.dtype)
    y[idx] = x.reshape(-1)
    return [y.reshape(out_shape)]


def _max_roi_pool(x, rois, params):
    ph, pw = params["window"]
    scale = float(params.get("spatial_scale", 1.0))
    n_rois = rois.shape[0]
    c, h, w = x.shape[1:]
    y = np.zeros((n_rois, c, ph, pw), dtype=x.dtype)
    for r in range(n_rois):            # loops over boxes and output bins only
        b = int(rois[r, 0])
        x1, y1, x2, y2 = [int(np.round(v * scale)) for v in rois[r, 1:5]]
        rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i in range(ph):
            hs = min(max(int(np.floor(i * rh / ph)) + y1, 0), h)
            he = min(max(int(np.ceil((i + 1) * rh / ph)) + y1, 0), h)
            for j in range(pw):
                ws = min(max(int(np.floor(j * rw / pw)) + x1, 0), w)
                we = min(max(int(np.ceil((j + 1) * rw / pw)) + x1, 0), w)
                if he > hs and we > ws:
                    y[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
    return [y]


@simple_tactic("Pooling", name="strided-taps", honours=("post_ops",))
def pooling(op, inputs):
    """Max / average / Lp pooling over strided tap views; global pooling as a reduction. An activation the builder
    moved past a max pool (fusion_pool.py) runs as the post-op, in place on the pooled map."""
    outs = _pool(op, inputs)
    if op.params.get("post_ops"):
        outs[0] = apply_post_ops(outs[0], op, inputs)
    return outs


def _pool(op, inputs):
    x = np.asarray(inputs[0])
    p = op.params
    kind = p.get("type", "MAX")
    if kind == "MAX_UNPOOL":
        out_shape = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        return _max_unpool(x, inputs[1], None if out_shape is None else np.asarray(out_shape).tolist(), p)
    if kind == "MAX_ROI":
        return _max_roi_pool(x, np.asarray(inputs[1]), p)
    if p.get("global"):
        return _global(x, p)
    if kind == "MAX":
        return _max_pool(x, p, p.get("num_outputs", 1) > 1)
    if kind == "AVERAGE":
        return _avg_pool(x, p)
    if kind == "LP":
        return _lp_pool(x, p)
    raise ValueError(f"unknown pooling type {kind!r}")
