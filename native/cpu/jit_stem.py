"""A 3x3 convolution over few input channels (an image model's stem: 3 -> 16 at stride 2), direct, as a kernel
share (the `jit` extra): the tactic stem-direct-shares (native/cpu/kernels/conv/stem_direct.py).

    stem_stage(args int64 *, code)   (a numba @cfunc: stem_stage.address; threads.kernel_shares runs it)
        one stage; part p computes output rows [0, SPLIT) (p 0) or [SPLIT, HO) (p 1) of every output channel: it
        copies the input rows it reads, zero-padded, into its own scratch split by column phase (stride 2: even
        and odd columns, so each tap reads unit-stride), then per output row and channel one pass over the row
        per input channel, the nine taps' products summed in (row, column) tap order in one expression (fused
        multiply-adds), then + bias and the activation (0 none, 1 RELU as numpy's clip to [0, inf], 2 HardSwish as
        activations._hard_swish: x * clip(x / 6 + 0.5, 0, 1), 3 SiLU as jit_act.silu_polyexp_inplace over the row:
        the *-polyexp tactics' floats). Rows do not depend on each other, so the floats do not depend on the cut or
        on the thread that ran a part.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's input [C, H, W] and output
        [M, HO, WO]) are written per call by kernel_stages.
    run_rows(args, r0, r1, z)   the same rows without the share (tests, and hosts without numpy's 64-bit cblas).

Why: phase-gemm-s2 runs MobileNetV3's stem (3 -> 16, 224x224 -> 112x112, 5.4 M multiply-adds) as four GEMMs of
K = 12, 6, 6, 3 whose packing costs more than their arithmetic, then a HardSwish pass: 0.25 ms a run at one thread,
where ONNX Runtime's direct NCHWc kernel takes 0.10 ms. Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_act import silu_polyexp_inplace
from native.cpu.threads import share_block

(X, Y, C, H, W, M, HO, WO, S, PT, PL, ACT, HAS_BIAS, WT, BIAS, Z0, Z1, WZ, SPLIT, ACC0, ACC1, ACCN) = range(22)
WORDS = 22
_FM = dict(nogil=True, error_model="numpy", cache=True, fastmath={"contract"})


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(**_FM)
def _fill_phases(x, z, row, r0, pt, pl):
    """z[c, p, q, i, j] = the zero-padded input at row r0 + s * i + p, column s * j + q (s = z.shape[1]), through
    `row` [s * WZ], one padded row at a time (a plain copy, then the even / odd split as one unit-stride loop)."""
    c_n, h, w = x.shape
    s, rows, wz = z.shape[1], z.shape[3], z.shape[4]
    zero = np.float32(0.0)
    n = max(0, min(w, s * wz - pl))
    for c in range(c_n):
        for p in range(s):
            for i in range(rows):
                xr = r0 + s * i + p - pt
                dst = z[c, p, 0, i] if s == 1 else row
                if xr < 0 or xr >= h:
                    for j in range(s * wz):
                        dst[j] = zero
                else:
                    src = x[c, xr]
                    for j in range(pl):
                        dst[j] = zero
                    d = dst[pl:]
                    for j in range(n):
                        d[j] = src[j]
                    for j in range(pl + n, s * wz):
                        dst[j] = zero
                if s == 2:
                    e, o = z[c, p, 0, i], z[c, p, 1, i]
                    for j in range(wz):
                        e[j] = row[2 * j]
                        o[j] = row[2 * j + 1]


@numba.njit(**_FM)
def _rows(x, y, wt, bias, has_bias, act, z, row, acc, r0, r1, s, pt, pl):
    """Output rows [r0, r1) of every channel (see the module docstring); z [C, s, s, rows, WZ], row [s * WZ], acc
    [M, BAND * WZ]: this part's scratch. z holds the padded input split into its s x s (row, column) phases; output
    (i, j) of a band, flat f = i * WZ + j, reads tap (ki, kj) in phase (ki % s, kj % s) at flat f + (ki // s) * WZ
    + kj // s: each tap is one unit-stride run over the band (the columns past WO computed and dropped)."""
    if r1 <= r0:
        return
    c_n = x.shape[0]
    m_n, _, wo = y.shape
    wz = z.shape[4]
    _fill_phases(x, z, row, r0 * s, pt, pl)
    band = max(1, acc.shape[1] // wz)
    sixth, half = np.float32(1.0 / 6.0), np.float32(0.5)
    zero, one = np.float32(0.0), np.float32(1.0)
    q1, o1 = 1 % s, 1 // s            # kernel row / column 1: phase, offset in rows / columns
    o2 = 2 // s                       # kernel row / column 2: phase 0, this offset
    for b0 in range(r0, r1, band):
        nb = min(band, r1 - b0)
        n = nb * wz
        f0 = (b0 - r0) * wz
        for c in range(c_n):
            p00, p01 = z[c, 0, 0].reshape(-1), z[c, 0, q1].reshape(-1)
            p10, p11 = z[c, q1, 0].reshape(-1), z[c, q1, q1].reshape(-1)
            t0, t1, t2 = p00[f0:], p01[f0 + o1:], p00[f0 + o2:]
            f1 = f0 + o1 * wz
            t3, t4, t5 = p10[f1:], p11[f1 + o1:], p10[f1 + o2:]
            f2 = f0 + o2 * wz
            t6, t7, t8 = p00[f2:], p01[f2 + o1:], p00[f2 + o2:]
            for m in range(m_n):
                k = wt[m, c]
                am = acc[m]
                k0, k1, k2, k3, k4, k5, k6, k7, k8 = k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]
                if c == 0:
                    for j in range(n):
                        am[j] = (t0[j] * k0 + t1[j] * k1 + t2[j] * k2 + t3[j] * k3 + t4[j] * k4 + t5[j] * k5
                                 + t6[j] * k6 + t7[j] * k7 + t8[j] * k8)
                else:
                    for j in range(n):
                        am[j] = am[j] + (t0[j] * k0 + t1[j] * k1 + t2[j] * k2 + t3[j] * k3 + t4[j] * k4
                                         + t5[j] * k5 + t6[j] * k6 + t7[j] * k7 + t8[j] * k8)
        for m in range(m_n):
            bv = bias[m] if has_bias else zero
            for i in range(nb):
                out = y[m, b0 + i]
                a = acc[m, i * wz:]
                if act == 2:
                    for j in range(wo):
                        v = a[j] + bv
                        t = min(max(v * sixth + half, zero), one)
                        out[j] = v * t
                elif act == 1:     # numpy's clip to [0, inf]: NaN and -0.0 kept
                    for j in range(wo):
                        v = a[j] + bv
                        out[j] = zero if v < zero else v
                elif act == 3:     # SiLU by polyexp's exp: the *-polyexp tactics' pass (its own floats, no contract)
                    for j in range(wo):
                        out[j] = a[j] + bv
                    silu_polyexp_inplace(out, False)
                else:
                    for j in range(wo):
                        out[j] = a[j] + bv


@numba.njit(**_FM)
def _part(a, part):
    c, h, w, m, ho, wo, s = a[C], a[H], a[W], a[M], a[HO], a[WO], a[S]
    r0, r1 = (0, a[SPLIT]) if part == 0 else (a[SPLIT], ho)
    x = carray(_f32_at(a[X]), (c, h, w))
    y = carray(_f32_at(a[Y]), (m, ho, wo))
    wt = carray(_f32_at(a[WT]), (m, c, 9))
    bias = carray(_f32_at(a[BIAS]), (m if a[HAS_BIAS] else 0,))
    wz = a[WZ]
    rows = phase_rows(r1 - r0, s)
    base = a[Z1] if part else a[Z0]
    z = carray(_f32_at(base), (c, s, s, rows, wz))
    row = carray(_f32_at(base + 4 * c * s * s * rows * wz), (s * wz,))
    acc = carray(_f32_at(a[ACC1] if part else a[ACC0]), (m, a[ACCN] // m))
    _rows(x, y, wt, bias, a[HAS_BIAS] != 0, a[ACT], z, row, acc, r0, r1, s, a[PT], a[PL])


@numba.njit(inline="always", **_FM)
def phase_rows(rows, s):
    """Rows of each of a part's phase planes for `rows` output rows: the kernel's reach (2 // s rows more), and one
    for the flat runs' overrun past the last row."""
    return rows + 2 // s + 1


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def stem_stage(ptr, code):
    a = carray(ptr, (WORDS,))
    _part(a, code & 1)


@numba.njit(nogil=True, cache=True)
def run_rows(a, part):
    """Part `part` of the block `a` (words X / Y already set) on this thread."""
    _part(a, part)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
