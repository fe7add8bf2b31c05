"""A float32 product y = act(W x + b) with W stored [N, K] and x [K, S] for few columns S, as a kernel share (the
`jit` extra): the tactics gemv-dot-shares (MatrixMultiply, S = 1) and 1x1-gemm-shares (a 1x1 convolution over a
map of few pixels), in native/cpu/kernels/gemv_shares.py.

    gemv_stage(args int64 *, code)   (a numba @cfunc: gemv_stage.address; threads.kernel_shares runs it)
        one stage; part p computes output rows [0, SPLIT) (p 0) or [SPLIT, N) (p 1). S = 1: each output a dot
        product over its unit-stride weights row summed in vector lanes (LLVM's split of the sum, fixed per
        compiled kernel: the sums may reassociate and fuse multiply-adds, as gemv_dot's); S > 1: the rows' block
        of W @ x as one cblas_sgemm call (numpy's OpenBLAS at the address SGEMM). Then + bias, then the activation
        (0 none, 1 RELU: numpy's clip to [0, inf], 2 HardSwish as activations._hard_swish: v * clip(v * 1/6 + 0.5, 0, 1), 3 SiLU
        by polyexp's exp: jit_act._silu_poly, the *-polyexp tactics' floats), without fast-math flags. The cut is fixed per layer, so the floats do not depend on the thread that ran a
        part.
    block(dims, arrays) -> int64 [WORDS]   the argument block; words X / Y (the sample's [K, S] input and [N, S]
        output) are written per call by kernel_stages.
    run_part(args, part)   the same part without the share (hosts without numpy's 64-bit cblas_sgemm).

Why: MobileNetV3's classifier ([1, 1024] x [1024, 1000], 4 MB of weights) and conv_head (576 -> 1024 on the pooled
1x1 map, 2.4 MB) stream their weights from L3 or memory on one core, 0.09-0.15 ms and 0.06-0.08 ms a run at one
thread; split by output rows, each core streams half. MobileNetV3's last 1x1 convolution (96 -> 576 over 7x7, 2.7 M
multiply-adds, 0.05 ms) likewise. Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu.jit_act import _silu_poly
from native.cpu.jit_phase_gemm import _sgemm
from native.cpu.threads import share_block

(X, Y, WT, K, N, BIAS, HAS_BIAS, ACT, SPLIT, S, SGEMM) = range(11)
WORDS = 11
_ZERO = np.float32(0.0)


@intrinsic
def _f32_at(typingctx, addr):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return types.CPointer(types.float32)(addr), codegen


@numba.njit(nogil=True, error_model="numpy", cache=True, fastmath={"reassoc", "contract"})
def _dots(x, wt, out, j0, j1):
    for j in range(j0, j1):   # a sum per output in vector lanes (reassociated; NaN and inf stay as they are)
        r = wt[j]
        s = _ZERO
        for p in range(x.shape[0]):
            s += x[p] * r[p]
        out[j] = s


@numba.njit(nogil=True, error_model="numpy", cache=True)
def _epilogue(out, bias, has_bias, act, j0, j1):
    """Rows [j0, j1) of out [N, S]: + bias, then the activation (compiled without fast-math flags; a loop per
    activation, so each vectorises)."""
    sixth, half, one = np.float32(1.0 / 6.0), np.float32(0.5), np.float32(1.0)
    for j in range(j0, j1):
        r = out[j]
        b = bias[j] if has_bias else _ZERO
        if has_bias:
            for q in range(r.shape[0]):
                r[q] = r[q] + b
        if act == 1:
            for q in range(r.shape[0]):
                v = r[q]
                r[q] = _ZERO if v < _ZERO else v      # numpy's clip to [0, inf]: NaN and -0.0 kept
        elif act == 2:
            for q in range(r.shape[0]):
                v = r[q]
                r[q] = v * min(max(v * sixth + half, _ZERO), one)
        elif act == 3:
            for q in range(r.shape[0]):
                r[q] = _silu_poly(r[q])


@numba.njit(nogil=True, error_model="numpy", cache=True)
def _part(a, part):
    k, n, s = a[K], a[N], a[S]
    j0, j1 = (0, a[SPLIT]) if part == 0 else (a[SPLIT], n)
    if j1 <= j0:
        return
    out = carray(_f32_at(a[Y]), (n, s))
    bias = carray(_f32_at(a[BIAS]), (n if a[HAS_BIAS] else 0,))
    if s == 1:
        _dots(carray(_f32_at(a[X]), (k,)), carray(_f32_at(a[WT]), (n, k)), out.reshape(n), j0, j1)
    else:
        _sgemm(a[SGEMM], j1 - j0, s, k, a[WT] + 4 * j0 * k, k, a[X], s, _ZERO, a[Y] + 4 * j0 * s, s)
    if a[HAS_BIAS] or a[ACT]:
        _epilogue(out, bias, a[HAS_BIAS] != 0, a[ACT], j0, j1)


@numba.cfunc(types.void(types.CPointer(types.int64), types.int64), nopython=True, cache=True)
def gemv_stage(ptr, code):
    _part(carray(ptr, (WORDS,)), code & 1)


@numba.njit(nogil=True, cache=True)
def run_part(a, part):
    """Part `part` of the block `a` (words X / Y already set) on this thread."""
    _part(a, part)


def block(dims, arrays):
    """The argument block of these words (threads.share_block)."""
    return share_block(WORDS, dims, arrays)
