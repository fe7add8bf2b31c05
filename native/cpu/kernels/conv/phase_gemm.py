"""The phase-gemm-s2 tactic: a 3x3 stride-2 convolution as four GEMMs over its input's phase planes, no patch matrix
(the numba extra; kernels in native/cpu/jit_phase_gemm.py).

Stride-2 3x3 layers (yolov8n's seven downsamplers, resnet18's three) ran as im2col-gemm / nhwc-gemm: a padded copy
of the input, a patch matrix 2.25x the input's size copied with stride-2 reads (~0.3 ns an element), the GEMM,
then the epilogue over the whole output. On yolov8n's 16->32 layer at 80x80 (one thread, AMD Zen 5, OpenBLAS
unpinned) that was 0.78 ms for a 0.34 ms GEMM; ONNX Runtime's direct NCHWc kernel takes 0.26 ms with its SiLU.
Here a band of output rows splits its input rows into the four (row, column) parity planes, [rows + 1, Wo + 1]
each, one pass over the input; the nine taps are then four shifts of runs of those planes (jit_phase_gemm's
docstring lists them), so the convolution is four GEMMs of K = 4C, 2C, 2C, C reading the planes in place, into a
band buffer one column wider than the output, and one compiled pass writes the output rows with the bias, a residual
add and a RELU / SiLU (polyexp's exp, as the *-polyexp tactics). A band's planes and product stay in cache; the band
cut depends on the shapes only (never the pool size), so the floats are the same at any thread count.

Numerics: the same products as a direct sum, summed by BLAS in four partial GEMMs (another order than im2col's one
GEMM), so a tactic of its own, tolerance-tested against a float64 reference (tests/native/test_phase_gemm.py).
Float32, groups 1, dilation 1; other post-ops, a merged shortcut or a broadcast residual run after it (`finish`).
"""
from __future__ import annotations

import threading

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry
from native.cpu.kernels.conv.sgemm import sgemm_address
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.kernels.conv.winograd import fused_epilogue
from native.cpu.threads import kernel_shares, num_threads, parallel_for, split
from native.cpu.threads import sgemm_address as share_sgemm
from native.tactics import Tactic, register_tactic

_EMPTY = np.empty(0, np.float32)
_EMPTY3 = np.empty((0, 0, 0), np.float32)
# (row phase, column phase) of z's four plane groups, and per GEMM (first group, groups, row shift, column shift):
# jit_phase_gemm.PHASES / SHIFTS, kept here too so that packing the weights needs no numba
PHASES = ((1, 0), (0, 0), (0, 1), (1, 1))
SHIFTS = ((0, 4, 0, 0), (0, 2, 0, 1), (1, 2, 1, 0), (1, 1, 1, 1))
_STATE: dict = {}


def kernels():
    """(jit_phase_gemm.phase_gemm_band, the address of numpy's 64-bit-integer cblas_sgemm), or None where numba or
    that symbol is missing (asked once per process)."""
    if not jit.available():
        return None
    if "k" not in _STATE:
        got = None
        try:
            addr = sgemm_address()
            if addr:
                got = (jit.kernel("phase_gemm_band"), addr)
        except Exception:  # noqa: BLE001 - any failure to compile or find BLAS means the tactic is not offered
            got = None
        _STATE["k"] = got
    return _STATE["k"]


def pack(w):
    """The four GEMMs' weights of a [M, C, 3, 3] kernel side by side, [M, 9C] float32: per shift (da, db) the taps
    (r + 2da, s + 2db) of its phases (r, s), [M, groups * C] with the phase groups in z's order."""
    w = np.asarray(w, np.float32)
    return np.ascontiguousarray(np.concatenate([w[:, :, r + 2 * da, s + 2 * db] for first, count, da, db in SHIFTS
                                                for r, s in PHASES[first:first + count]], axis=1))


def gemm_weights(packed):
    """The four GEMMs' [M, groups * C] weights: column views of `pack`'s matrix (its row stride their lda)."""
    c = packed.shape[1] // 9
    edges = np.cumsum([0] + [count * c for _, count, _, _ in SHIFTS])
    return tuple(packed[:, a:b] for a, b in zip(edges[:-1], edges[1:]))


