"""CPU kernels: convolution and transposed convolution (N-d, NCHW-style layouts).

Convolution has three real tactics the builder times against each other:
  im2col-gemm  gather the kh*kw shifted views of the padded input into one column matrix and do one BLAS GEMM
               per batch item and group (handles everything: groups, dilations, strides, 1-D/2-D/3-D, integer);
  1x1-gemm     pointwise convolution as a direct GEMM on the (strided) input, no column matrix;
  depthwise    groups == channels == outputs: per-tap multiply-accumulate over shifted views (no GEMM).
Weights are pre-packed at build time in `prepare` ([g, M/g, C/g*k] contiguous for the GEMMs, [C, taps] for
depthwise). `run` also accepts unpacked weights (the builder's first run and constant folding use them).

2-D float convolutions (im2col-gemm, 1x1-gemm, depthwise) run through `conv2d_gemm` / `depthwise2d`: the output
is split into bands (rows, or output channels for small maps) over native/cpu/threads.py's pool, each band
builds a cache-sized patch matrix with one strided copy (large strided kernels copy from a phase-split input so
every copy is unit-stride) and runs single-threaded GEMMs straight into the output. The bias rides in the GEMM
(a ones row under the patch matrix, a bias column in the packed weights); activation and residual add run once
over the whole output after the GEMMs, in place (measured cheaper than per-band epilogues interleaved with the
GEMMs, and than separate layers). When the first post-op is SiLU the packed GEMM weights are pre-halved (exact)
so the GEMM yields z/2 and silu(z) = h + h*tanh(h) costs 3 passes. Other ranks / integer convs use the generic path.
"""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import Tactic, register_tactic

_as_strided = np.lib.stride_tricks.as_strided
_DW_BYTES = 1 << 18  # depthwise accumulator block (cache)
_COLS_BYTES = 1 << 20  # patch-matrix bytes per GEMM call: still in cache when the GEMM reads it
# below this many multiply-adds a layer runs on the calling thread: a parallel_for costs 25-100 us on a 2-vCPU VM
# (waking the pool thread, handing the GIL over, waking the caller again, and the worker starting late), more than
# the split saves below ~4M MACs of GEMM (~0.1 ms on one core). Paired A/B against 1M and 16M: ppocr_v4_det 5.7%
# faster than at 16M, yolov8n 2% faster than at 1M.
PARALLEL_MIN_MACS = 1 << 22
PARALLEL_MIN_DW_MACS = 1 << 18  # depthwise: numpy multiply-adds run ~1 ns per MAC, so the bar is far lower


# geometry ----------------------------------------------------------------------------------------------------

