"""CPU kernels: convolution and transposed convolution (N-d, NCHW-style layouts).

Convolution has three real tactics the builder times against each other:
  im2col-gemm  gather the kh*kw shifted views of the padded input into one column matrix and do one BLAS GEMM
               per batch item and group (handles everything: groups, dilations, strides, 1-D/2-D/3-D, integer);
  1x1-gemm     pointwise convolution as a direct GEMM on the (strided) input, no column matrix;
  depthwise    groups == channels == outputs: per-tap multiply-accumulate over shifted views (no GEMM).
Weights are pre-packed at build time in `prepare` ([g, M/g, C/g*k] contiguous for the GEMMs, [C, taps] for
depthwise). `run` also accepts unpacked weights (the builder's first run and constant folding use them).
"""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic


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
    if not any(pre) and not any(post):
        return x
    width = [(max(a, 0), max(b, 0)) for a, b in zip(pre, post)]
    xp = np.full(x.shape[:2] + tuple(s + a + b for s, (a, b) in zip(x.shape[2:], width)), value, dtype=x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(a, a + s) for s, (a, _) in zip(x.shape[2:], width))] = x
    # negative pads crop
    sl = [slice(None), slice(None)] + [slice(-min(a, 0) or None, (min(b, 0) or None)) for a, b in zip(pre, post)]
    return xp[tuple(sl)] if any(a < 0 for a in pre) or any(b < 0 for b in post) else xp


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
    if w is None and "kernel_gemm" not in op.weights and "kernel_taps" not in op.weights and len(inputs) > 1:
        w = inputs[1]
    b = op.weights.get("bias")
    if b is None and len(inputs) > 2:
        b = inputs[2]
    return w, b


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
    if b is not None:
        y += np.asarray(b, y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return [apply_post_ops(y, op, inputs)]


def _gemm_weights(op, w, groups, dtype):
    """The packed [g, M/g, C/g*prod(k)] GEMM matrix: from `prepare` when there, else a reshape of w."""
    packed = op.weights.get("kernel_gemm")
    if packed is not None:
        return packed if packed.dtype == dtype else packed.astype(dtype)
    w = np.asarray(w)
    return w.astype(dtype, copy=False).reshape(groups, w.shape[0] // groups, -1)


def _pack_gemm(op):
    """Replace 'kernel' by its contiguous GEMM form 'kernel_gemm' (same bytes, no extra storage)."""
    w = op.weights.get("kernel")
    if w is None or op.params.get("integer"):
        return op.weights
    weights = {k: v for k, v in op.weights.items() if k != "kernel"}
    weights["kernel_gemm"] = np.ascontiguousarray(_gemm_weights(op, w, op.params.get("groups", 1) or 1,
                                                                np.float32 if w.dtype.kind != "f" else w.dtype))
    return weights


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
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_taps"] = np.ascontiguousarray(np.asarray(w).reshape(w.shape[0], -1).T)  # [taps, C]
        return weights

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
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        m, c = w.shape[:2]
        weights["kernel_tap_gemm"] = np.ascontiguousarray(np.asarray(w).reshape(m, c, -1).transpose(2, 0, 1))
        return weights

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
        y = scatter_taps(cols, ks, strides, dil, pre, out, in_sizes)
        if b is not None:
            y += np.asarray(b, dtype).reshape((1, -1) + (1,) * len(out))
        return [apply_post_ops(y, op, inputs)]
