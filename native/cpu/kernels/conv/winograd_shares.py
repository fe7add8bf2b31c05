"""The winograd-f2x3-shares tactic: winograd-f2x3-jit's compiled band (jit_winograd.wino_band) over two halves of
the tile rows, run at once by the caller and a polling pool worker without the GIL (native/cpu/jit_winograd_share.py
through threads.kernel_shares), or both on the caller where no worker polls.

Why: winograd-f2x3-jit splits a layer's tile rows over the pool as Python parts; the worker's part starts 35-50 us
after the caller's (it waits for the GIL, which the caller holds while it posts the job and enters its own part),
on layers of 0.1-0.9 ms (resnet18's 3x3 convolutions, yolov8n's): resnet18's Winograd layers ran 1.5x faster on
two threads, not 2x (docs/PERFORMANCE.md, h76). A kernel share starts the worker's half in ~2 us.

Numerics: wino_band's floats (tolerance-tested in tests/native/test_winograd_jit.py); the two halves, cut at the
middle tile row whatever the pool size, are each cut into sub-bands as winograd-f2x3-jit cuts a band, so the floats
are the same at one thread and two, and differ from winograd-f2x3-jit's where its cut differs (GEMM column edges):
a tactic of its own, tolerance-tested (tests/native/test_kernel_share_tactics.py), chosen by timing; offered with
2+ threads only (on one, winograd-f2x3-jit's single band does the same work in larger GEMMs).
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.conv.winograd import WinogradF2x3Jit, _band_kernel, fused_epilogue, transform_kernel
from native.cpu.threads import kernel_shares, num_threads, sgemm_address
from native.tactics import register_tactic

_DUMMY = np.zeros(1, np.float32)


def kernels():
    """native/cpu/jit_winograd_share.py where numba, the compiled band and numpy's 64-bit cblas_sgemm are all there,
    else None (jit.offered_module)."""
    return jit.offered_module("jit_winograd_share", lambda: _band_kernel() is not None and sgemm_address())


class _Block:
    """One layer's argument block and scratch for one input shape and thread."""

    def __init__(self, k, u, bias, act, has_res, shape, pre, out, rows_cap):
        c, h, w = shape[1:]
        m = u.shape[1]
        ho, wo = out
        th, tw = -(-ho // 2), -(-wo // 2)
        wh = tw + 1
        split = th // 2
        rows = max(1, min(rows_cap, max(split, th - split)))
        nq, nv, nmm = c * 4 * (rows + 2) * wh, 16 * c * rows * wh, 16 * m * rows * wh
        self.keep = [u, bias]
        arrays = {k.U: u, k.BIAS: _DUMMY if bias is None else bias, k.RES: _DUMMY}
        for base in (k.XQ0, k.XQ1):
            scratch = [np.zeros(nq, np.float32), np.zeros(nv, np.float32), np.zeros(nmm, np.float32)]
            self.keep += scratch
            for i, a in enumerate(scratch):
                arrays[base + i] = a
        self.args = k.block({k.NB: 0 if bias is None else bias.shape[0], k.HAS_RES: int(has_res), k.C: c, k.H: h,
                             k.W: w, k.M: m, k.HO: ho, k.WO: wo, k.PH: pre[0], k.PW: pre[1], k.TH: th,
                             k.SPLIT: split, k.ROWS: rows, k.WH: wh, k.ACT: act, k.SGEMM: _band_kernel()[1],
                             k.NQ: nq, k.NV: nv, k.NMM: nmm}, arrays)


@register_tactic
class WinogradF2x3Shares(WinogradF2x3Jit):
    """winograd-f2x3-jit's band in two halves of tile rows as kernel shares (see the module docstring)."""
    name = "winograd-f2x3-shares"
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = WinogradF2x3Jit.supports(self, op, input_shapes)
        if why is not None:
            return why
        s = input_shapes[0] if input_shapes else None
        if s is None or len(s) != 4 or any(not isinstance(d, (int, np.integer)) or d < 1 for d in s):
            return "needs the input shape"
        _, _, pre, post, (ho, _) = geometry(op.params, list(s), [3, 3])
        if min(list(pre) + list(post)) < 0:
            return "no negative padding"
        m = op.params.get("num_output_maps") or s[1]
        if s[1] < 2 or m < 2:
            return "2 channels in and out at least (the band's GEMMs as numpy's matmul makes them)"
        if -(-ho // 2) < 2:
            return "fewer than 2 tile rows: nothing to cut"
        if num_threads() < 2:
            return "one thread: winograd-f2x3-jit's band is the same work in larger GEMMs (5-13% faster)"
        if kernels() is None:
            return "needs the numba extra and numpy's 64-bit-integer cblas_sgemm"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        k = kernels()
        x = np.ascontiguousarray(inputs[0], np.float32)
        u = op.weights.get("kernel_winograd")
        if u is None:
            w = op.weights.get("kernel")
            u = np.ascontiguousarray(transform_kernel(w if w is not None else inputs[1], 2).astype(np.float32))
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        act, res_i, fused = fused_epilogue(op)
        n, c = x.shape[:2]
        m = u.shape[1]
        _, _, pre, _, (ho, wo) = geometry(op.params, x.shape, [3, 3])
        res = None
        if fused and res_i is not None:
            r = inputs[res_i]
            if type(r) is np.ndarray and r.shape == (n, m, ho, wo) and r.dtype == np.float32 \
                    and r.flags.c_contiguous:
                res = r
            else:   # a broadcast, strided or other-typed residual: the epilogue adds it after the transform
                act, fused = 0, False
        bias = np.ascontiguousarray(b, np.float32).reshape(-1) if b is not None and fused else None
        key = (x.shape, act, res is not None, fused, threading.get_ident())
        cache = op.__dict__.setdefault("_wino_share_blocks", {})
        blk = cache.get(key)
        if blk is None or blk.keep[0] is not u:
            wh = -(-wo // 2) + 1
            rows_cap = max(1, tuning.WINOGRAD_BYTES // (16 * (c + m) * wh * 4))
            blk = cache[key] = _Block(k, u, bias, act, res is not None, x.shape, pre, (ho, wo), rows_cap)
        if bias is not None:     # (a bias input, not a weight, may move from call to call)
            blk.args[k.BIAS] = bias.ctypes.data
        y = outputs[0] if outputs else None
        if y is None or tuple(y.shape) != (n, m, ho, wo) or y.dtype != np.float32 or not y.flags.c_contiguous \
                or (res is not None and np.may_share_memory(y, res)):
            y = np.empty((n, m, ho, wo), np.float32)
        for ni in range(n):
            if res is not None:
                blk.args[k.RES] = res[ni].ctypes.data
            kernel_shares(k.wino_stage.address, blk.args, x, y, ni, 1)
        if fused:
            return [y]
        return finish(op, y, b, inputs, x.dtype)
