"""Pooling "max-pool-shares": a float32 2-D max pool (any window, stride, dilation, padding) with an optional ReLU
moved past it, strided-taps' compiled loop (native/cpu/jit_pool.py) over two halves of each image's planes run at
once by the caller and a polling pool worker without the GIL (native/cpu/jit_pool_share.py through
threads.kernel_shares; both halves on the caller where no worker polls).

Why: resnet18's stem pool (3x3 / 2 over [64, 112, 112] + ReLU) split its planes over the pool's Python hand-off, the
worker's half starting 35-50 us late, then ran the ReLU as a pass of its own; 0.29 ms at two threads against ONNX
Runtime's 0.11 at one; 3-wide windows at column stride 2 split each row's even and odd columns first (unit-stride
loops). The same floats as strided-taps (max exact, np.maximum's pairs in its order; the ReLU as
numpy's clip: NaN and -0.0 kept), tested bit for bit, but a tactic of its own that the builder times.
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.pooling import pool_geometry
from native.cpu.threads import kernel_shares, sgemm_address
from native.tactics import Tactic, register_tactic



def kernels():
    """native/cpu/jit_pool_share.py, or None without numba (jit.offered_module)."""
    return jit.offered_module("jit_pool_share")


def _relu(op):
    """True for one RELU post-op, False for none, None for anything else."""
    steps = op.params.get("post_ops") or ()
    if not steps:
        return False
    if len(steps) == 1 and steps[0]["op"] == "activation" and steps[0]["type"] == "RELU":
        return True
    return None


@register_tactic
class MaxPoolShares(Tactic):
    """2-D MAX pooling of float32 NCHW [+ RELU], two halves of the planes as kernel shares."""
    kind, name = "Pooling", "max-pool-shares"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        p = op.params
        if p.get("type", "MAX") != "MAX" or p.get("global") or p.get("num_outputs", 1) > 1:
            return "MAX pooling with one output only"
        if _relu(op) is None:
            return "no post-op but a RELU"
        s = input_shapes[0] if input_shapes else None
        if s is None or len(s) != 4 or any(not isinstance(d, int) or d < 1 for d in s) or s[1] < 2:
            return "a 4-D input of known shape, 2 channels at least, only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 only"
        if len(p.get("window") or []) != 2:
            return "2-D windows only"
        if kernels() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        k = kernels()
        x = inputs[0]
        if type(x) is not np.ndarray or x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, np.float32)
        n, c, h, w = x.shape
        ks, strides, dil, pre, _, _, out = pool_geometry(op.params, [h, w])
        relu = bool(_relu(op))
        y = outputs[0] if outputs else None
        if y is None or tuple(y.shape) != (n, c, *out) or y.dtype != np.float32 or not y.flags.c_contiguous:
            y = np.empty((n, c, *out), np.float32)
        key = (x.shape, threading.get_ident())
        cache = op.__dict__.setdefault("_pool_share_blocks", {})
        blk = cache.get(key)
        if blk is None:
            cols = [np.zeros((h, out[1]), np.float32) for _ in range(2)] + \
                [np.zeros((2, out[1] + 1), np.float32) for _ in range(2)]    # + each part's even / odd columns
            args = k.block({k.R: c, k.H: h, k.W: w, k.HO: out[0], k.WO: out[1], k.KH: ks[0], k.KW: ks[1],
                            k.SH: strides[0], k.SW: strides[1], k.DH: dil[0], k.DW: dil[1], k.PH: pre[0],
                            k.PW: pre[1], k.SPLIT: c // 2, k.RELU: int(relu)},
                           {k.COLS0: cols[0], k.COLS1: cols[1], k.EO0: cols[2], k.EO1: cols[3]})
            blk = cache[key] = (args, cols)
        args = blk[0]
        for ni in range(n):
            if sgemm_address():
                kernel_shares(k.pool_stage.address, args, x, y, ni, 1)
            else:     # no GIL-free shares here (numpy's BLAS without the 64-bit symbol): both halves in turn
                args[k.X], args[k.Y] = x[ni].ctypes.data, y[ni].ctypes.data
                k.run_part(args, 0)
                k.run_part(args, 1)
        return [y]
