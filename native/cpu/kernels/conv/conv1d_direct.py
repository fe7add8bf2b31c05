"""The conv1d-direct tactic: a small 1-D convolution as a compiled loop (the numba extra), no patch matrix, no GEMM.

Speech models run 1-D convolutions on a handful of frames (silero-vad: [1, 129, 3] -> [1, 128, 3], k = 3; its
STFT as a 256-tap Conv over 576 samples; a 128 -> 1 projection): 40K-200K multiply-adds that BLAS takes as a GEMM
with 1-3 columns at ~5 GMAC/s, after a gather of the patch matrix. Here each output position adds every (channel,
tap) product into an [M] accumulator, the inner loop running over M (vectorised), the weights packed [C*k, M] at
build time; the bias then, and the fused post-ops in place (epilogue.py). Its own rounding (a running float sum in
(channel, tap) order, not a blocked GEMM's), so it is a tactic of its own, timed against conv1d-gemm; offered only
where numba is installed and the layer is small (a GEMM wins on large ones and timing a slow loop costs builds).
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.activations import ACTIVATIONS
from native.cpu.kernels.conv.epilogue import compiled_steps, region_epilogue
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias, work_dtype
from native.tactics import Tactic, register_tactic

_ALL = (slice(None), slice(None))
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def pack(w):
    """[M, C, k] -> [C*k, M]: row c*k + t holds tap t of channel c for every output channel."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T)


def as_1d(shape, ks):
    """[N, C, L] and kernel [k], or [N, C, 1, L] and kernel [1, k] (a height-1 2-D convolution): True."""
    if shape is None:
        return False
    if len(shape) == 3 and len(ks) == 1:
        return True
    return len(shape) == 4 and len(ks) == 2 and shape[2] == 1 and ks[0] == 1


