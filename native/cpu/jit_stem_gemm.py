"""A convolution over few input channels (an image model's stem: resnet18's 7x7 / 2, 3 -> 64 over 224x224) as
bands of one GEMM each over patch rows copied from the input's phase planes, as a kernel share (the `jit` extra):
the tactic stem-gemm-shares (native/cpu/kernels/conv/stem_gemm.py).

    stem_gemm_stage(args int64 *, code)   (a numba @cfunc: stem_gemm_stage.address; threads.kernel_shares runs it)
        one stage; part p runs the bands [0, HALF) (p 0) or [HALF, BANDS) (p 1) of one image, ROWS output rows a
        band (the last fewer), with its own scratch: the band's input rows zero-padded and split into their s x s
        (row, column) phases (jit_stem's fill), then the patch matrix P [C * KH * KW, rows * WZ] whose row
        (c, i, j) is one contiguous run of phase (i % s, j % s) of channel c from flat offset (i // s) * WZ + j // s
        (output (a, q) of the band is column a * WZ + q: the columns q >= WO computed and dropped), then
        Y = W [M, C * KH * KW] @ P as one cblas_sgemm call (numpy's OpenBLAS at the address SGEMM), then the
        output rows with + bias and the activation (0 none, 1 RELU: NaN kept, 2 HardSwish as
        activations._hard_swish). Bands do not depend on each other, so the floats do not depend on the thread that
        ran a part.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's input [C, H, W] and output
        [M, HO, WO]) are written per call by kernel_stages.

Why: im2col-gemm builds resnet18's stem patch matrix ([147, 12544], 7.4 MB) with strided gathers, then one GEMM on
one core (1.57 ms at one thread in a run, 1.18 at two, where ONNX Runtime takes 0.94 at one); here each patch row is
a copy of a unit-stride run, a band's patches stay in cache for its GEMM, and the two halves run at once.
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_phase_gemm import _sgemm
from native.cpu.jit_stem import _fill_phases
from native.cpu.threads import share_block

(X, Y, WT, C, H, W, M, HO, WO, KH, KW, S, PT, PL, ACT, HAS_BIAS, BIAS, ROWS, HALF, BANDS, WZ, SGEMM, Z0, P0, YB0, Z1,
 P1, YB1) = range(28)
WORDS = 28
_ZERO = np.float32(0.0)


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(inline="always")
def phase_rows(rows, kh, s):
    """Rows of each phase plane for `rows` output rows: the kernel's reach ((kh - 1) // s rows more), and one for
    the flat runs' overrun past the last row."""
    return rows + (kh - 1) // s + 1


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _band(x, y, wt_addr, bias, has_bias, act, z, row, p, yb, r0, nr, kh, kw, s, pt, pl, wz, sgemm):
    c_n = x.shape[0]
    m_n, _, wo = y.shape
    n = nr * wz
    _fill_phases(x, z, row, r0 * s, pt, pl)
    for c in range(c_n):
        for i in range(kh):
            plane = z[c, i % s]
            for j in range(kw):
                src = plane[j % s].reshape(-1)[(i // s) * wz + j // s:]
                dst = p[(c * kh + i) * kw + j]
                for q in range(n):
                    dst[q] = src[q]
    k = c_n * kh * kw
    _sgemm(sgemm, np.int64(m_n), np.int64(n), np.int64(k), wt_addr, np.int64(k), np.int64(p.ctypes.data),
           np.int64(p.shape[1]), _ZERO, np.int64(yb.ctypes.data), np.int64(yb.shape[1]))
    sixth, half, one = np.float32(1.0 / 6.0), np.float32(0.5), np.float32(1.0)
    for m in range(m_n):
        bv = bias[m] if has_bias else _ZERO
        src = yb[m]
        for a in range(nr):
            out = y[m, r0 + a]
            v0 = src[a * wz:]
            if act == 2:
                for q in range(wo):
                    v = v0[q] + bv
                    out[q] = v * min(max(v * sixth + half, _ZERO), one)
            elif act == 1:
                for q in range(wo):
                    v = v0[q] + bv
                    out[q] = _ZERO if v < _ZERO else v
            else:
                for q in range(wo):
                    out[q] = v0[q] + bv


@numba.njit(nogil=True, cache=True)
def _part(a, part):
    c, m, ho, wo, kh, kw, s, rows, wz = a[C], a[M], a[HO], a[WO], a[KH], a[KW], a[S], a[ROWS], a[WZ]
    b0, b1 = (0, a[HALF]) if part == 0 else (a[HALF], a[BANDS])
    if b1 <= b0:
        return
    x = carray(_f32_at(a[X]), (c, a[H], a[W]))
    y = carray(_f32_at(a[Y]), (m, ho, wo))
    bias = carray(_f32_at(a[BIAS]), (m if a[HAS_BIAS] else 0,))
    prow = phase_rows(rows, kh, s)
    zbase = a[Z1] if part else a[Z0]
    z = carray(_f32_at(zbase), (c, s, s, prow, wz))
    row = carray(_f32_at(zbase + 4 * c * s * s * prow * wz), (s * wz,))
    p = carray(_f32_at(a[P1] if part else a[P0]), (c * kh * kw, rows * wz))
    yb = carray(_f32_at(a[YB1] if part else a[YB0]), (m, rows * wz))
    for b in range(b0, b1):
        r0 = b * rows
        nr = min(rows, ho - r0)
        # the phase planes of this band only: its z view starts at the band's first row
        _band(x, y, a[WT], bias, a[HAS_BIAS] != 0, a[ACT], z, row, p, yb, r0, nr, kh, kw, s, a[PT], a[PL], wz,
              a[SGEMM])


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def stem_gemm_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