def band_rows(c, m, wo):
    """Output rows per band: the band's planes [4C, (rows + 1)(Wo + 1)] and product [M, rows (Wo + 1)] in
    tuning.PHASE_GEMM_BYTES."""
    per_row = 4 * (4 * c + m) * (wo + 1)
    return max(1, (tuning.PHASE_GEMM_BYTES - 16 * c * (wo + 1)) // per_row)


def band_cut(ho, bw, most, even):
    """Rows per band: at most `most`, and with `even` an even number of bands where each keeps >= EVEN_MIN_COLS
    GEMM columns (two threads get equal shares: three bands of yolov8n's first layers split 2:1; on 10x10 maps two
    bands' narrower GEMMs cost one thread 10-20%). From the shapes only, never the pool size, so the floats are
    the same at any thread count."""
    count = -(-ho // max(1, most))
    if even and count % 2 == 1 and -(-ho // (count + 1)) * bw >= EVEN_MIN_COLS:
        count += 1
    return -(-ho // count)


EVEN_MIN_COLS = 192


def _share_kit():
    """native/cpu/jit_phase_share.py where kernel shares run (numba, numpy's 64-bit cblas_sgemm), else None (jit.offered_module)."""
    return jit.offered_module("jit_phase_share", share_sgemm)


class _Block:
    """A layer's kernel-share argument block and its two parts' scratch, for one input shape and thread."""

    def __init__(self, kit, shape, packed, bias, act, has_res, pre, out, rows, m):
        c, h, w = shape[1:]
        ho, wo = out
        bw = wo + 1
        nb = -(-ho // rows)
        self.keep = [packed, bias]
        arrays = {kit.WT: packed, kit.BIAS: bias if bias.shape[0] else _DUMMY, kit.RES: _DUMMY}
        for zw, yww in ((kit.Z0, kit.YW0), (kit.Z1, kit.YW1)):
            z, yw = np.zeros((4 * c, (rows + 1) * bw + 1), np.float32), np.zeros((m, rows * bw), np.float32)
            self.keep += [z, yw]
            arrays[zw], arrays[yww] = z, yw
        self.args = kit.block({kit.C: c, kit.H: h, kit.W: w, kit.M: m, kit.HO: ho, kit.WO: wo, kit.NB: bias.shape[0],
                               kit.HAS_RES: int(has_res), kit.ACT: act, kit.PH: pre[0], kit.PW: pre[1],
                               kit.ROWS: rows, kit.HALF: nb // 2, kit.BANDS: nb, kit.SGEMM: kernels()[1]}, arrays)


def _share_block(op, kit, shape, packed, bias, act, has_res, pre, out, rows, m):
    key = (shape, act, has_res, bias.shape[0], rows, threading.get_ident())
    cache = op.__dict__.setdefault("_phase_share_blocks", {})
    blk = cache.get(key)
    if blk is None or blk.keep[0] is not packed:
        blk = cache[key] = _Block(kit, shape, packed, bias, act, has_res, pre, out, rows, m)
    return blk


_DUMMY = np.zeros(1, np.float32)


@register_tactic
class PhaseGemmS2(Tactic):
    """3x3 stride-2 convolution: four GEMMs over the phase planes of bands of rows (see the module docstring)."""
    kind, name = "Convolution", "phase-gemm-s2"
    honours = {"post_ops", "side"}
    precisions = ("float32",)
    own_precisions = True

    def supports(self, op, input_shapes):
        p = op.params
        if list(p.get("kernel_shape") or []) != [3, 3]:
            return "3x3 kernels only"
        if list(p.get("strides") or [1, 1]) != [2, 2] or any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "stride 2, dilation 1 only"
        if (p.get("groups", 1) or 1) != 1 or p.get("integer"):
            return "ungrouped float convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        if min(list(p.get("pre_padding") or [0, 0]) + list(p.get("post_padding") or [0, 0])) < 0:
            return "no negative padding"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if kernels() is None:
            return "needs the numba extra (pip install debugkit[jit]) and numpy's 64-bit cblas_sgemm"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        return tuning.PHASE_GEMM_BYTES * max(1, num_threads())

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_phase_s2"] = pack(w)
        return weights

    def run(self, op, inputs):
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        band_fn, sgemm = kernels()
        packed = op.weights.get("kernel_phase_s2")
        if packed is None:
            w = op.weights.get("kernel")
            packed = pack(w if w is not None else inputs[1])
        ws = gemm_weights(packed)
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        _, _, pre, _, (ho, wo) = geometry(op.params, x.shape, [3, 3])
        act, res_i, fused = fused_epilogue(op)
        n, c = x.shape[:2]
        m = ws[0].shape[0]
        res = _EMPTY3
        if fused and res_i is not None:
            r = inputs[res_i]
            if type(r) is np.ndarray and r.shape == (n, m, ho, wo) and r.dtype == np.float32:
                res = r
            else:   # a broadcast or other-typed residual: the epilogue adds it after the GEMMs
                act, fused = 0, False
        bias = _EMPTY if b is None or not fused else np.ascontiguousarray(b, np.float32).reshape(-1)
        y = np.empty((n, m, ho, wo), np.float32)
        bw = wo + 1
        big = n * m * 9 * c * ho * wo >= tuning.PARALLEL_MIN_MACS
        rows = band_cut(ho, bw, band_rows(c, m, wo), big and n % 2 == 1)
        bands = [(ni, r0, min(ho, r0 + rows)) for ni in range(n) for r0 in range(0, ho, rows)]
        threads = num_threads() if big else 1
        nb = -(-ho // rows)
        kit = _share_kit() if threads > 1 and nb > 1 else None
        if kit is not None and packed.flags.c_contiguous and (b is None or conv_bias(op.weights) is not None) \
                and (res is _EMPTY3 or res.flags.c_contiguous):   # addresses that hold from call to call
            blk = _share_block(op, kit, x.shape, packed, bias, act, res is not _EMPTY3, pre, (ho, wo), rows, m)
            for ni in range(n):
                if res is not _EMPTY3:
                    blk.args[kit.RES] = res[ni].ctypes.data
                kernel_shares(kit.phase_stage.address, blk.args, x, y, ni, 1)
            return [y] if fused else finish(op, y, b, inputs, x.dtype)

        def part(rng):
            z = np.empty((4 * c, (rows + 1) * bw + 1), np.float32)
            yw = np.empty((m, rows * bw), np.float32)
            for ni, r0, r1 in bands[rng[0]:rng[1]]:
                band_fn(x[ni], z, yw, ws[0], ws[1], ws[2], ws[3], bias, y[ni], r0, r1 - r0, pre[0], pre[1], act,
                        res if res is _EMPTY3 else res[ni], sgemm)
        parallel_for(part, split(len(bands), min(threads, len(bands))))
        if fused:
            return [y]
        return finish(op, y, b, inputs, x.dtype)