def resolve_pads(auto_pad, in_sizes, kernel, strides, dilations, pre, post):
    """Begin/end pads per spatial dim, resolving ONNX auto_pad (SAME_UPPER/SAME_LOWER/VALID) from the input size."""
    nd = len(in_sizes)
    auto_pad = auto_pad or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pre, post = [], []
        for i in range(nd):
            out = -(-in_sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
            small = total // 2
            pre.append(small if auto_pad == "SAME_UPPER" else total - small)
            post.append(total - pre[-1])
        return pre, post
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    return list(pre or [0] * nd), list(post or [0] * nd)


def geometry(params, x_shape, kernel):
    """(strides, dilations, pads_begin, pads_end, output sizes) for a convolution over x_shape's spatial dims."""
    spatial = list(x_shape[2:])
    nd = len(spatial)
    strides = list(params.get("strides") or [1] * nd)
    dil = list(params.get("dilations") or [1] * nd)
    pre, post = resolve_pads(params.get("auto_pad"), spatial, kernel, strides, dil,
                             params.get("pre_padding"), params.get("post_padding"))
    out = [(spatial[i] + pre[i] + post[i] - (kernel[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    return strides, dil, pre, post, out


def pad_input(x, pre, post, value=0):
    """x with `pre`/`post` elements of `value` around its spatial dims (negative pads crop). One pass: only the
    border is filled, the interior is copied once."""
    if not any(pre) and not any(post):
        return x
    nd = len(pre)
    if min(pre) < 0 or min(post) < 0:
        sl = (slice(None), slice(None)) + tuple(slice(max(-a, 0), (x.shape[2 + i] - max(-b, 0)))
                                                for i, (a, b) in enumerate(zip(pre, post)))
        return pad_input(x[sl], [max(a, 0) for a in pre], [max(b, 0) for b in post], value)
    shape = x.shape[:2] + tuple(s + a + b for s, a, b in zip(x.shape[2:], pre, post))
    xp = np.empty(shape, dtype=x.dtype)
    for i in range(nd):
        ax = 2 + i
        lead = (slice(None),) * ax
        if pre[i]:
            xp[lead + (slice(0, pre[i]),)] = value
        if post[i]:
            xp[lead + (slice(shape[ax] - post[i], None),)] = value
    xp[(slice(None), slice(None)) + tuple(slice(a, a + s) for s, a in zip(x.shape[2:], pre))] = x
    return xp


def tap_slices(taps, dil, strides, out):
    """The slice tuple (over spatial dims) of the padded input that kernel tap `taps` reads for every output."""
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(taps, dil, strides, out))


def flat_taps(xp, ks, strides, dil, out):
    """2-D tap views with long inner loops: flatten the padded [N, C, Hp, Wp] input (padding more rows if
    needed) so output (oy, ox) of tap (i, j) reads flat[i*d*Wp + j*d + s*(oy*Wp + ox)] -- for each tap one
    1-D strided slice of length Ho*Wp. Returns (views list, crop) where crop([N, C, Ho*Wp]) -> [N, C, Ho, Wo]."""
    n, c, hp, wp = xp.shape
    (sh, sw), (dh, dw), (ho, wo) = strides, dil, out
    if sh != sw:
        return None
    st = sh
    length = ho * wp
    need = (ks[0] - 1) * dh * wp + (ks[1] - 1) * dw + st * (length - 1) + 1
    if need > hp * wp:
        rows = -(-(need - hp * wp) // wp)
        xp = np.concatenate([xp, np.zeros((n, c, rows, wp), xp.dtype)], axis=2)
    xf = xp.reshape(n, c, -1)
    views = []
    for i, j in itertools.product(range(ks[0]), range(ks[1])):
        off = i * dh * wp + j * dw
        views.append(xf[:, :, off:off + st * (length - 1) + 1:st])
    return views, lambda acc: acc.reshape(n, c, ho, wp)[:, :, :, :wo]


# shared helpers ------------------------------------------------------------------------------------------------

def _kernel_and_bias(op, inputs):
    w = op.weights.get("kernel")
    packed = ("kernel_gemm" in op.weights or "kernel_gemm_biased" in op.weights or "kernel_taps" in op.weights
              or "kernel_tap_gemm" in op.weights)
    if w is None and not packed and len(inputs) > 1:
        w = inputs[1]
    b = conv_bias(op.weights)
    if b is None and len(inputs) > 2:
        b = inputs[2]
    return w, b


def conv_bias(weights):
    """A convolution's bias weight, also when prepare moved it into the GEMM matrix's last column (see
    `_pack_gemm`); None when it has none."""
    if "kernel_gemm_biased" not in weights:
        return weights.get("bias")
    col = weights["kernel_gemm_biased"][0, :, -1]
    scale = weights.get("kernel_gemm_scale")
    return col if scale is None else col / scale.reshape(())


def _kernel_spatial(op, w):
    ks = op.params.get("kernel_shape")
    if ks:
        return list(ks)
    return list(np.shape(w)[2:])


def _work_dtype(op, x):
    if op.params.get("integer"):
        return np.float64
    return x.dtype if x.dtype.kind == "f" else np.float32


def _integer_inputs(op, x, w, inputs):
    """ConvInteger: subtract zero points and compute exactly in float64."""
    xz = inputs[3] if len(inputs) > 3 and inputs[3] is not None else 0
    wz = inputs[4] if len(inputs) > 4 and inputs[4] is not None else 0
    x = x.astype(np.float64) - np.asarray(xz, np.float64)
    w = np.asarray(w).astype(np.float64)
    wz = np.asarray(wz, np.float64)
    if wz.ndim == 1 and wz.size > 1:
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    return x, w - wz


def _finish(op, y, b, inputs, x_dtype):
    if op.params.get("integer"):
        return [np.rint(y).astype(np.int32)]
    if op.params.get("side"):
        y += side_term(op, inputs, y.shape[2:], y.dtype)
    if b is not None:
        y += np.asarray(b, y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return [apply_post_ops(y, op, inputs)]


# merged shortcut convolution (backends/engine/builder/passes/fusion_shortcut.py) ---------------------------------

def _side_cin(op) -> int:
    """Input channels of the merged 1x1 shortcut (0 when there is none)."""
    return int(op.weights["side_kernel"].shape[1]) if op.params.get("side") else 0


def side_input(op, inputs, out_hw, dtype):
    """The shortcut's input sampled at the output pixels: x2[:, :, ::s, ::s] cropped to out_hw (a view)."""
    side = op.params["side"]
    s = side["strides"]
    x2 = np.asarray(inputs[side["input"]])
    if x2.dtype != dtype:
        x2 = x2.astype(dtype)
    return x2[:, :, :s[0] * (out_hw[0] - 1) + 1:s[0], :s[1] * (out_hw[1] - 1) + 1:s[1]]


def side_term(op, inputs, out_hw, dtype, weights=None):
    """side_kernel @ the sampled shortcut input: [N, M, *out_hw] (`weights`: the [M, C2] matrix to use instead,
    e.g. the pre-scaled columns of the packed GEMM weights)."""
    xs = side_input(op, inputs, out_hw, dtype)
    w = np.asarray(op.weights["side_kernel"] if weights is None else weights, dtype)
    n, c2 = xs.shape[:2]
    return np.matmul(w, xs.reshape(n, c2, -1)).reshape((n, w.shape[0]) + tuple(out_hw))


def _silu_first(op):
    """The layer's first post-op is SiLU (YOLO's conv + SiLU): worth pre-scaling the GEMM by 1/2, see `_pack_gemm`."""
    post = op.params.get("post_ops") or ()
    return bool(post) and post[0]["op"] == "activation" and post[0]["type"] == "SILU"


def _gemm_scale(op):
    """The pre-scale of the packed GEMM weights (see `_pack_gemm`), or None."""
    packed = "kernel_gemm" in op.weights or "kernel_gemm_biased" in op.weights
    return op.weights.get("kernel_gemm_scale") if packed else None


def _bias_in_gemm(op):
    """The packed GEMM weights carry the bias as a last column (see `_pack_gemm`)."""
    return "kernel_gemm_biased" in op.weights


def _gemm_weights(op, w, groups, dtype, raw=False):
    """The packed [g, M/g, C/g*prod(k)] GEMM matrix: from `prepare` when there, else a reshape of w. `raw`: as
    packed, possibly pre-scaled by op.weights["kernel_gemm_scale"] and with the bias column of
    "kernel_gemm_biased" (only conv2d_gemm handles those)."""
    packed = op.weights.get("kernel_gemm")
    if packed is None and "kernel_gemm_biased" in op.weights:
        packed = op.weights["kernel_gemm_biased"]
        if not raw:
            packed = packed[..., :packed.shape[2] - 1 - _side_cin(op)]
    if packed is not None:
        scale = _gemm_scale(op)
        if scale is not None and not raw:
            packed = packed / scale.reshape(())  # exact: the scale is a power of two
        return packed if packed.dtype == dtype else packed.astype(dtype)
    w = np.asarray(w)
    return w.astype(dtype, copy=False).reshape(groups, w.shape[0] // groups, -1)


def _repacked(op, key, pack):
    """op.weights with 'kernel' replaced by weights[key] = pack(kernel), C-contiguous (as they are without one)."""
    w = op.weights.get("kernel")
    if w is None:
        return op.weights
    weights = {k: v for k, v in op.weights.items() if k != "kernel"}
    weights[key] = np.ascontiguousarray(pack(np.asarray(w)))
    return weights


def _pack_gemm(op):
    """Replace 'kernel' by its contiguous GEMM form: 'kernel_gemm' [g, M/g, C/g*k], or, for an ungrouped float
    convolution with a bias weight, 'kernel_gemm_biased' [1, M, C*k + 1] whose last column is the bias: the patch
    matrix then gets a row of ones and the GEMM adds the bias itself (one pass over the output less)."""
    w = op.weights.get("kernel")
    if w is None or op.params.get("integer"):
        return op.weights
    weights = {k: v for k, v in op.weights.items() if k != "kernel"}
    groups = op.params.get("groups", 1) or 1
    packed = np.ascontiguousarray(_gemm_weights(op, w, groups, np.float32 if w.dtype.kind != "f" else w.dtype))
    key = "kernel_gemm"
    bias = weights.get("bias")
    if bias is not None and groups == 1 and packed.dtype.kind == "f" and np.size(bias) == packed.shape[1]:
        cols = [packed]
        if op.params.get("side"):  # the merged shortcut's weights multiply its input rows of the patch matrix
            cols.append(np.asarray(weights["side_kernel"], packed.dtype)[None])
        packed = np.concatenate(cols + [np.asarray(bias, packed.dtype).reshape(1, -1, 1)], axis=2)
        del weights["bias"]
        key = "kernel_gemm_biased"
    if _silu_first(op) and packed.dtype.itemsize >= 4:
        # silu(z) = h + h*tanh(h) with h = z/2: a GEMM with weights (and bias) halved -- exact, a power of two --
        # yields h directly, so the epilogue saves the z/2 pass and the SiLU is 3 passes over the band
        packed = packed * 0.5
        weights["kernel_gemm_scale"] = np.full(1, 0.5, packed.dtype)
    weights[key] = packed
    return weights


# threaded 2-D GEMM convolution ---------------------------------------------------------------------------------

def _view_as(a, shape):
    """Reshape that must not copy (we write through it)."""
    v = a.view()
    v.shape = shape
    return v


def _silu_from_half(h):
    """silu(2h) = h + h*tanh(h), in place on h (any layout): 3 passes, one scratch buffer."""
    t = np.tanh(h)
    t *= h
    h += t


def _region_epilogue(y, sel, op, inputs, bias, half=False):
    """Bias + the layer's post-ops, in place on y[sel] (all of y, or a region of output channels / rows).
    half: the region holds z/2 (GEMM pre-scaled, bias already halved) and the first post-op is SiLU."""
    yr = y[sel]
    csel = sel[1]
    if bias is not None:
        yr += bias[csel].reshape(-1, 1, 1)
    for i, step in enumerate(op.params.get("post_ops") or ()):
        kind = step["op"]
        if half and i == 0:
            _silu_from_half(yr)
        elif kind == "bias":
            yr += np.asarray(op.weights[step["weight"]], y.dtype).reshape(-1)[csel].reshape(-1, 1, 1)
        elif kind == "activation":
            r = activation_inplace(yr, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
            if r is not yr:
                np.copyto(yr, r)
        elif kind == "add":
            yr += inputs[step["input"]][sel]
        else:
            raise ValueError(f"unknown post-op {kind!r}")


# an epilogue over at least this many elements is split over the pool (a hand-off costs 25-100 us on a VM)
PARALLEL_EPILOGUE_MIN = 1 << 20


def _whole_epilogue(y, op, inputs, bias, half, threads):
    """`_region_epilogue` over all of y: inline, or in channel chunks over the pool when y is large."""
    if threads > 1 and y.size >= PARALLEL_EPILOGUE_MIN:
        parallel_for(lambda rng: _region_epilogue(y, (slice(None), slice(*rng)), op, inputs, bias, half),
                     split(y.shape[1], threads))
    else:
        _region_epilogue(y, (slice(None), slice(None)), op, inputs, bias, half)


def _regionable(op, inputs, y_shape):
    for step in op.params.get("post_ops") or ():
        if step["op"] == "add":
            r = inputs[step["input"]]
            if not isinstance(r, np.ndarray) or r.shape != tuple(y_shape):
                return False
        elif step["op"] == "bias" and step.get("axis", 1) != 1:
            return False
    return True


def conv2d_gemm(op, x, wm, b, ks, strides, dil, pre, post, out, inputs, pointwise=False, scale=None, bias_col=False):
    """2-D convolution as im2col + GEMM, split over the thread pool into bands of output rows (or of output
    channels when the output map is small): each band copies its patches with one strided copy, runs one
    single-threaded GEMM per group straight into the output and applies bias/post-ops in place.
    x: [N, C, H, W] float; wm: [g, Mg, Cg*kh*kw] (C-major, taps minor); b: [M] or None; scale: wm's pre-scale
    (0.5 when the first post-op is SiLU, see `_pack_gemm`) or None; bias_col: wm's last column is the bias (scaled
    like wm), which the GEMM adds through a row of ones under the patch matrix. A merged shortcut (params "side")
    rides the same way: its weights are columns of a packed wm, its sampled input rows of the patch matrix; with
    unpacked weights, or no patch matrix, its term is computed apart and added before the epilogue."""
    n, c = x.shape[:2]
    kh, kw = ks
    (sh, sw), (dh, dw), (ho, wo) = strides, dil, out
    direct = pointwise and sh == sw == 1 and not any(pre) and not any(post)
    side_cin = _side_cin(op)
    packed_side = bias_col and side_cin > 0
    col_bias = side_w = None
    if bias_col and direct:  # no patch matrix to extend: the columns go back to the epilogue
        col_bias, wm, bias_col = wm[0, :, -1], wm[..., :-1], False
        if packed_side:
            side_w, wm, packed_side = wm[0, :, -side_cin:], wm[..., :-side_cin], False
    elif side_cin and not packed_side:
        side_w = op.weights["side_kernel"]
    side_rows = side_input(op, inputs, out, wm.dtype) if packed_side else None
    side_full = side_term(op, inputs, out, wm.dtype, side_w) if side_w is not None else None
    g, mg, kdim = wm.shape
    kdim -= int(bias_col) + (side_cin if packed_side else 0)
    m = g * mg
    dtype = wm.dtype
    bias = None if b is None else np.asarray(b, dtype).reshape(-1)
    y = np.empty((n, m, ho, wo), dtype)
    region = _regionable(op, inputs, y.shape)
    half = scale is not None
    if half and bias is not None:
        bias = bias * scale.reshape(())
    if col_bias is not None:
        bias = col_bias  # already scaled with wm
    if half:
        if not region:  # rare (broadcast residual): undo the scaling and run the plain epilogue
            wm = wm / scale.reshape(())
            bias, half = (None if bias is None else bias / scale.reshape(())), False
    has_epilogue = bias is not None or bool(op.params.get("post_ops"))
    threads = num_threads() if n * m * kdim * ho * wo >= PARALLEL_MIN_MACS else 1
    by_rows = ho * wo >= m or g > 1 or threads == 1
    cg = c // g

    phases = None
    if not direct and kh * kw >= 4 * sh * sw > 4:
        # (large kernel, strided: the first layer) taps read every s-th element; split the padded input into its
        # sh*sw phases once so that every tap copies unit-stride rows: xp[.., p + sh*a, q + sw*b] == ph[.., p, q, a, b]
        hp, wp = x.shape[2] + pre[0] + post[0], x.shape[3] + pre[1] + post[1]
        phases = np.zeros((n, c, sh, sw, -(-hp // sh), -(-wp // sw)), dtype)
        for p_, q_ in itertools.product(range(sh), range(sw)):
            a0, b0 = max(0, -(-(pre[0] - p_) // sh)), max(0, -(-(pre[1] - q_) // sw))
            src = x[:, :, p_ + sh * a0 - pre[0]::sh, q_ + sw * b0 - pre[1]::sw]
            na, nb = min(src.shape[2], phases.shape[4] - a0), min(src.shape[3], phases.shape[5] - b0)
            phases[:, :, p_, q_, a0:a0 + na, b0:b0 + nb] = src[:, :, :na, :nb]
        xp = None
    else:
        xp = np.ascontiguousarray(x) if direct else pad_input(x, pre, post)
        st = xp.strides
    def cols_for(ni, r0, r1):
        rows = r1 - r0
        if direct:
            return _view_as(xp[ni, :, r0:r1], (g, cg, rows * wo))
        size = c * kh * kw * rows * wo
        extra = side_cin * rows * wo if side_rows is not None else 0
        buf = np.empty(size + extra + (rows * wo if bias_col else 0), dtype)
        if extra:  # the merged shortcut's input at these output rows, under wm's shortcut columns
            buf[size:size + extra].reshape(side_cin, rows, wo)[...] = side_rows[ni, :, r0:r1]
        if bias_col:
            buf[size + extra:] = 1  # the ones row that multiplies wm's bias column
        cols = buf[:size].reshape(c, kh, kw, rows, wo)
        if phases is not None:
            for i, j in itertools.product(range(kh), range(kw)):
                a0, b0 = r0 + (i * dh) // sh, (j * dw) // sw
                cols[:, i, j] = phases[ni, :, (i * dh) % sh, (j * dw) % sw, a0:a0 + rows, b0:b0 + wo]
        else:
            xs = xp[ni, :, r0 * sh:]
            np.copyto(cols, _as_strided(xs, (c, kh, kw, rows, wo),
                                        (st[1], st[2] * dh, st[3] * dw, st[2] * sh, st[3] * sw)))
        return buf.reshape(g, -1, rows * wo)

    if by_rows:
        per = max(1, -(-threads // n))
        tasks = [(ni, r0, r1) for ni in range(n) for r0, r1 in split(ho, per)]
        # sub-bands small enough that the patch matrix is still in cache when the GEMM reads it
        step = ho if direct else max(1, _COLS_BYTES // max(1, c * kh * kw * wo * wm.itemsize))

        def band(task):
            ni, r0, r1 = task
            for s0 in range(r0, r1, step):
                s1 = min(r1, s0 + step)
                cm = cols_for(ni, s0, s1)
                np.matmul(wm, cm, out=_view_as(y[ni, :, s0:s1], (g, mg, (s1 - s0) * wo)))
        parallel_for(band, tasks)
        if side_full is not None:
            y += side_full
        if region and has_epilogue:
            # once over the whole output, in place, after every GEMM: measured cheaper than per-band epilogues
            # between the GEMMs (they slow the next band's patch copy and GEMM more than they save) and than
            # separate layers (no new buffers, no dispatch)
            _whole_epilogue(y, op, inputs, bias, half, threads)
    else:
        for ni in range(n):
            cm = cols_for(ni, 0, ho)[0]

            def chan(rng, ni=ni, cm=cm):
                m0, m1 = rng
                np.matmul(wm[0, m0:m1], cm, out=_view_as(y[ni, m0:m1], (m1 - m0, ho * wo)))
                if side_full is not None:
                    y[ni, m0:m1] += side_full[ni, m0:m1]
                if region:
                    _region_epilogue(y, (slice(ni, ni + 1), slice(m0, m1)), op, inputs, bias, half)
            parallel_for(chan, split(m, threads))
    if not region:
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        y = apply_post_ops(y, op, inputs)
    return [y]



def depthwise2d(op, x, taps_w, b, ks, strides, dil, pre, post, out, inputs):
    """Depthwise 2-D convolution as per-tap multiply-accumulate over strided views, blocked so that the
    accumulator (a band of output rows of a chunk of channels, written straight into the output) stays in
    cache across the kh*kw taps; channel chunks run on the thread pool, the epilogue runs per block."""
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = ks, strides, dil, out
    dtype = taps_w.dtype
    xp = pad_input(x, pre, post)
    y = np.empty((n, c, ho, wo), dtype)
    bias = None if b is None else np.asarray(b, dtype).reshape(-1)
    region = _regionable(op, inputs, y.shape)
    taps = list(itertools.product(range(kh), range(kw)))

    def task(t):
        ni, c0, c1 = t
        cc = c1 - c0
        step = max(1, min(ho, _DW_BYTES // max(1, cc * wo * y.itemsize)))
        tmp = np.empty((cc, step, wo), dtype)
        wv = taps_w[:, c0:c1, None, None]
        for r0 in range(0, ho, step):
            r1 = min(ho, r0 + step)
            rows = r1 - r0
            acc, tm = y[ni, c0:c1, r0:r1], tmp[:, :rows]
            for k, (i, j) in enumerate(taps):
                y0, x0 = r0 * sh + i * dh, j * dw
                v = xp[ni, c0:c1, y0:y0 + sh * (rows - 1) + 1:sh, x0:x0 + sw * (wo - 1) + 1:sw]
                if k == 0:
                    np.multiply(v, wv[k], out=acc)
                else:
                    np.multiply(v, wv[k], out=tm)
                    acc += tm
            if region:
                _region_epilogue(y, (slice(ni, ni + 1), slice(c0, c1), slice(r0, r1)), op, inputs, bias)
    parts = max(1, -(-num_threads() // n)) if c * ho * wo * kh * kw * n >= PARALLEL_MIN_DW_MACS else 1
    parallel_for(task, [(ni, c0, c1) for ni in range(n) for c0, c1 in split(c, parts)])
    if not region:
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        y = apply_post_ops(y, op, inputs)
    return [y]


def _fast_ok(op, x, ks, pre, post):
    return (x.ndim == 4 and len(ks) == 2 and x.dtype.kind == "f" and x.dtype.itemsize >= 4
            and not op.params.get("integer") and min(pre) >= 0 and min(post) >= 0)


# tactics -------------------------------------------------------------------------------------------------------

@register_tactic
class Im2colGemm(Tactic):
    """Column matrix of all kernel taps, then one batched BLAS GEMM."""
    kind, name = "Convolution", "im2col-gemm"

    def prepare(self, op):
        return _pack_gemm(op)

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = _kernel_and_bias(op, inputs)
        if op.params.get("integer"):
            x, w = _integer_inputs(op, x, w, inputs)
        ks = _kernel_spatial(op, w)
        g = op.params.get("groups", 1) or 1
        dtype = _work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if _fast_ok(op, x, ks, pre, post):
            biased = _bias_in_gemm(op)
            return conv2d_gemm(op, x, _gemm_weights(op, w, g, dtype, raw=True), None if biased else b, ks, strides,
                               dil, pre, post, out, inputs, scale=_gemm_scale(op), bias_col=biased)
        xp = pad_input(x, pre, post)
        n, c = x.shape[:2]
        ntaps = int(np.prod(ks))
        cols = np.empty((n, c, ntaps) + tuple(out), dtype=dtype)
        for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
            cols[:, :, t] = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
        wm = _gemm_weights(op, w, g, dtype)                         # [g, Mg, Cg*taps]
        p = int(np.prod(out))
        cols = cols.reshape(n, g, (c // g) * ntaps, p)
        y = np.matmul(wm, cols)                                 # [n, g, Mg, p]
        y = y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(out))
        return _finish(op, y, b, inputs, x.dtype)


def _is_pointwise(op, input_shapes):
    ks = op.params.get("kernel_shape") or []
    return (bool(ks) and all(k == 1 for k in ks) and not op.params.get("integer")
            and (op.params.get("auto_pad") or "NOTSET") in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
            and not any(op.params.get("pre_padding") or []) and not any(op.params.get("post_padding") or []))


@register_tactic
class PointwiseGemm(Tactic):
    """1x1 convolution: y[n] = W[M, C] @ x[n].reshape(C, H*W); strides by slicing, no column matrix."""
    kind, name = "Convolution", "1x1-gemm"

    def supports(self, op, input_shapes):
        return _is_pointwise(op, input_shapes)

    def prepare(self, op):
        return _pack_gemm(op)

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = _kernel_and_bias(op, inputs)
        g = op.params.get("groups", 1) or 1
        dtype = _work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides = op.params.get("strides") or [1] * (x.ndim - 2)
        if x.ndim == 4 and x.dtype.itemsize >= 4:
            out = [(x.shape[2] - 1) // strides[0] + 1, (x.shape[3] - 1) // strides[1] + 1]
            biased = _bias_in_gemm(op)
            return conv2d_gemm(op, x, _gemm_weights(op, w, g, dtype, raw=True), None if biased else b, [1, 1],
                               list(strides), [1, 1], [0, 0], [0, 0], out, inputs, pointwise=True,
                               scale=_gemm_scale(op), bias_col=biased)
        if any(s != 1 for s in strides):
            x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
        out = x.shape[2:]
        n, c = x.shape[:2]
        wm = _gemm_weights(op, w, g, dtype)
        y = np.matmul(wm, x.reshape(n, g, c // g, -1))
        y = y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(out))
        return _finish(op, y, b, inputs, x.dtype)


@register_tactic
class Depthwise(Tactic):
    """groups == C == M: y[:, c] = sum over taps of w[c, tap] * shifted view of x[:, c]."""
    kind, name = "Convolution", "depthwise"

    def supports(self, op, input_shapes):
        g = op.params.get("groups", 1) or 1
        m = op.params.get("num_output_maps")
        if g == 1 or op.params.get("integer") or m != g:
            return False
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) > 1:
            return input_shapes[0][1] == g
        return True

    def prepare(self, op):
        return _repacked(op, "kernel_taps", lambda w: w.reshape(w.shape[0], -1).T)  # [taps, C]

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = _kernel_and_bias(op, inputs)
        ks = _kernel_spatial(op, w)
        dtype = _work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        c = x.shape[1]
        taps_w = op.weights.get("kernel_taps")
        taps_w = np.asarray(w, dtype).reshape(c, -1).T if taps_w is None else taps_w.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if _fast_ok(op, x, ks, pre, post):
            return depthwise2d(op, x, taps_w, b, ks, strides, dil, pre, post, out, inputs)
        xp = pad_input(x, pre, post)
        flat = flat_taps(np.ascontiguousarray(xp), ks, strides, dil, out) if len(ks) == 2 else None
        if flat is not None:
            views, crop = flat
            acc = views[0] * taps_w[0].reshape(1, c, 1)
            tmp = np.empty_like(acc)
            for t in range(1, len(views)):
                np.multiply(views[t], taps_w[t].reshape(1, c, 1), out=tmp)
                acc += tmp
            return _finish(op, crop(acc), b, inputs, x.dtype)
        bshape = (1, c) + (1,) * len(out)
        y = np.zeros((x.shape[0], c) + tuple(out), dtype=dtype)
        tmp = np.empty_like(y)
        for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
            view = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
            np.multiply(view, taps_w[t].reshape(bshape), out=tmp)
            y += tmp
        return _finish(op, y, b, inputs, x.dtype)


@register_tactic
class ShiftedGemm(Tactic):
    """Stride-1 2-D convolution without a column matrix: flatten the padded input and, for each tap, multiply
    W[tap] ([M, C]) by a contiguous window of it (offset i*d*Wp + j*d), accumulating [M, Ho*Wp]; the Wp - Wo
    wrap-around columns are cropped at the end. Trades the im2col copy for kh*kw smaller GEMMs."""
    kind, name = "Convolution", "shifted-gemm"

    def supports(self, op, input_shapes):
        p = op.params
        ks = p.get("kernel_shape") or []
        return (len(ks) == 2 and (p.get("groups", 1) or 1) == 1 and not p.get("integer")
                and all(s == 1 for s in (p.get("strides") or [1, 1])) and ks != [1, 1])

    def prepare(self, op):
        return _repacked(op, "kernel_tap_gemm", lambda w: w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1))

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = _kernel_and_bias(op, inputs)
        ks = _kernel_spatial(op, w)
        dtype = _work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        wt = op.weights.get("kernel_tap_gemm")
        if wt is None:
            w = np.asarray(w, dtype)
            wt = w.reshape(w.shape[0], w.shape[1], -1).transpose(2, 0, 1)
        wt = wt.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        ho, wo = out
        extra = 1 if ks[1] > 1 else 0
        xp = np.pad(x, [(0, 0), (0, 0), (max(pre[0], 0), max(post[0], 0) + extra), (max(pre[1], 0), max(post[1], 0))])
        n, c, hp, wp = xp.shape
        xf = xp.reshape(n, c, hp * wp)
        length = ho * wp
        y = tmp = None
        for t, (i, j) in enumerate(itertools.product(range(ks[0]), range(ks[1]))):
            off = i * dil[0] * wp + j * dil[1]
            view = xf[:, :, off:off + length]
            if y is None:
                y = np.matmul(wt[t], view)
                tmp = np.empty_like(y)
            else:
                np.matmul(wt[t], view, out=tmp)
                y += tmp
        y = y.reshape(n, -1, ho, wp)[:, :, :, :wo]
        return _finish(op, y, b, inputs, x.dtype)


# transposed convolution --------------------------------------------------------------------------------------

def deconv_geometry(params, in_sizes, kernel):
    nd = len(in_sizes)
    strides = list(params.get("strides") or [1] * nd)
    dil = list(params.get("dilations") or [1] * nd)
    opad = list(params.get("output_padding") or [0] * nd)
    full = [strides[i] * (in_sizes[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nd)]
    out_shape = params.get("output_shape")
    auto_pad = params.get("auto_pad") or "NOTSET"
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [in_sizes[i] * strides[i] for i in range(nd)]
    if out_shape is not None:
        out_shape = list(out_shape)[-nd:]
        pre = []
        for i in range(nd):
            total = full[i] - out_shape[i]
            pre.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return strides, dil, pre, out_shape
    pre = list(params.get("pre_padding") or [0] * nd)
    post = list(params.get("post_padding") or [0] * nd)
    return strides, dil, pre, [full[i] - pre[i] - post[i] for i in range(nd)]


def scatter_taps(cols, ks, strides, dil, pre, out, in_sizes):
    """col2im: add cols[:, :, tap, i...] into y[:, :, i*s + tap*d - pre] for every kernel tap (one strided
    whole-tensor add per tap). cols: [N, M, taps, *in_sizes] -> y: [N, M, *out]."""
    n, m = cols.shape[:2]
    y = np.zeros((n, m) + tuple(out), dtype=cols.dtype)
    for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
        src, dst = [], []
        for i, tap in enumerate(taps):
            off = tap * dil[i] - pre[i]        # output position of input index j is j*s + off
            s = strides[i]
            j0 = 0 if off >= 0 else -(off // s)
            j1 = min(in_sizes[i], (out[i] - 1 - off) // s + 1) if out[i] - 1 - off >= 0 else 0
            if j1 <= j0:
                break
            src.append(slice(j0, j1))
            dst.append(slice(j0 * s + off, (j1 - 1) * s + off + 1, s))
        else:
            y[(slice(None), slice(None)) + tuple(dst)] += cols[(slice(None), slice(None), t) + tuple(src)]
    return y


@register_tactic
class Col2Im(Tactic):
    """ONNX Col2Im as a Deconvolution with params col2im: the input already holds the columns."""
    kind, name = "Deconvolution", "col2im"

    def supports(self, op, input_shapes):
        return bool(op.params.get("col2im"))

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        image = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        ks = [int(v) for v in np.asarray(inputs[2]).reshape(-1)]
        nd = len(image)
        strides = list(op.params.get("strides") or [1] * nd)
        dil = list(op.params.get("dilations") or [1] * nd)
        pre = list(op.params.get("pre_padding") or [0] * nd)
        post = list(op.params.get("post_padding") or [0] * nd)
        blocks = [(image[i] + pre[i] + post[i] - dil[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
        ntaps = int(np.prod(ks))
        n = x.shape[0]
        cols = x.reshape((n, x.shape[1] // ntaps, ntaps) + tuple(blocks))
        return [scatter_taps(cols, ks, strides, dil, pre, image, blocks)]


@register_tactic
class DeconvGemmCol2im(Tactic):
    """y = col2im(W^T @ x): one GEMM per group, then a scatter-add of each kernel tap into strided output views."""
    kind, name = "Deconvolution", "gemm-col2im"

    def supports(self, op, input_shapes):
        return not op.params.get("col2im")

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        w, b = _kernel_and_bias(op, inputs)
        dtype = x.dtype if x.dtype.kind == "f" else np.float32
        x = x.astype(dtype, copy=False)
        w = np.asarray(w, dtype)
        g = op.params.get("groups", 1) or 1
        n, c = x.shape[:2]
        ks = list(op.params.get("kernel_shape") or w.shape[2:])
        in_sizes = list(x.shape[2:])
        strides, dil, pre, out = deconv_geometry(op.params, in_sizes, ks)
        mg = w.shape[1]
        ntaps = int(np.prod(ks))
        wt = w.reshape(g, c // g, mg * ntaps).transpose(0, 2, 1)            # [g, Mg*taps, Cg]
        cols = np.matmul(wt, x.reshape(n, g, c // g, -1))                   # [n, g, Mg*taps, P]
        cols = cols.reshape((n, g * mg, ntaps) + tuple(in_sizes))
        tiles = all(k == s and d == 1 for k, d, s in zip(ks, dil, strides)) and not any(pre) and \
            all(o == i * s for o, i, s in zip(out, in_sizes, strides))
        if tiles:  # kernel == stride (the usual 2x upsampler): taps tile the output exactly, plain assignments
            y = np.empty((n, g * mg) + tuple(out), dtype=dtype)
            for t, taps in enumerate(itertools.product(*[range(k) for k in ks])):
                y[(slice(None), slice(None)) + tuple(slice(tp * d, None, s) for tp, d, s in zip(taps, dil, strides))] = \
                    cols[:, :, t]
        else:
            y = scatter_taps(cols, ks, strides, dil, pre, out, in_sizes)
        if b is not None:
            y += np.asarray(b, dtype).reshape((1, -1) + (1,) * len(out))
        return [apply_post_ops(y, op, inputs)]
