"""MatrixMultiply "packed-gemm-t-rows" / "packed-gemm-t-rows-polyexp": packed-gemm-t's product (y^T = b^T a^T, the
orientation OpenBLAS runs 1.3-1.8x faster for 16-32 rows: BERT's and GPT-2's [16..32, K] x [K, N] layers) split over
the CPU pool by the rows of b^T (the product's columns).

packed-gemm-cols splits the plain orientation (a @ b) by columns, so on two threads it starts from the slower
single-thread product; here each part is one row-major, untransposed cblas_sgemm: b^T's rows n0:n1 [n1-n0, K] times
a^T (a copied to [K, M], 32 KB for [32, 256]) into y^T's rows n0:n1, which the pool's worker runs without the GIL
(threads.gemm_shares, native/cpu/jit_gemm_share.py) and the caller runs as numpy's matmul of the same slices
otherwise (the same call, so the same floats: tested). The cut is fixed (two parts of whole 16-row blocks, the
caller's 7/16), not the thread count, and a one-row a (numpy takes gemv there) never goes to shares: the floats never
depend on the threads there are. Not packed-gemm-t's call (that one passes a transposed), so a tactic of its own,
timed against the others. The epilogue, packed-gemm-t's (the copy back to row-major with the bias [+ activation]) or
packed-gemm-t-polyexp's (the copy, then bias + GELU by rows.gelu_rows), runs per part on the rows' columns: the
caller's part while the worker still computes the other, so on two threads a layer costs ~ max(own part and its
epilogue, the worker's part) + the worker's part's epilogue.
"""
from __future__ import annotations

import numpy as np

from native.cpu import threads
from native.cpu.kernels import rows
from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.matmul import (PackedGemmTransposed, _PolyExpEpilogue, _polyexp_epilogue, bias_and_activation,
                                       transposed_back)
from native.tactics import register_tactic

ROW_PARTS = 2               # fixed, not the thread count: the parts are the floats' unit
CALLER_SHARE = 7 / 16       # the caller's part of the rows: it also runs its part's epilogue while the worker runs
                            # the other part, then the other part's epilogue
ROWS_MIN_MACS = 1 << 20     # ~10 us of one core: below it a hand-off to the pool costs more than half the product
_ALIGN = 16


def edges_for(n: int) -> list[int]:
    """The row cut of an [n, K] b^T: [0, c, n], c a whole number of 16-row blocks near CALLER_SHARE of them."""
    blocks = n // _ALIGN
    return [0, _ALIGN * min(blocks - 1, max(1, round(blocks * CALLER_SHARE))), n]


def gemm_t_rows(bt, a, epilogue=None):
    """y^T [N, M] = bt [N, K] @ a [M, K]^T (float32, bt C-contiguous), bt's rows in parts (`edges_for`), each part
    one BLAS product of whole rows, then `epilogue(yt, r0, r1)` of that part (on the thread that can run it next:
    the caller's own part while the worker computes the other); on the pool where the product is large enough and
    the pool can take it. Returns y^T."""
    n, k = bt.shape
    m = a.shape[0]
    at = np.ascontiguousarray(a.T)
    yt = np.empty((n, m), np.float32)
    big = m * n * k >= ROWS_MIN_MACS and n >= ROW_PARTS * _ALIGN
    edges = edges_for(n) if big else [0, n]
    if big and m >= 2 and _native_shares(bt, at, yt, edges,
                                         None if epilogue is None else lambda: epilogue(yt, edges[0], edges[1])):
        if epilogue is not None:
            for r0, r1 in zip(edges[1:-1], edges[2:]):
                epilogue(yt, r0, r1)
        return yt

    def part(i):
        r0, r1 = edges[i], edges[i + 1]
        np.matmul(bt[r0:r1], at, out=yt[r0:r1])
        if epilogue is not None:
            epilogue(yt, r0, r1)
    if big:
        threads.parallel_for(part, range(len(edges) - 1))
    else:
        part(0)
    return yt


def _native_shares(bt, at, yt, edges, between) -> bool:
    """yt[r0:r1] = bt[r0:r1] @ at for each pair of `edges` as one row-major cblas_sgemm each, on the caller and the
    pool's polling worker without the GIL (threads.gemm_shares; `between()` after the caller's own part); False,
    with nothing computed, where it cannot."""
    return threads.gemm_shares([threads.gemm_share(bt[r0:r1], at, yt[r0:r1])
                                for r0, r1 in zip(edges[:-1], edges[1:])], between)


def _float32_only(input_shapes):
    dtypes = getattr(input_shapes, "dtypes", None)
    if dtypes and dtypes[0] not in (None, "float32"):
        return "float32 input only"
    return None


def _operand(op, inputs):
    a = inputs[0]
    if op.params.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    return a if a.dtype == np.float32 else a.astype(np.float32)


@register_tactic
class PackedGemmTransposedRows(PackedGemmTransposed):
    """packed-gemm-t with b^T's rows split over the CPU pool (module docstring); float32 weights and input."""
    name = "packed-gemm-t-rows"
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        b = op.weights.get("bt_packed", op.weights.get("b"))
        if b is not None and b.dtype != np.float32:
            return "float32 weights only"
        return _float32_only(input_shapes) or super().supports(op, input_shapes)

    def run(self, op, inputs):
        a = _operand(op, inputs)
        bt = op.weights["bt_packed"]
        n, k = bt.shape
        a2 = a.reshape(-1, k)
        bias, act = bias_and_activation(op)
        if bias is None or bias.dtype != np.float32:
            yt = gemm_t_rows(bt, a2)
            return [transposed_back(op, inputs, yt, a.shape[:-1], np.dtype(np.float32), np.dtype(np.float32))]
        y = np.empty((a2.shape[0], n), np.float32)

        def add_bias(yt, r0, r1):   # transposed_back's one pass, per part: the same float32 sums
            np.add(yt[r0:r1].T, bias[r0:r1], out=y[:, r0:r1])
        gemm_t_rows(bt, a2, add_bias)
        y = y.reshape(a.shape[:-1] + (n,))
        if act is not None:
            y = activation_inplace(y, act["type"], act.get("alpha", 0.0), act.get("beta", 0.0))
        return [y]


@register_tactic
class PackedGemmTransposedRowsPolyExp(_PolyExpEpilogue, PackedGemmTransposedRows):
    """packed-gemm-t-rows with its [bias +] GELU epilogue (polyexp.gelu_rows) over the row-major copy, as
    packed-gemm-t-polyexp."""
    name = "packed-gemm-t-rows-polyexp"

    def run(self, op, inputs):
        a = _operand(op, inputs)
        bt = op.weights["bt_packed"]
        n, k = bt.shape
        bias, kind = _polyexp_epilogue(op)
        a2 = a.reshape(-1, k)
        y = np.empty((a2.shape[0], n), np.float32)

        def gelu(yt, r0, r1):       # packed-gemm-t-polyexp's copy and GELU, per part (elementwise: the same floats)
            np.copyto(y[:, r0:r1], yt[r0:r1].T)
            rows.gelu_rows(y, bias, kind, r0, r1)
        gemm_t_rows(bt, a2, gelu)
        return [y.reshape(a.shape[:-1] + (n,))]
