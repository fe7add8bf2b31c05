"""Products of few columns split by output rows over the caller and a polling pool worker, without the GIL
(native/cpu/jit_gemv_share.py through threads.kernel_shares; both halves on the caller where no worker polls):

  gemv-dot-shares   MatrixMultiply: a [1, K] x [K, N] product with constant weights ([bias +] RELU, or another
                    activation after it), as gemv-dot.
  1x1-gemm-shares   Convolution: a 1x1 convolution over a map of at most MAX_PIXELS pixels (MobileNetV3's conv_head
                    after the global pool, its 96 -> 576 layer over 7x7, YOLO's 1x1s over 80x80 / 40x40), [bias +]
                    RELU / HardSwish / SiLU (polyexp's exp, as the *-polyexp tactics): dot products over a 1x1 map,
                    one cblas_sgemm call a half otherwise.

Why: these layers stream megabytes of weights for a few thousand outputs (MobileNetV3-small's classifier 4 MB,
conv_head 2.4 MB: 0.09-0.15 and 0.06-0.08 ms at one thread in a run, their weights coming from L3 or memory), or are
too short (0.05-0.25 ms: yolov8n's 1x1s ran slower on two threads than on one, docs/PERFORMANCE.md h76) for the
pool's Python hand-off; each core computes half the output channels. Their own floats
(lane sums, fused multiply-adds, as gemv-dot's; OpenBLAS's over a half's rows), the same whichever thread ran a
half; timed against the other tactics by the builder, never taken by the numpy path.
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.pointwise_1x1 import is_pointwise
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.matmul import _direct_epilogue, direct_refusal
from native.cpu.threads import kernel_shares, num_threads, sgemm_address
from native.tactics import Tactic, register_tactic

_EMPTY = np.zeros(1, np.float32)
_CONV_ACTS = {"RELU": 1, "HARD_SWISH": 2, "SILU": 3, "SILU_POLYEXP": 3}   # jit_gemv_share's codes (SiLU: polyexp's)
MAX_PIXELS = 1 << 14
ONE_THREAD_PIXELS = 256   # past this, offered with 2+ threads only
_GEMV_ACTS = {"RELU": 1, "HARD_SWISH": 2}   # in the share; another activation after it


def kernels():
    """native/cpu/jit_gemv_share.py, or None where numba is missing or it does not compile (jit.offered_module)."""
    return jit.offered_module("jit_gemv_share")


def split_at(n):
    """Where the two halves of n outputs meet: near the middle, on a 16-output boundary."""
    return min(n, max(0, (n // 2 + 8) // 16 * 16))


class _Block:
    """A layer's argument block for one thread (the block holds the weights' and bias's addresses)."""

    def __init__(self, k, wt, bias, act, s):
        n, kk = wt.shape
        self.keep = (wt, bias)
        self.args = k.block({k.K: kk, k.N: n, k.HAS_BIAS: int(bias is not None), k.ACT: act, k.SPLIT: split_at(n),
                             k.S: s, k.SGEMM: sgemm_address()}, {k.WT: wt, k.BIAS: _EMPTY if bias is None else bias})


def _block(op, wt, bias, act, s=1):
    cache = op.__dict__.setdefault("_gemv_share_blocks", {})
    key = (threading.get_ident(), s)
    blk = cache.get(key)
    if blk is None or blk.keep[0] is not wt:
        blk = cache[key] = _Block(kernels(), wt, bias, act, s)
    if bias is not None:     # (a bias input, not a weight, may move from call to call)
        blk.args[kernels().BIAS] = bias.ctypes.data
    return blk


def run_rows(blk, x, y):
    """y[i] = the layer's output for x[i], each sample as one kernel share (both halves here without the 64-bit
    cblas_sgemm that GIL-free shares need: then one column only)."""
    k = kernels()
    for i in range(x.shape[0]):
        if sgemm_address():
            kernel_shares(k.gemv_stage.address, blk.args, x, y, i, 1)
        else:
            blk.args[k.X], blk.args[k.Y] = x[i].ctypes.data, y[i].ctypes.data
            k.run_part(blk.args, 0)
            k.run_part(blk.args, 1)


def output_for(outputs, shape, inputs):
    """The planned output buffer where it fits and overlaps no input (a residual the epilogue adds after the kernel
    wrote y), else a new one."""
    y = outputs[0] if outputs else None
    if y is None or y.dtype != np.float32 or tuple(y.shape) != tuple(shape) or not y.flags.c_contiguous or any(
            type(a) is np.ndarray and np.may_share_memory(y, a) for a in inputs):
        y = np.empty(shape, np.float32)
    return y


