"""The InvertedResidual layer (backends/engine/builder/passes/fusion_ir.py): [expand 1x1 + act] -> depthwise + act
-> [squeeze-excite] -> project 1x1 [+ x], one layer, the expanded tensor channels-last throughout (ir-direct).

Per sample: the expand GEMM reads x [C, H*W] as a transposed operand, so its output comes out [H*W, E] (channels
last) at no cost; its bias and activation are written straight into a zero-bordered [Hp, Wp, E] buffer the
depthwise taps read (each tap one contiguous run of E channels); the project GEMM multiplies the depthwise output
[Ho*Wo, E] as stored and its [Ho*Wo, M] product is stored NCHW with bias and shortcut in one pass. The
squeeze-excite gate multiplies the project kernel (E x M products) instead of the depthwise output (Ho x Wo x E), and
its mean's sums come from the depthwise pass. Against the two to four layers it replaces: no NCHW <-> NHWC
transposes of the expanded tensor, one dispatch, two fewer passes over it. Its own floats (the gate folded into the
kernel, float64 channel sums, padding rows' zero products skipped), so tolerance-tested against the unfused layers
(tests/backends/test_fusion_ir.py).

ir-direct: the passes compiled (native/cpu/jit_ir.py, the numba extra); ir-planes: the expanded tensor
channels-first and the depthwise stage as jit_dw.depthwise_planes (wide, short maps; blocks without an expand
stage); ir-numpy: ir-direct's steps in numpy (einsum taps), for builds without numba. The builder's timing picks
per layer. Both compiled tactics split their two stages over the CPU pool by channels (SPLIT_MIN_MACS).
ir-direct-shares / ir-rows-shares / ir-planes-shares: the same passes cut in halves (channels / map rows /
ir-planes' channels), each stage's halves run at once on the caller and a pool worker as kernel shares, without the
GIL (native/cpu/jit_ir_share.py, threads.kernel_shares: ~2 us a hand-off, so blocks of any size split), or both on
the caller with the same cuts.
"""
from __future__ import annotations

import math
import threading
import types

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_into
from native.cpu.threads import kernel_shares, num_threads, parallel_for, sgemm_address, split
from native.tactics import Tactic, register_tactic

_ACT_CODES = {"RELU": 1, "HARD_SWISH": 2, "HARD_SWISH_RELU6": 3}        # jit_ir's expand / depthwise activations
_SE_CODES = {"RELU": 1, "HARD_SIGMOID": 2, "HARD_SWISH": 3, "CLIP": 4}   # jit_se's
_F32 = np.dtype(np.float32)
_EMPTY = np.empty(0, np.float32)
_EMPTY2 = np.empty((0, 0), np.float32)
_EMPTY64 = np.empty(0, np.float64)
_as_strided = np.lib.stride_tricks.as_strided


