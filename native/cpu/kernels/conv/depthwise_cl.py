"""The depthwise-cl tactic: depthwise convolution computed channels-last between two reformats.

Depthwise layers of small models have many channels and small maps (mobilenets: 240 channels of 14x14). NCHW
per-tap multiply-adds there run over short rows (14 floats) with a broadcast weight per channel, so numpy spends
its time on loop overhead. Channels-last, every tap is one multiply-add over [H, W, C] with the weights a
contiguous vector of C along the fastest axis: the padded input is written once channels-last, the kh*kw taps
accumulate into one [Ho, Wo, C] buffer, and the result is copied back to NCHW (into the planned buffer when there
is one), where the bias and fused activations run in place. Measured 2-4x faster than the NCHW tactics on
mobilenetv3's 14x14 and 7x7 depthwise layers; slower on few channels over large maps (16 x 112x112), so the
builder's timing decides. The sum per output element is taken in the same tap order as `depthwise`. With the
optional numba extra the taps run as a compiled loop over C (native/cpu/jit.py) with the same sums in the same order,
2-4x faster than the einsum on mobilenet shapes.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.depthwise import Depthwise
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.gemm2d import fast_path_ok, recipe
from native.cpu.kernels.conv.weights import kernel_and_bias, kernel_spatial, repacked, work_dtype
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import Tactic, register_tactic

_as_strided = np.lib.stride_tricks.as_strided
_JIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_NO_BIAS = {d: np.empty(0, d) for d in _JIT_DTYPES}


_UNROLLED = {3: "depthwise_cl_rows_nchw_k3", 5: "depthwise_cl_rows_nchw_k5"}   # native/cpu/jit_dw.py, by kw
_ACT_CODES = {None: 0, "RELU": 1, "HARD_SWISH": 2, "HARD_SWISH_RELU6": 3}   # what depthwise_cl_rows_nchw applies itself


def epilogue_code(op):
    """The activation code the compiled kernel applies for this layer's post-ops (0: none), or None when they are
    more than one RELU / HARD_SWISH (then they run after, in place)."""
    steps = op.params.get("post_ops") or ()
    if not steps:
        return 0
    if len(steps) == 1 and steps[0]["op"] == "activation" and steps[0]["type"] in _ACT_CODES:
        return _ACT_CODES[steps[0]["type"]]
    return None


def depthwise_cl(x, taps_w, bias, ks, strides, dil, pre, post, out, dst=None, act=None):
    """y[N, C, Ho, Wo] of a depthwise conv (bias added, no activation): channels-last taps, one reformat each way.
    taps_w: [kh*kw, C] in the work dtype; dst: a C-contiguous [N, C, Ho, Wo] buffer to write into, or None.
    act: an `epilogue_code` to apply too where the compiled kernel runs (returns (y, True)), else None (returns
    (y, False) when the activation is left to the caller)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = ks, strides, dil, out
    dtype = taps_w.dtype
    hp, wp = h + pre[0] + post[0], w + pre[1] + post[1]
    xl = np.empty((n, hp, wp, c), dtype)
    if pre[0] or post[0] or pre[1] or post[1]:   # zero only the border; the interior is overwritten next
        xl[:, :pre[0]] = 0
        xl[:, hp - post[0]:] = 0
        xl[:, :, :pre[1]] = 0
        xl[:, :, wp - post[1]:] = 0
    np.copyto(xl[:, pre[0]:pre[0] + h, pre[1]:pre[1] + w], x.transpose(0, 2, 3, 1))
    y = dst if dst is not None and dst.shape == (n, c, ho, wo) and dst.dtype == dtype and dst.flags.c_contiguous \
        else np.empty((n, c, ho, wo), dtype)
    st = xl.strides
    w_ijc = taps_w.reshape(kh, kw, c)
    direct = None
    if act is not None and dtype in _JIT_DTYPES:   # a kernel row's taps unrolled where there is one for kw
        direct = (jit.kernel(_UNROLLED[kw]) if kw in _UNROLLED else None) or jit.kernel("depthwise_cl_rows_nchw")
    compiled = jit.kernel("depthwise_cl_rows") if dtype in _JIT_DTYPES else None
    bar = tuning.PARALLEL_MIN_DW_JIT_MACS if direct is not None or compiled is not None \
        else tuning.PARALLEL_MIN_DW_MACS * 4
    threads = num_threads() if n * c * ho * wo * kh * kw >= bar else 1
    if direct is not None:   # the same sums, + bias and the activation, stored NCHW (native/cpu/jit.py)
        b = _NO_BIAS[dtype] if bias is None else np.ascontiguousarray(bias, dtype)

        def direct_rows(r):
            for ni in range(n):
                direct(xl[ni], w_ijc, b, y[ni], r[0], r[1], sh, sw, dh, dw, act)
        if threads > 1 and ho > 1:
            parallel_for(direct_rows, split(ho, threads))
        else:
            direct_rows((0, ho))
        return y, True
    acc = np.empty((n, ho, wo, c), dtype)

    def rows(r):
        r0, r1 = r
        a = acc[:, r0:r1]
        if compiled is not None:   # the same sums in the same order, compiled (native/cpu/jit.py): 2-4x faster
            for ni in range(n):
                compiled(xl[ni], w_ijc, a[ni], r0, sh, sw, dh, dw)
        else:
            # every tap at once: a [N, rows, Wo, kh, kw, C] view of the padded input, reduced over (kh, kw) in one
            # einsum pass, which sums each output's products in the taps' order, as the per-tap multiply-adds did
            # (the same floats), at a third of their time (no temporaries, one pass over the output)
            v = _as_strided(xl[:, r0 * sh:], (n, r1 - r0, wo, kh, kw, c),
                            (st[0], st[1] * sh, st[2] * sw, st[1] * dh, st[2] * dw, st[3]))
            np.einsum("nhwijc,ijc->nhwc", v, w_ijc, out=a)
        if bias is not None:
            a += bias
    if threads > 1 and ho > 1:
        parallel_for(rows, split(ho, threads))
    else:
        rows((0, ho))
    np.copyto(y, acc.transpose(0, 3, 1, 2))
    return (y, False) if act is not None else y


