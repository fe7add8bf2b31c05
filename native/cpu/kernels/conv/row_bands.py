"""shifted-gemm-bands and sliding-window-bands: those two tactics cut into bands of output rows over the CPU pool.

On one thread shifted-gemm and sliding-window are this CPU's best 3x3 convolutions on 14x14-56x56 maps (ResNet's
stride-1 layers: no column matrix, or one kernel row's), where im2col-gemm's banded driver costs ~1.4x their time;
but they ran on one thread, so a two-thread build had to choose between the efficient kernel on one core and the
less efficient one on two (the timing picked either, and one core idled through the layer or both ran the slower
code). Here each pool thread computes its own band of output rows with the same GEMMs on fewer columns, and the
epilogue (bias, post-ops, merged shortcut) runs once over the whole output as the base tactic's does.

Numerics: per output, the same reduction as the base tactic (its taps or kernel rows in order), but BLAS may sum a
band's GEMM in another order than the whole one's, so each is its own tactic (the builder times it; offered only
with more than one pool thread).
"""
from __future__ import annotations

import numpy as np

from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import tap_slices
from native.cpu.kernels.conv.shifted_gemm import ShiftedGemm, shifted_taps
from native.cpu.kernels.conv.sliding_window import SlidingWindow
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import register_tactic


def _bands(n, ho, macs):
    """(sample, first row, end row) per band: one band per pool thread and sample, or the whole output below the
    parallel threshold."""
    threads = num_threads() if macs >= tuning.PARALLEL_MIN_MACS else 1
    return [(ni, r0, r1) for ni in range(n) for r0, r1 in split(ho, max(1, -(-threads // n)))]


def _pool_refusal():
    return "one CPU thread: the base tactic is the same work unsplit" if num_threads() < 2 else None


@register_tactic
class ShiftedGemmBands(ShiftedGemm):
    """shifted-gemm in bands of output rows over the pool (see the module docstring)."""
    kind, name = "Convolution", "shifted-gemm-bands"

    def supports(self, op, input_shapes):
        why = ShiftedGemm.supports(self, op, input_shapes)
        return why if why is not None else _pool_refusal()

    def run(self, op, inputs):
        x, xf, wt, b, ks, dil, (ho, wo), wp = self.operands(op, inputs)
        n, c = x.shape[:2]
        m = wt.shape[1]
        y = np.empty((n, m, ho * wp), xf.dtype)

        def band(task):
            ni, r0, r1 = task
            shifted_taps(xf[ni:ni + 1], wt, ks, dil, wp, y[ni:ni + 1], r0 * wp, r1 * wp)
        parallel_for(band, _bands(n, ho, n * m * c * ks[0] * ks[1] * ho * wp))
        return finish(op, y.reshape(n, m, ho, wp)[:, :, :, :wo], b, inputs, x.dtype)


@register_tactic
class SlidingWindowBands(SlidingWindow):
    """sliding-window in bands of output rows over the pool (see the module docstring)."""
    kind, name = "Convolution", "sliding-window-bands"

    def supports(self, op, input_shapes):
        why = SlidingWindow.supports(self, op, input_shapes)
        return why if why is not None else _pool_refusal()

    def run(self, op, inputs):
        x, xp, wr, b, kw, strides, dil, (ho, wo) = self.operands(op, inputs)
        dtype = x.dtype
        kh, m = wr.shape[:2]
        n, c = x.shape[:2]
        y = np.empty((n, m, ho * wo), dtype)

        def band(task):
            ni, r0, r1 = task
            rows_out = r1 - r0
            rows = np.empty((c, kw, rows_out, wo), dtype)
            yb = y[ni, :, r0 * wo:r1 * wo]
            tmp = np.empty((m, rows_out * wo), dtype) if kh > 1 else None
            for i in range(kh):
                for j in range(kw):
                    rs, cs = tap_slices((i, j), dil, strides, (ho, wo))
                    top = rs.start + r0 * strides[0]   # the tap's input row for output row r0
                    rows[:, j] = xp[ni, :, top:top + (rows_out - 1) * strides[0] + 1:strides[0], cs]
                part = rows.reshape(c * kw, rows_out * wo)
                if i == 0:
                    np.matmul(wr[i], part, out=yb)
                else:
                    np.matmul(wr[i], part, out=tmp)
                    yb += tmp
        parallel_for(band, _bands(n, ho, n * m * c * kh * kw * ho * wo))
        return finish(op, y.reshape(n, m, ho, wo), b, inputs, x.dtype)