def geometry(params, h, w):
    """((kh, kw), (sh, sw), (pt, pl), (pb, pr), (Ho, Wo)) of the depthwise stage on an H x W map."""
    kh, kw = params["kernel_shape"]
    sh, sw = params["strides"]
    pt, pl = params["pre_padding"]
    pb, pr = params["post_padding"]
    return (kh, kw), (sh, sw), (pt, pl), (pb, pr), ((h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1)


class Packed:
    """The layer's weights as the passes read them, made once per layer (op.__dict__): expand kernel [E, C] and
    transposed (None without an expand stage), depthwise taps [kh, kw, E], squeeze-excite kernels transposed,
    project kernel [M, E] and transposed, flat biases (zeros for a missing expand or depthwise bias)."""

    __slots__ = ("finite", "parts", "wp_t", "we", "we_t", "be", "taps", "bd", "wp", "bp", "se", "w1t", "b1", "w2t",
                 "b2", "a1", "a2")

    def __init__(self, op):
        wt = op.weights
        f32 = lambda a: np.ascontiguousarray(np.asarray(a, np.float32))   # noqa: E731
        bias = lambda k: f32(wt[k]).reshape(-1) if k in wt else _EMPTY   # noqa: E731
        self.we = self.we_t = None      # a block without an expand stage
        if "expand_kernel" in wt:
            we = f32(wt["expand_kernel"])
            self.we = we.reshape(we.shape[0], -1)
            self.we_t = np.ascontiguousarray(self.we.T)
        dk = f32(wt["dw_kernel"])
        self.taps = np.ascontiguousarray(dk.reshape(dk.shape[0], dk.shape[-2], dk.shape[-1]).transpose(1, 2, 0))
        wp = f32(wt["project_kernel"])
        self.wp = wp.reshape(wp.shape[0], -1)
        self.wp_t = np.ascontiguousarray(self.wp.T)
        e = self.taps.shape[2]
        self.finite = bool(np.isfinite(self.taps).all())   # then padding rows' products are zeros: skipped
        self.parts = {}
        self.be = bias("expand_bias") if "expand_bias" in wt else np.zeros(e, np.float32)   # the kernels add one
        self.bd = bias("dw_bias") if "dw_bias" in wt else np.zeros(e, np.float32)
        self.bp = bias("project_bias")
        self.se = "squeeze_kernel" in wt
        if self.se:
            w1, w2 = f32(wt["squeeze_kernel"]), f32(wt["excite_kernel"])
            self.w1t = np.ascontiguousarray(w1.reshape(w1.shape[0], -1).T)
            self.w2t = np.ascontiguousarray(w2.reshape(w2.shape[0], -1).T)
            self.b1, self.b2 = bias("squeeze_bias"), bias("excite_bias")
            self.a1, self.a2 = _se_rows(op.params.get("squeeze_ops")), _se_rows(op.params.get("excite_ops"))

    def taps_of(self, e0, e1):
        """The depthwise taps of channels [e0, e1) as their own [kh, kw, e1 - e0 rounded up to 16] (zeros after),
        64-byte aligned: every kernel tap's run starts a cache line (one per split)."""
        got = self.parts.get((e0, e1))
        if got is None:
            kh, kw = self.taps.shape[:2]
            got = aligned((kh, kw, _lines(e1 - e0)))
            got[...] = 0
            got[:, :, :e1 - e0] = self.taps[:, :, e0:e1]
            self.parts[(e0, e1)] = got
        return got

    @classmethod
    def of(cls, op):
        got = op.__dict__.get("_ir_packed")
        if got is None:
            got = op.__dict__["_ir_packed"] = cls(op)
        return got


def _se_rows(steps):
    """[k, 3] rows (code, alpha, beta) of jit_se's activation codes, or None when a step has none."""
    rows = []
    for s in steps or ():
        code = _SE_CODES.get(s.get("type"))
        if code is None:
            return None
        rows.append((code, float(s.get("alpha", 0.0)), float(s.get("beta", 0.0))))
    return np.array(rows, np.float64).reshape(-1, 3)


def _act_code(steps):
    """jit_ir's code for at most one activation step (0: none), None for anything else."""
    steps = list(steps or ())
    if not steps:
        return 0
    return _ACT_CODES.get(steps[0].get("type")) if len(steps) == 1 else None


def _check(op, input_shapes):
    s = input_shapes[0] if input_shapes else None
    if s is not None and len(s) != 4:
        return "4-D (NCHW) inputs only"
    dtypes = getattr(input_shapes, "dtypes", None)
    if dtypes and dtypes[0] not in (None, "float32"):
        return "float32 input only"
    return None


def _output(outputs, shape):
    dst = outputs[0] if outputs else None
    if dst is None or tuple(dst.shape) != shape or dst.dtype != _F32 or not dst.flags.c_contiguous:
        dst = np.empty(shape, np.float32)
    return dst


def _lines(c):
    """c rounded up to whole 64-byte lines of float32."""
    return -(-c // 16) * 16


def aligned(shape):
    """An uninitialised float32 C-contiguous array whose first element starts a 64-byte line (made once per
    layer: the taps)."""
    size = math.prod(shape)
    buf = np.empty(size + 16, np.float32)
    skip = (-buf.ctypes.data // 4) % 16
    return buf[skip:skip + size].reshape(shape)


_LOCAL = threading.local()


def scratch(*shapes):
    """Uninitialised arrays of these shapes (float32, or (shape, dtype) pairs), each starting a 64-byte line, carved
    from one buffer of the calling thread that is kept and grown as needed: ir-direct's channels-last runs are whole
    512-bit vectors (unaligned ones measured 1.2-1.8x slower on the depthwise taps), without an allocation per call.
    The views are kept per thread and list of shapes (carving them cost ~3 us a call). A layer uses them only within
    its run, which never calls another layer on the same thread."""
    views = getattr(_LOCAL, "views", None)
    got = views.get(shapes) if views is not None else None
    if got is not None:
        return got
    specs = [s if isinstance(s[-1], type) else (s, np.float32) for s in shapes]
    sizes = [_lines(math.prod(s) * np.dtype(d).itemsize // 4) for s, d in specs]
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.size < sum(sizes):
        buf = _LOCAL.buf = aligned((sum(sizes),))
        views = _LOCAL.views = {}     # views of the old buffer: gone with it
    elif len(views) >= 256:           # shapes that vary from run to run (dynamic dims): keep the recent ones
        views.clear()
    out, at = [], 0
    for (shape, dtype), size in zip(specs, sizes):
        n = math.prod(shape) * np.dtype(dtype).itemsize // 4
        out.append(buf[at:at + n].view(dtype).reshape(shape))
        at += size
    got = views[shapes] = tuple(out)
    return got


def _jit_supports(op, input_shapes):
    """Why the compiled tactics cannot run `op` (None: they can)."""
    why = _check(op, input_shapes)
    if why is not None:
        return why
    p = op.params
    if _act_code(p.get("expand_ops")) is None or _act_code(p.get("dw_ops")) is None:
        return "expand / depthwise activations other than one RELU, HARD_SWISH or HARD_SWISH_RELU6"
    if _se_rows(p.get("squeeze_ops")) is None or _se_rows(p.get("excite_ops")) is None:
        return "squeeze-excite activations other than RELU, HARD_SIGMOID, HARD_SWISH, CLIP"
    if _kernels() is None:
        return "needs the numba extra (pip install debugkit[jit])"
    return None


_IR_KERNELS = ("expanded_into_padded", "depthwise_nhwc", "gate", "scaled_rows", "bias_residual", "bias_act_rows",
               "channel_sums", "gate_cols", "scaled_cols", "project_out")
_held = {}


def _kernels():
    """native/cpu/jit_ir.py's kernels (through jit.kernel) as attributes where numba runs (and DEBUGKIT_JIT is not
    0), else None."""
    if not jit.available():
        return None
    ns = _held.get("ir")
    if ns is None:
        ns = _held["ir"] = types.SimpleNamespace(**{name: jit.kernel(name) for name in _IR_KERNELS})
    return ns


@register_tactic
class InvertedResidualDirect(Tactic):
    """The block's passes compiled (native/cpu/jit_ir.py; numba extra), float32, the expand / depthwise activations
    RELU, HARD_SWISH or HARD_SWISH_RELU6, the squeeze-excite ones RELU, HARD_SIGMOID, HARD_SWISH or CLIP."""
    kind, name = "InvertedResidual", "ir-direct"
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = _jit_supports(op, input_shapes)
        if why is None and "expand_kernel" not in op.weights:
            why = "no expand stage: its channels-last buffer would be a transpose of the input (ir-planes reads it)"
        return why

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        k = _kernels()
        pk = Packed.of(op)
        x = np.ascontiguousarray(inputs[0], np.float32)
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (pt, pl), (pb, pr), (ho, wo), act_e, act_d, parts_a, parts_b = _shape_plan(op, pk, x.shape)
        e, m, s = pk.taps.shape[2], pk.wp.shape[0], ho * wo
        cp = _lines(e)     # the pixel stride of the channels-last buffers: whole cache lines
        xp, y, y2, g, t, sums, gate, wps = _buffers(h + pt + pb, w + pl + pr, cp, ho, wo, h * w, e, m)
        lo, hi = (pt, pt + h) if pk.finite else (0, h + pt + pb)    # the input rows of xp: padding rows skipped
        if not pk.se:
            sums, wps = _EMPTY64, pk.wp_t
        dst = _output(outputs, (n, m, ho, wo))
        residual = op.params.get("residual")
        if len(parts_a) == 1 and len(parts_b) == 1:   # on the calling thread: the same calls, without the stages'
            taps = pk.taps_of(0, e)                    # closures and channel slices (~2 us of a block's ~9)
            for ni in range(n):
                xn = x[ni].reshape(c, h * w)
                np.matmul(xn.T, pk.we_t, out=g)
                k.expanded_into_padded(g, pk.be, act_e, xp, pt, pl, h, w, 0)
                k.depthwise_nhwc(xp, taps, pk.bd, act_d, y, sh, sw, sums, 0, lo, hi)
                if pk.se:
                    k.gate_cols(sums, float(s), pk.w1t, pk.b1, pk.a1, pk.w2t, pk.b2, pk.a2, gate, pk.wp_t, wps)
                np.matmul(y2, wps, out=t)
                k.project_out(t, pk.bp, xn if residual else _EMPTY2, dst[ni].reshape(m, s), 0, m)
            return [dst]
        for ni in range(n):
            xn = x[ni].reshape(c, h * w)
            o = dst[ni].reshape(m, s)
            res = xn if residual else _EMPTY2

            def expand_dw(r):
                """The expanded channels [e0, e1): GEMM, epilogue into the padded buffer, depthwise taps."""
                e0, e1 = r
                np.matmul(xn.T, pk.we_t[:, e0:e1], out=g[:, e0:e1])
                k.expanded_into_padded(g, pk.be[e0:e1], act_e, xp, pt, pl, h, w, e0)
                k.depthwise_nhwc(xp, pk.taps_of(e0, e1), pk.bd[e0:e1], act_d, y, sh, sw, sums[e0:e1], e0, lo, hi)

            def project(r):
                """The output channels [m0, m1): the gated kernel's columns, [S, M] GEMM, stored NCHW with bias and
                shortcut."""
                m0, m1 = r
                if pk.se:
                    k.scaled_cols(pk.wp_t, gate, wps, m0, m1)
                np.matmul(y2, wps[:, m0:m1], out=t[:, m0:m1])
                k.project_out(t, pk.bp, res, o, m0, m1)
            _run_parts(expand_dw, parts_a)
            if pk.se:
                k.gate(sums, float(s), pk.w1t, pk.b1, pk.a1, pk.w2t, pk.b2, pk.a2, gate)
            _run_parts(project, parts_b)
        return [dst]


@register_tactic
class InvertedResidualShares(InvertedResidualDirect):
    """ir-direct's passes with each of its two stages cut in two, expanded channels (at a multiple of 16) then output
    channels, the halves run at once on the caller and a pool worker without the GIL (native/cpu/jit_ir_share.py
    through threads.kernel_shares: a hand-off ~1 us instead of a Python one's 25-100, so 20-80 us blocks are worth
    splitting; the squeeze-excite gate, which needs every channel's sum, between the stages); both halves on the
    caller, with the same cuts, where no worker is polling, the other CPU is taken or the pool has one thread. Its
    own floats (OpenBLAS's GEMM floats depend on the columns a call covers), the same whichever thread ran a half.
    Needs numba and numpy's 64-bit-integer cblas_sgemm."""
    name = "ir-direct-shares"
    rows = False     # ir-rows-shares: cut by rows instead

    def supports(self, op, input_shapes):
        why = super().supports(op, input_shapes)
        if why is None and _share_kit() is None:
            why = "needs the numba extra and numpy's 64-bit-integer cblas_sgemm"
        if why is None and not self.rows and op.weights["dw_kernel"].shape[0] < 32:
            why = "fewer than 32 expanded channels: nothing to cut (16-channel parts)"
        s = input_shapes[0] if input_shapes else None
        if why is None and self.rows and s is not None and isinstance(s[2], int) and s[2] >= 0 \
                and geometry(op.params, s[2], max(1, s[3] if isinstance(s[3], int) else 1))[4][0] < 2:
            why = "fewer than 2 output rows: nothing to cut"
        return why

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if _share_kit() is None:     # a plan loaded where numpy's cblas_sgemm is not reachable: ir-direct's passes
            return super().run(op, inputs, outputs, workspace, stream)
        pk = Packed.of(op)
        x = np.ascontiguousarray(inputs[0], np.float32)
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (pt, pl), (pb, pr), (ho, wo), *_ = _shape_plan(op, pk, x.shape)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        xp, y, _, g, t, sums, _, wps = _buffers(h + pt + pb, w + pl + pr, _lines(e), ho, wo, h * w, e, m)
        if not pk.se:
            sums, wps = _EMPTY64, pk.wp_t
        rows = (pt, pt + h) if pk.finite else (0, h + pt + pb)
        fn, args, _ = _share_block(op, pk, x.shape, (xp, y, g, t, sums, wps), rows, self.rows)
        dst = _output(outputs, (n, m, ho, wo))
        for ni in range(n):
            kernel_shares(fn, args, x, dst, ni, 3 if self.rows else 2)
        return [dst]


@register_tactic
class InvertedResidualRowShares(InvertedResidualShares):
    """ir-direct-shares cut by rows of the map instead of channels (jit_ir_share's ROWS: the expand GEMM's input
    rows, then the depthwise stage's output rows, then the project stage's output channels, three stages): for
    large maps with few channels (MobileNetV3's 56x56 and 28x28 blocks, 72-88 channels), where channel halves left
    the depthwise loop runs of 32-48 channels and OpenBLAS packing the expand GEMM's input twice (alone on one
    thread: 1.15-1.4x ir-direct). Its own floats (row parts; the channel sums added from two parts)."""
    name = "ir-rows-shares"
    rows = True


def _share_block(op, pk, shape, bufs, rows, by_rows=False):
    """(ir_stage's address, the argument block, what it points at) of this layer, input shape and thread's scratch
    (jit_ir_share: ir-direct-shares' two stages, each cut in two). Made once per layer, shape and scratch buffer."""
    xp, y, g, t, sums, wps = bufs
    key = (shape, id(xp), by_rows)
    blocks = op.__dict__.setdefault("_ir_shares", {})
    got = blocks.get(key)
    if got is None:
        js, addr = _share_kit()
        c, h, w = shape[1:]
        p = op.params
        (kh, kw), (sh, sw), (pt, pl), _, (ho, wo) = geometry(p, h, w)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        esplit = _parts(e, 1 << 62, 16, 2)[0][1]
        msplit = m // 2
        gates = np.empty((2, e), np.float32)
        if by_rows:    # the whole channel range; per-part sums and their totals [4, E]
            esplit, sums = e, np.zeros((4, e), np.float64)
        arrays = {js.WE_T: pk.we_t, js.G: g, js.BE: pk.be, js.XP: xp, js.TAPS0: pk.taps_of(0, esplit),
                  js.TAPS1: pk.taps_of(esplit, e) if esplit < e else pk.taps_of(0, esplit), js.BD: pk.bd, js.YB: y,
                  js.SUMS: sums, js.GATE: gates, js.WP_T: pk.wp_t, js.WPS: wps, js.T: t, js.BP: pk.bp}
        dims = {js.C: c, js.HW: h * w, js.E: e, js.M: m, js.S: ho * wo, js.H: h, js.W: w, js.HP: xp.shape[0],
                js.WP: xp.shape[1], js.CP: xp.shape[2], js.HO: ho, js.WO: wo, js.PT: pt, js.PL: pl, js.SH: sh,
                js.SW: sw, js.LO: rows[0], js.HI: rows[1], js.ACT_E: _act_code(p.get("expand_ops")),
                js.ACT_D: _act_code(p.get("dw_ops")), js.SE: int(pk.se), js.RES: int(bool(p.get("residual"))),
                js.KH: kh, js.KW: kw, js.ESPLIT: esplit, js.MSPLIT: msplit, js.BPN: pk.bp.size,
                js.ROWS: int(by_rows), js.RSPLIT: h // 2, js.OSPLIT: ho // 2}
        if pk.se:
            arrays.update({js.W1T: pk.w1t, js.B1: pk.b1, js.A1: pk.a1, js.W2T: pk.w2t, js.B2: pk.b2, js.A2: pk.a2})
            dims.update({js.MID: pk.w1t.shape[1], js.B1N: pk.b1.size, js.A1N: pk.a1.shape[0], js.B2N: pk.b2.size,
                         js.A2N: pk.a2.shape[0]})
        if len(blocks) >= 64:     # shapes that vary from run to run: keep the recent ones
            blocks.clear()
        got = blocks[key] = (js.ir_stage.address, js.block(addr, dims, arrays), (arrays, bufs, sums))
    return got


def _share_kit():
    """(native/cpu/jit_ir_share, numpy's cblas_sgemm address) where kernel shares can run, else None."""
    if not jit.available():
        return None
    got = _held.get("share")
    if got is None:
        got = False
        addr = sgemm_address()
        if addr:
            try:
                js = jit.module("jit_ir_share")
                got = (js, addr) if js is not None else False
            except Exception:  # noqa: BLE001 - any failure to compile means the Python hand-offs
                got = False
        _held["share"] = got
    return got or None


def _buffers(hp, wp, cp, ho, wo, hw, e, m):
    """ir-direct's per-call arrays from the thread's scratch: the padded input and the depthwise output
    channels-last (pixel stride cp), the latter's [Ho*Wo, E] view, the expand GEMM's output, the project GEMM's,
    the channel sums, the gate and the gated kernel."""
    key = ("ir-direct", hp, wp, cp, ho, wo, hw, e, m)
    views = getattr(_LOCAL, "views", None)
    got = views.get(key) if views is not None else None
    if got is None:
        xp, y, g, t, sums, gate, wps = scratch((hp, wp, cp), (ho, wo, cp), (hw, e), (ho * wo, m),
                                               ((e,), np.float64), (e,), (e, m))
        got = _LOCAL.views[key] = (xp, y, y.reshape(ho * wo, cp)[:, :e], g, t, sums, gate, wps)
    return got


def _shape_plan(op, pk, shape):
    """(geometry..., expand / depthwise activation codes, the two stages' parts) for this input shape and pool
    size, worked out once per layer and shape (~5 us of Python a call otherwise)."""
    key = (shape, num_threads())
    plans = op.__dict__.setdefault("_ir_plans", {})
    got = plans.get(key)
    if got is None:
        p = op.params
        c, h, w = shape[1:]
        ks, st, pre, post, out = geometry(p, h, w)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        got = plans[key] = (ks, st, pre, post, out, _act_code(p.get("expand_ops")), _act_code(p.get("dw_ops")),
                            _parts(e, ((c if pk.we is not None else 0) + ks[0] * ks[1]) * e * h * w, 16),
                            _parts(m, m * e * out[0] * out[1]))
    return got


# the multiply-adds a stage needs before its work is split over the pool (~0.4 ms of one core). Two threads, quiet VM
# (07:26, load 0.5-1.1, tools/benchmark.py, 100 iterations, two runs each): mobilenetv3 1.53-1.68 ms never split,
# 1.74-1.75 from 4M (its 56x56 and 14x14-stride-2 blocks), 1.88-1.95 from 2M, 1.80-1.88 from 1M; ppocr_cls
# 0.53-0.56 never, 0.55 from 4M, 0.68-0.88 from 2M: a hand-off (25-100 us here) costs more than half a block
SPLIT_MIN_MACS = 1 << 24


def _parts(size, macs, unit=1, threads=None):
    """[start, stop) ranges of `size` rows / channels, one per pool thread (or `threads`) where the stage is worth
    splitting, cut at multiples of `unit` (16 channels: each part's channel-last runs start a cache line)."""
    t = (threads or num_threads()) if macs >= SPLIT_MIN_MACS else 1
    blocks = -(-size // unit)
    if t < 2 or blocks < t:
        return [(0, size)]
    return [(a * unit, min(size, b * unit)) for a, b in split(blocks, t)]


def _run_parts(fn, parts):
    if len(parts) == 1:
        fn(parts[0])
    else:
        parallel_for(fn, parts)


@register_tactic
class InvertedResidualPlanes(InvertedResidualDirect):
    """ir-direct with the expanded tensor channels-first: the expand GEMM writes [E, H*W], the depthwise stage is
    jit_dw.depthwise_planes (each tap one run over a channel's whole plane: the better loop on wide, short maps such
    as PaddleOCR's 3 x 96, where a channels-last pixel holds few channels), the project GEMM reads [E, Ho*Wo].
    Symmetric depthwise padding only (depthwise_planes pads each plane on both sides alike)."""
    name = "ir-planes"

    def supports(self, op, input_shapes):
        why = _jit_supports(op, input_shapes)
        if why is None and list(op.params["pre_padding"]) != list(op.params["post_padding"]):
            why = "asymmetric depthwise padding"
        if why is None and jit.kernel("depthwise_planes") is None:
            why = "needs the numba extra (pip install debugkit[jit])"
        return why

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        k, planes = _kernels(), jit.kernel("depthwise_planes")
        pk = Packed.of(op)
        x = np.ascontiguousarray(inputs[0], np.float32)
        p = op.params
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (pt, pl), _, (ho, wo), act_e, act_d, parts_a, parts_b = _shape_plan(op, pk, x.shape)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        taps = pk.taps.reshape(kh * kw, e)
        ex, y, sums, gate, wps = scratch((e, h * w), (e, ho, wo), ((e,), np.float64), (e,), (m, e))
        yf = y.reshape(e, ho * wo)
        if not pk.se:
            wps = pk.wp
        dst = _output(outputs, (n, m, ho, wo))
        if len(parts_a) == 1 and len(parts_b) == 1:   # on the calling thread: the same calls without closures/slices
            for ni in range(n):
                xn = x[ni].reshape(c, h * w)
                src = xn
                if pk.we is not None:
                    np.matmul(pk.we, xn, out=ex)
                    k.bias_act_rows(ex, pk.be, act_e)
                    src = ex
                planes(src.reshape(e, h, w), taps, pk.bd, y, kh, kw, sh, sw, 1, 1, pt, pl, act_d)
                if pk.se:
                    k.channel_sums(yf, sums)
                    k.gate(sums, float(ho * wo), pk.w1t, pk.b1, pk.a1, pk.w2t, pk.b2, pk.a2, gate)
                    k.scaled_rows(pk.wp, gate, wps)
                o = dst[ni].reshape(m, ho * wo)
                np.matmul(wps, yf, out=o)
                k.bias_residual(o, pk.bp, xn if p.get("residual") else _EMPTY2)
            return [dst]
        for ni in range(n):
            xn = x[ni].reshape(c, h * w)
            o = dst[ni].reshape(m, ho * wo)
            res = xn if p.get("residual") else _EMPTY2

            def expand_dw(r):
                """The expanded channels [e0, e1): GEMM rows, epilogue, depthwise planes, channel sums."""
                e0, e1 = r
                src = xn
                if pk.we is not None:
                    np.matmul(pk.we[e0:e1], xn, out=ex[e0:e1])
                    k.bias_act_rows(ex[e0:e1], pk.be[e0:e1], act_e)
                    src = ex
                planes(src[e0:e1].reshape(e1 - e0, h, w), taps[:, e0:e1], pk.bd[e0:e1], y[e0:e1], kh, kw, sh, sw,
                       1, 1, pt, pl, act_d)
                if pk.se:
                    k.channel_sums(yf[e0:e1], sums[e0:e1])

            def project(r):
                m0, m1 = r
                if pk.se:
                    k.scaled_rows(pk.wp[m0:m1], gate, wps[m0:m1])
                np.matmul(wps[m0:m1], yf, out=o[m0:m1])
                k.bias_residual(o[m0:m1], pk.bp[m0:m1], res[m0:m1])
            _run_parts(expand_dw, parts_a)
            if pk.se:
                k.gate(sums, float(ho * wo), pk.w1t, pk.b1, pk.a1, pk.w2t, pk.b2, pk.a2, gate)
            _run_parts(project, parts_b)
        return [dst]


@register_tactic
class InvertedResidualPlanesShares(InvertedResidualPlanes):
    """ir-planes' steps as kernel shares (jit_ir_share's PLANES; threads.kernel_shares, as ir-direct-shares): the
    expanded channels' halves (expand GEMM rows, depthwise planes, sums), then the output channels' halves (gate,
    gated kernel rows, GEMM rows, bias and shortcut), on the caller and a pool worker at once, or both halves on
    the caller with the same cuts (the same floats). MobileNetV3's first block (no expand stage, 16 channels on a
    112x112 map) and PaddleOCR's wide, short maps."""
    name = "ir-planes-shares"

    def supports(self, op, input_shapes):
        why = super().supports(op, input_shapes)
        if why is None and _share_kit() is None:
            why = "needs the numba extra and numpy's 64-bit-integer cblas_sgemm"
        if why is None and op.weights["dw_kernel"].shape[0] < 16:
            why = "fewer than 16 channels"
        return why

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if _share_kit() is None:
            return super().run(op, inputs, outputs, workspace, stream)
        pk = Packed.of(op)
        x = np.ascontiguousarray(inputs[0], np.float32)
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (pt, pl), _, (ho, wo), *_ = _shape_plan(op, pk, x.shape)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        bufs = scratch((e, h * w), (e, ho, wo), ((e,), np.float64), (e,), (m, e))
        fn, args = _planes_block(op, pk, x.shape, bufs)
        dst = _output(outputs, (n, m, ho, wo))
        for ni in range(n):
            kernel_shares(fn, args, x, dst, ni, 2)
        return [dst]


def _planes_block(op, pk, shape, bufs):
    """(ir_stage's address, argument block) of ir-planes-shares for this layer, shape and thread's scratch."""
    ex, y, sums, _, wps = bufs
    key = (shape, id(ex), "planes")
    blocks = op.__dict__.setdefault("_ir_shares", {})
    got = blocks.get(key)
    if got is None:
        js, addr = _share_kit()
        c, h, w = shape[1:]
        p = op.params
        (kh, kw), (sh, sw), (pt, pl), _, (ho, wo) = geometry(p, h, w)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        taps = np.ascontiguousarray(pk.taps.reshape(kh * kw, e))
        gates = np.empty((2, e), np.float32)
        arrays = {js.G: ex, js.BE: pk.be, js.TAPS0: taps, js.BD: pk.bd, js.YB: y, js.SUMS: sums, js.GATE: gates,
                  js.WP_T: pk.wp, js.WPS: wps, js.BP: pk.bp}
        if pk.we is not None:
            arrays[js.WE_T] = pk.we
        dims = {js.C: c, js.HW: h * w, js.E: e, js.M: m, js.S: ho * wo, js.H: h, js.W: w, js.HO: ho, js.WO: wo,
                js.PT: pt, js.PL: pl, js.SH: sh, js.SW: sw, js.ACT_E: _act_code(p.get("expand_ops")),
                js.ACT_D: _act_code(p.get("dw_ops")), js.SE: int(pk.se), js.RES: int(bool(p.get("residual"))),
                js.KH: kh, js.KW: kw, js.ESPLIT: e // 2, js.MSPLIT: m // 2, js.BPN: pk.bp.size, js.PLANES: 1,
                js.EXPAND: int(pk.we is not None)}
        if pk.se:
            arrays.update({js.W1T: pk.w1t, js.B1: pk.b1, js.A1: pk.a1, js.W2T: pk.w2t, js.B2: pk.b2, js.A2: pk.a2})
            dims.update({js.MID: pk.w1t.shape[1], js.B1N: pk.b1.size, js.A1N: pk.a1.shape[0], js.B2N: pk.b2.size,
                         js.A2N: pk.a2.shape[0]})
        if len(blocks) >= 64:
            blocks.clear()
        got = blocks[key] = (js.ir_stage.address, js.block(addr, dims, arrays), (arrays, bufs, taps))
    return got[0], got[1]


@register_tactic
class InvertedResidualNumpy(Tactic):
    """ir-direct's steps in numpy (the depthwise taps as one einsum over a strided view), for builds without numba."""
    kind, name = "InvertedResidual", "ir-numpy"
    precisions = ("float32",)
    writes_outputs = True

    def supports(self, op, input_shapes):
        return _check(op, input_shapes)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        pk = Packed.of(op)
        x = np.ascontiguousarray(inputs[0], np.float32)
        p = op.params
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (pt, pl), (pb, pr), (ho, wo) = geometry(p, h, w)
        e, m = pk.taps.shape[2], pk.wp.shape[0]
        xp = np.zeros((h + pt + pb, w + pl + pr, e), np.float32)
        y = np.empty((ho, wo, e), np.float32)
        st = xp.strides
        taps = _as_strided(xp, (ho, wo, kh, kw, e), (st[0] * sh, st[1] * sw, st[0], st[1], st[2]))
        dst = _output(outputs, (n, m, ho, wo))
        for ni in range(n):
            xn = x[ni].reshape(c, h * w)
            if pk.we_t is not None:
                g = np.matmul(xn.T, pk.we_t)
                _bias_acts(g, pk.be, p.get("expand_ops"))
            else:
                g = xn.T
            xp[pt:pt + h, pl:pl + w] = g.reshape(h, w, e)
            np.einsum("hwijc,ijc->hwc", taps, pk.taps, out=y)
            _bias_acts(y, pk.bd, p.get("dw_ops"))
            wp = pk.wp
            if pk.se:
                mean = (np.add.reduce(y.reshape(ho * wo, e), 0, np.float64) / (ho * wo)).astype(np.float32)
                hid = _dense(pk.w1t, pk.b1, p.get("squeeze_ops"), mean)
                wp = pk.wp * _dense(pk.w2t, pk.b2, p.get("excite_ops"), hid)
            o = dst[ni].reshape(m, ho * wo)
            np.matmul(wp, y.reshape(ho * wo, e).T, out=o)
            if pk.bp.size:
                o += pk.bp.reshape(m, 1)
            if p.get("residual"):
                o += xn
        return [dst]


def _bias_acts(a, bias, steps):
    if bias.size:
        a += bias
    for s in steps or ():
        activation_into(a, s)


def _dense(wt, b, steps, v):
    out = v @ wt
    _bias_acts(out, b, steps)
    return out