@register_tactic
class DepthwiseChannelsLast(Tactic):
    """groups == C == M, 2-D float: per-tap multiply-adds over channels-last [H, W, C] views."""
    kind, name = "Convolution", "depthwise-cl"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = Depthwise.supports(self, op, input_shapes)
        if why is not None:
            return why
        ks = op.params.get("kernel_shape")
        if ks is not None and len(ks) != 2:
            return "2-D kernels only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "4-D (NCHW) inputs only"
        return None

    def prepare(self, op):
        return repacked(op, "kernel_taps", lambda w: w.reshape(w.shape[0], -1).T)  # [taps, C], as depthwise

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = np.asarray(inputs[0])
        fast = recipe(op, "_dw_cl", x, inputs, _Operands.make) if x.ndim == 4 else None
        if fast is not None:   # the operands worked out once for this input shape: the same call
            y, done = depthwise_cl(x, *fast.args, dst=outputs[0] if outputs else None, act=fast.code)
            return [y if done or not op.params.get("post_ops") else apply_post_ops(y, op, inputs)]
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        x = x.astype(dtype, copy=False)
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if not fast_path_ok(op, x, ks, pre, post):   # negative pads or another rank: the NCHW tactic's general path
            return Depthwise.run(self, op, inputs)
        c = x.shape[1]
        taps_w = op.weights.get("kernel_taps")
        taps_w = np.asarray(w, dtype).reshape(c, -1).T if taps_w is None else taps_w
        taps_w = np.ascontiguousarray(taps_w, dtype)
        bias = None if b is None else np.asarray(b, dtype).reshape(-1)
        code, dst, done = epilogue_code(op), outputs[0] if outputs else None, False
        if code is None:
            y = depthwise_cl(x, taps_w, bias, ks, strides, dil, pre, post, out, dst=dst)
        else:
            y, done = depthwise_cl(x, taps_w, bias, ks, strides, dil, pre, post, out, dst=dst, act=code)
        return [apply_post_ops(y, op, inputs) if op.params.get("post_ops") and not done else y]


class _Operands:
    """depthwise_cl's operands for a layer whose post-ops the compiled kernel applies (`epilogue_code`), worked out
    once per input shape (the taps repacked, bias, geometry): the same call, without ~10 us of Python per layer."""

    __slots__ = ("args", "code")

    @classmethod
    def make(cls, op, x, inputs):
        w, b = kernel_and_bias(op, inputs)
        ks = kernel_spatial(op, w)
        dtype = work_dtype(op, x)
        code = epilogue_code(op)
        if x.dtype != dtype or dtype not in _JIT_DTYPES or code is None or jit.kernel("depthwise_cl_rows_nchw") is None:
            return None
        strides, dil, pre, post, out = geometry(op.params, x.shape, ks)
        if not fast_path_ok(op, x, ks, pre, post):
            return None
        c = x.shape[1]
        taps_w = op.weights.get("kernel_taps")
        taps_w = np.asarray(w, dtype).reshape(c, -1).T if taps_w is None else taps_w
        r = cls()
        r.args = (np.ascontiguousarray(taps_w, dtype), None if b is None else np.asarray(b, dtype).reshape(-1), ks,
                  strides, dil, pre, post, out)
        r.code = code
        return r