@register_tactic
class Conv1dDirect(Tactic):
    """Small ungrouped float 1-D convolutions as one compiled loop (see the module docstring)."""
    kind, name = "Convolution", "conv1d-direct"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        shape = input_shapes[0] if input_shapes else None
        if not as_1d(shape, ks):
            return "1-D convolutions (or height-1 2-D ones) of known input shape only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
            return "ungrouped float convolutions only"
        if any(s["op"] == "add" or (s["op"] == "bias" and s.get("axis", 1) != 1) for s in p.get("post_ops") or ()):
            return "no fused residual add"
        if any(v < 0 for v in (p.get("pre_padding") or []) + (p.get("post_padding") or [])):
            return "no cropping pads"
        if len(ks) == 2 and any((p.get(key) or [0, 0])[0] for key in ("pre_padding", "post_padding")):
            return "no padding along the height-1 axis"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        n, c, length = shape[0], shape[1], shape[-1]
        m = p.get("num_output_maps") or 0
        k, s = ks[-1], (p.get("strides") or [1])[-1]
        if n * m * c * k * max(1, length // max(1, s)) > tuning.PARALLEL_MIN_MACS:
            return "large: a GEMM tactic is faster"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {key: v for key, v in op.weights.items() if key != "kernel"}
        weights["kernel_ck_m"] = pack(w)
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = inputs[0]
        fast = op.__dict__.get("_conv1d_direct_fast")
        if fast is not None and type(x) is np.ndarray and x.shape == fast[0] and x.dtype is fast[1] \
                and fast[2] is op.weights:
            # the recipe's common case, its checks made once: an input of the work dtype, 3-D (a strided one
            # copied, as below)
            _, _, _, kernel, wt, bias, k, s, d, pre, relu, shape, dtype, sigmoid_one, act = fast
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            dst = outputs[0] if outputs else None
            y = dst if dst is not None and dst.shape == shape and dst.dtype is dtype and dst.flags.c_contiguous \
                else np.empty(shape, dtype)
            kernel(x, wt, bias, y, k, s, d, pre, relu)
            if sigmoid_one:
                sigmoid_of_one(y.reshape(1))
            elif act is not None:   # region_epilogue's call for this one step (activation_inplace's)
                act[0](y, act[1], act[2], y)
            return [y]
        x = np.asarray(x)
        held = op.__dict__.get("_conv1d_direct")
        if held is None or held[0] is not op.weights or held[1] != x.shape or held[2] != x.dtype:
            held = _recipe(op, x, inputs)
            if "kernel_ck_m" in op.weights:   # packed weights: the recipe holds until they or the input change
                op.__dict__["_conv1d_direct"] = held
                _, _, _, dtype, wt, bias, geo, shape, relu, _, kernel, sigmoid_one = held
                act = None if relu or sigmoid_one else _one_activation(op.params.get("post_ops"))
                if x.ndim == 3 and x.dtype == dtype and (sigmoid_one or relu or act is not None
                                                          or not op.params.get("post_ops")):
                    op.__dict__["_conv1d_direct_fast"] = (x.shape, x.dtype, op.weights, kernel, wt, bias) + \
                        tuple(geo) + (relu, shape, dtype, sigmoid_one, act)
        _, _, _, dtype, wt, bias, geo, shape, relu, _, kernel, sigmoid_one = held
        if x.ndim == 4:   # a height-1 2-D convolution: [N, C, 1, L] as [N, C, L]
            x = x.reshape(x.shape[0], x.shape[1], x.shape[3])
        if x.dtype != dtype or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == dtype and dst.flags.c_contiguous \
            else np.empty(shape, dtype)
        y3 = y if y.ndim == 3 else y.reshape(shape[0], shape[1], shape[-1])
        kernel(x, wt, bias, y3, *geo, relu)
        if sigmoid_one:
            sigmoid_of_one(y3.reshape(1))
        elif op.params.get("post_ops") and not relu:
            region_epilogue(y3[:, :, None, :], _ALL, op, inputs, None)
        return [y]


def sigmoid_of_one(flat):
    """flat[0] = sigmoid(flat[0]) by activations._sigmoid's formula on a numpy scalar: e = exp(-|x|), then
    (1 if x >= 0 else e) / (e + 1), the same float32 operations (the same np.exp loop, IEEE adds and divides), so
    the same bits (tested), in ~1 us where the general epilogue's six ufunc calls on one element take ~5 us
    (silero-vad's 128 -> 1 projection)."""
    v = flat[0]
    e = np.exp(-abs(v))
    flat[0] = (_ONE[v.dtype] if v >= 0 else e) / (e + _ONE[v.dtype])


def _one_activation(post_ops):
    """(fn, alpha, beta) where the post-ops are one activation step that region_epilogue runs as the numpy
    activation in place (activations.ACTIVATIONS[type](y, alpha, beta, y): no compiled pass takes it), else None."""
    if not post_ops or len(post_ops) != 1 or post_ops[0]["op"] != "activation" or compiled_steps(post_ops):
        return None
    step = post_ops[0]
    fn = ACTIVATIONS.get(step["type"])
    return None if fn is None else (fn, step.get("alpha", 0.0), step.get("beta", 0.0))


def _recipe(op, x, inputs):
    """What a run at x's shape needs that depends only on the op and that shape: (weights, shape, dtype, work
    dtype, packed [C*k, M] weights, bias, (k, stride, dilation, leading pad), output shape, whether the post-ops are
    one RELU, which the compiled loop then applies itself, the compiled loop: vectorised over output channels (four
    weight rows a pass where there are few positions), or over positions when there are few channels and many; the same floats either way: its name and the
    function; whether the post-ops are one SIGMOID on a one-element output, `sigmoid_of_one`'s case)."""
    dtype = work_dtype(op, x)
    if dtype not in _DTYPES:
        dtype = np.dtype(np.float32)
    wt = op.weights.get("kernel_ck_m")
    if wt is None:
        w = op.weights.get("kernel")
        wt = pack(w if w is not None else inputs[1])
    wt = np.ascontiguousarray(wt, dtype)
    b = conv_bias(op.weights)
    if b is None and "kernel" not in op.weights and "kernel_ck_m" not in op.weights and len(inputs) > 2:
        b = inputs[2]
    c = x.shape[1]
    k = wt.shape[0] // c
    strides, dil, pre, post, out = geometry(op.params, x.shape, [1, k] if x.ndim == 4 else [k])
    bias = _NO_BIAS[dtype] if b is None else np.ascontiguousarray(np.asarray(b, dtype).reshape(-1))
    post_ops = op.params.get("post_ops") or ()
    relu = len(post_ops) == 1 and post_ops[0]["op"] == "activation" and post_ops[0]["type"] == "RELU"
    m = wt.shape[1]
    shape = (x.shape[0], m, 1, out[-1]) if x.ndim == 4 else (x.shape[0], m, out[-1])
    wo = out[-1]
    if m <= POS_MAX_CHANNELS and wo >= POS_MIN_POSITIONS:
        kernel = "conv1d_direct_pos"
    elif m >= ROWS4_MIN_CHANNELS and PADDED_MIN_POSITIONS <= wo and wt.shape[0] * wo <= PADDED_MAX_READS and \
            bool(np.isfinite(wt).all()):
        kernel = "conv1d_rows4_padded"
    elif m >= ROWS4_MIN_CHANNELS and wo <= ROWS4_MAX_POSITIONS:
        kernel = "conv1d_rows4"
    else:
        kernel = "conv1d_direct"
    sigmoid_one = len(post_ops) == 1 and post_ops[0]["op"] == "activation" and post_ops[0]["type"] == "SIGMOID" \
        and int(np.prod(shape)) == 1
    return (op.weights, x.shape, x.dtype, np.dtype(dtype), wt, bias, (k, strides[-1], dil[-1], pre[-1]), shape,
            relu, kernel, jit.kernel(kernel), sigmoid_one)


POS_MAX_CHANNELS = 4     # at most this many output channels and
POS_MIN_POSITIONS = 64   # at least this many positions: the loop vectorised over positions (same floats)
ROWS4_MIN_CHANNELS = 8   # at least this many output channels: four weight rows a pass (jit_conv1d.py; same floats),
PADDED_MIN_POSITIONS = 3  # over every position at once for finite weights, from this many positions up to
PADDED_MAX_READS = 1 << 16   # this many (row, position) inputs (one thread: silero-vad's [1, 129, 3] -> [1, 128, 3]
                          # 9.0 -> 6.7 us, its STFT 10.3 -> 7.6, [1, 80, 64] -> [1, 64, 64] 50 -> 28),
ROWS4_MAX_POSITIONS = 4   # else position by position up to this many ([1, 128, 3] -> [1, 64, 2] 3.3 -> 2.8)
_NO_BIAS = {d: np.empty(0, d) for d in _DTYPES}
_ONE = {d: d.type(1.0) for d in _DTYPES}