@register_tactic
class GemvDotShares(Tactic):
    """[bias +] activation(a @ b) for a one-row a: dot products over b^T's rows, the rows cut in two halves run as
    kernel shares (float32, numba extra)."""
    kind, name = "MatrixMultiply", "gemv-dot-shares"
    precisions = ("float32",)
    own_precisions = True
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = direct_refusal(op, input_shapes, "bt_gemv")
        if why:
            return why
        if any(d is None or d != 1 for d in input_shapes[0][:-1]):
            return "one row only (a left operand [.., 1, K] of known shape)"
        if kernels() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = dict(op.weights)
        if "bt_gemv" in w:
            return w
        b = w.pop("b")
        w["bt_gemv"] = np.ascontiguousarray(b if op.params.get("transpose_b") else b.T, np.float32)
        bias = _direct_epilogue(op)[0]
        if bias is not None:
            w[op.params["post_ops"][0]["weight"]] = np.ascontiguousarray(bias, np.float32)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        bias, act, other = _direct_epilogue(op, _GEMV_ACTS)
        bt = op.weights["bt_gemv"]
        n = bt.shape[0]
        a = inputs[0]
        a2 = np.ascontiguousarray(a, np.float32).reshape(1, -1)
        y = output_for(outputs, a.shape[:-1] + (n,), inputs)
        run_rows(_block(op, bt, None if bias is None else np.ascontiguousarray(bias, np.float32), act), a2,
                 y.reshape(1, n))
        if other is not None:
            res = activation_inplace(y, other["type"], other.get("alpha", 0.0), other.get("beta", 0.0))
            if res is not y:
                y[...] = res
        return [y]


@register_tactic
class PointwiseGemmShares(Tactic):
    """1x1 convolution over a map of at most MAX_PIXELS pixels, [bias +] RELU / HardSwish / SiLU, the output channels
    cut in two halves run as kernel shares (float32, numba extra); other post-ops after it (`finish`)."""
    kind, name = "Convolution", "1x1-gemm-shares"
    precisions = ("float32",)
    own_precisions = True
    honours = {"post_ops", "side"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        if not is_pointwise(op, input_shapes):
            return "1x1 kernels without padding only"
        if (op.params.get("groups", 1) or 1) != 1 or any(d != 1 for d in op.params.get("strides") or [1, 1]):
            return "ungrouped stride-1 convolutions only"
        s = input_shapes[0] if input_shapes else None
        if s is None or len(s) != 4 or any(not isinstance(d, int) or d < 0 for d in s) \
                or not 0 < s[2] * s[3] <= MAX_PIXELS:
            return f"a map of known shape, at most {MAX_PIXELS} pixels, only"
        if s[2] * s[3] > 1 and not sgemm_address():
            return ("needs the numba extra (pip install debugkit[jit]) and numpy's 64-bit-integer cblas_sgemm past "
                    "one pixel")
        if s[2] * s[3] > ONE_THREAD_PIXELS and num_threads() < 2:
            return f"one thread: past {ONE_THREAD_PIXELS} pixels 1x1-gemm's one GEMM is the same work (4-7% faster)"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if op.weights.get("kernel") is None and op.weights.get("kernel_rows") is None:
            return "constant weights only"
        if kernels() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_rows"] = np.ascontiguousarray(np.asarray(w, np.float32).reshape(w.shape[0], -1))
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        wt = op.weights.get("kernel_rows")
        if wt is None:
            w = np.asarray(op.weights["kernel"], np.float32)
            wt = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        x = np.ascontiguousarray(inputs[0], np.float32)
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        steps = op.params.get("post_ops") or ()
        act = 0 if not steps else (_CONV_ACTS.get(steps[0]["type"]) if len(steps) == 1
                                   and steps[0]["op"] == "activation" else None)
        fused = act is not None and not op.params.get("side")
        n, m = x.shape[0], wt.shape[0]
        s = x.shape[2] * x.shape[3]
        y = output_for(outputs, (n, m) + x.shape[2:], inputs)
        bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None and fused else None
        run_rows(_block(op, wt, bias, act if fused else 0, s), x.reshape(n, -1, s), y.reshape(n, m, s))
        if fused:
            return [y]
        return finish(op, y, b, inputs, x.dtype)
