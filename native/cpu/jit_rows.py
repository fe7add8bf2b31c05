"""The float32 row kernels of native/cpu/polyexp.py compiled with numba (the `jit` extra), reached through
`native.cpu.jit.kernel(name)`: gelu_rows, softmax_rows, layernorm_rows (signatures in jit.py's doc). The same floats as
polyexp's numpy passes: the same IEEE operations in the same order (no fused multiply-add: numba leaves contraction
off), the same 8-lane sums. Module-level functions and constants, so numba's on-disk cache finds them again in the
next process (a closure is keyed by its captured values, which for compiled helpers differ per process).
Imported only where numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from native.cpu import jit_cache  # noqa: F401  (numba's cache stamps cover the modules a kernel inlines)
from native.cpu import polyexp as px

_LO, _HI, _LOG2E, _ROUND, _LN2_HI, _LN2_LO = px.EXP_LO, px.EXP_HI, px.LOG2E, px.ROUND, px.LN2_HI, px.LN2_LO
_C6, _C5, _C4, _C3, _C2 = px.EXP_C
_ONE, _ZERO = px.ONE, px.ZERO
_AS_P, _MHALF, _TANH_C, _M2S = px.AS_P, px.MINUS_HALF, px.TANH_C, px.MINUS_TWO_SQRT_2_OVER_PI
_A0, _A1, _A2, _A3, _A4 = px.AS_HALF_A
_I127, _I23 = np.int32(127), np.int32(23)
_NJIT = dict(nogil=True, error_model="numpy", cache=True)   # numpy's error model: no division-by-zero branch


@intrinsic
def _as_float32(typingctx, bits):
    """The float32 whose bits the int32 holds (an LLVM bitcast: vectorises, where a view through an array would
    not)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@numba.njit(inline="always", **_NJIT)
def _exp(v):
    """polyexp.exp for one float32 (clamped to [EXP_LO, EXP_HI]; a NaN clamps too: the callers handle NaN)."""
    v = v if v > _LO else _LO
    v = v if v < _HI else _HI
    kf = (v * _LOG2E + _ROUND) - _ROUND
    r = v - kf * _LN2_HI
    r = r - kf * _LN2_LO
    p = _C6 * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _ONE
    p = p * r + _ONE
    return p * _as_float32((np.int32(kf) + _I127) << _I23)


def _vector_lanes(builder, ary, step):
    """Emit a loop over the first n - n % 8 elements of a 1-D C float32 array as <8 x float> blocks in order,
    `acc = step(builder, acc, block)` from acc = (+0.0, ...); returns the final <8 x float>."""
    n = builder.extract_value(ary.shape, 0)
    f32 = ir.FloatType()
    vty = ir.VectorType(f32, 8)
    blocks = builder.sdiv(n, n.type(8))
    vptr = builder.bitcast(ary.data, vty.as_pointer())
    acc = cgutils.alloca_once_value(builder, ir.Constant(vty, [ir.Constant(f32, 0.0)] * 8))
    with cgutils.for_range(builder, blocks) as loop:
        block = builder.load(builder.gep(vptr, [loop.index]), align=4)
        builder.store(step(builder, builder.load(acc), block), acc)
    return builder.load(acc)


def _lanes(builder, vec):
    return [builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(8)]


def _c_row(row) -> bool:
    return isinstance(row, types.Array) and row.dtype == types.float32 and row.ndim == 1 and row.layout == "C"


@intrinsic
def _lane_sums8(typingctx, row, square):
    """The 8 lane sums of row[:n - n % 8] (lane l: elements l, l+8, ... added in order from +0.0; with square each
    element's square, rounded, added): one <8 x float> accumulator whose adds are IEEE adds per lane (no fast-math
    flags), so the floats of 8 scalar chains at one vector add a block (numba does not vectorise those chains)."""
    if not _c_row(row):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        sq = args[1]
        acc = _vector_lanes(builder, ary,
                            lambda b, a, v: b.fadd(a, b.select(sq, b.fmul(v, v), v)))
        return context.make_tuple(builder, signature.return_type, _lanes(builder, acc))
    return types.UniTuple(types.float32, 8)(row, square), codegen


@intrinsic
def _lane_max8(typingctx, row):
    """(the 8 lane maxima of row[:n - n % 8] from -inf, each `v if v > m else m` per lane in order; then the lanes'
    sums of v * 0, NaN iff a NaN or an infinity was among them): _row_max's floats, a vector op a block."""
    if not _c_row(row):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        f32 = ir.FloatType()
        vty = ir.VectorType(f32, 8)
        n = builder.extract_value(ary.shape, 0)
        blocks = builder.sdiv(n, n.type(8))
        vptr = builder.bitcast(ary.data, vty.as_pointer())
        mx = cgutils.alloca_once_value(builder, ir.Constant(vty, [ir.Constant(f32, float("-inf"))] * 8))
        c = cgutils.alloca_once_value(builder, ir.Constant(vty, [ir.Constant(f32, 0.0)] * 8))
        zero = ir.Constant(vty, [ir.Constant(f32, 0.0)] * 8)
        with cgutils.for_range(builder, blocks) as loop:
            v = builder.load(builder.gep(vptr, [loop.index]), align=4)
            m = builder.load(mx)
            builder.store(builder.select(builder.fcmp_ordered(">", v, m), v, m), mx)
            builder.store(builder.fadd(builder.load(c), builder.fmul(v, zero)), c)
        lanes = _lanes(builder, builder.load(mx))
        cs = _lanes(builder, builder.load(c))
        total = builder.fadd(builder.fadd(cs[0], cs[1]), builder.fadd(cs[2], cs[3]))
        total = builder.fadd(total, builder.fadd(builder.fadd(cs[4], cs[5]), builder.fadd(cs[6], cs[7])))
        return context.make_tuple(builder, signature.return_type, lanes + [total])
    return types.UniTuple(types.float32, 9)(row), codegen


def _lanes8(row, square):
    """The 8 lane sums of row[:n - n % 8] (a C row: `_lane_sums8`; any other: 8 scalar chains)."""


def _max_lanes8(row):
    """The 8 lane maxima of row[:n - n % 8] and the NaN-or-infinity flag sum (a C row: `_lane_max8`)."""


@overload(_lanes8, inline="always")
def _lanes8_impl(row, square):
    if _c_row(row):
        return lambda row, square: _lane_sums8(row, square)

    def strided(row, square):
        z = row.dtype.type(0)
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
        for j in range(0, row.shape[0] - row.shape[0] % 8, 8):
            v0, v1, v2, v3 = row[j], row[j + 1], row[j + 2], row[j + 3]
            v4, v5, v6, v7 = row[j + 4], row[j + 5], row[j + 6], row[j + 7]
            if square:
                v0, v1, v2, v3, v4, v5, v6, v7 = v0 * v0, v1 * v1, v2 * v2, v3 * v3, v4 * v4, v5 * v5, v6 * v6, v7 * v7
            a0, a1, a2, a3, a4, a5, a6, a7 = a0 + v0, a1 + v1, a2 + v2, a3 + v3, a4 + v4, a5 + v5, a6 + v6, a7 + v7
        return a0, a1, a2, a3, a4, a5, a6, a7
    return strided


@overload(_max_lanes8, inline="always")
def _max_lanes8_impl(row):
    if _c_row(row):
        return lambda row: _lane_max8(row)

    def strided(row):
        z = row.dtype.type(0)
        m = np.full(8, -np.inf, row.dtype)
        c = z
        for j in range(0, row.shape[0] - row.shape[0] % 8, 8):
            for t in range(8):
                v = row[j + t]
                m[t] = v if v > m[t] else m[t]
                c += v * z
        return m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], c
    return strided


@numba.njit(inline="always", **_NJIT)
def _lane_sum(row, square):
    """polyexp.lane_sum of one row (of its elements' squares, each rounded, with square): 8 lanes (`_lanes8`),
    added pairwise, then the tail in order."""
    n = row.shape[0]
    a0, a1, a2, a3, a4, a5, a6, a7 = _lanes8(row, square)
    s = (a0 + a1) + (a2 + a3)
    s = s + ((a4 + a5) + (a6 + a7))
    for j in range(n - n % 8, n):
        v = row[j]
        s = s + (v * v if square else v)
    return s


@numba.njit(**_NJIT)
def gelu_rows(y, bias, has_bias, tanh, c0, c1):
    m = y.shape[0]
    n = c1 - c0
    b = bias[c0:c1]
    for i in range(m):
        row = y[i, c0:c1]   # indices from 0: numba then proves them non-negative (no wraparound: vectorised)
        if has_bias:
            for j in range(n):
                row[j] = row[j] + b[j]
        if tanh:
            for j in range(n):
                x = row[j]
                u = ((x * x) * _TANH_C) * x
                u = (u + x) * _M2S
                row[j] = x / (_exp(u) + _ONE)
        else:
            for j in range(n):
                x = row[j]
                ax = abs(x)
                t = _ONE / (ax * _AS_P + _ONE)
                h = t * _A4
                h = (h + _A3) * t
                h = (h + _A2) * t
                h = (h + _A1) * t
                h = (h + _A0) * t
                h = h * _exp((ax * _MHALF) * ax)
                h = h * ax
                row[j] = (x if x > _ZERO else _ZERO) - h


@numba.njit(inline="always", **_NJIT)
def _has_nan(row):
    for j in range(row.shape[0]):
        if row[j] != row[j]:
            return True
    return False


@numba.njit(inline="always", **_NJIT)
def _row_max(row):
    """(max, False) of a row; (anything, True) when it holds a NaN. 8 lanes (`_max_lanes8`), then the tail."""
    n = row.shape[0]
    z = row.dtype.type(0)
    m0, m1, m2, m3, m4, m5, m6, m7, c = _max_lanes8(row)
    for j in range(n - n % 8, n):
        v = row[j]
        m0 = v if v > m0 else m0
        c += v * z
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m0 = m4 if m4 > m0 else m0
    # c is NaN for a NaN or an infinity (-inf: a masked entry, fine): only then look for a NaN
    return m0, c != c and _has_nan(row)


@numba.njit(**_NJIT)
def softmax_rows(s):
    """softmax of each row in place; returns the number of rows set to NaN (a NaN in them, or an infinite max)."""
    m, n = s.shape
    nan_rows = 0
    for i in range(m):
        row = s[i]
        mx, bad = _row_max(row)
        if bad or mx == np.inf or mx == -np.inf:   # numpy's exp(x - max) is NaN across such a row
            for j in range(n):
                row[j] = np.nan
            nan_rows += 1
            continue
        for j in range(n):
            v = row[j] - mx
            row[j] = _ZERO if v < _LO else _exp(v)
        total = _lane_sum(row, False)
        for j in range(n):
            row[j] = row[j] / total
    return nan_rows


@numba.njit(inline="always", **_NJIT)
def _layernorm_row(row, out, gamma, beta, eps, n_f):
    """LayerNorm of one row into out (may be row); returns (mean, 1 / std)."""
    n = row.shape[0]
    mu = _lane_sum(row, False) / n_f
    for j in range(n):
        out[j] = row[j] - mu
    var = _lane_sum(out, True) / n_f
    iv = _ONE / np.sqrt(var + eps)
    for j in range(n):
        out[j] = ((out[j] * iv) * gamma[j]) + beta[j]
    return mu, iv


@numba.njit(**_NJIT)
def layernorm_rows(x, gamma, beta, eps, n_f, y, mean, inv):
    for i in range(x.shape[0]):
        mean[i], inv[i] = _layernorm_row(x[i], y[i], gamma, beta, eps, n_f)


@numba.njit(**_NJIT)
def add_layernorm_rows(a, b, s, gamma, beta, eps, n_f, y, mean, inv):
    """s = a + b (each sum rounded, as numpy's add), then layernorm_rows of s into y, a row at a time (the row
    in cache for both): a residual add and the LayerNorm after it in one pass."""
    n = a.shape[1]
    for i in range(a.shape[0]):
        ar, br, sr = a[i], b[i], s[i]
        for j in range(n):
            sr[j] = ar[j] + br[j]
        mean[i], inv[i] = _layernorm_row(sr, y[i], gamma, beta, eps, n_f)


_INF = np.float32(np.inf)


@numba.njit(**_NJIT)
def layernorm_rows_relu(x, gamma, beta, eps, n_f, y, mean, inv):
    """layernorm_rows, then RELU as numpy's clip to [0, inf] (NaN kept, -0.0 to +0.0) on each output: the floats of
    the LayerNorm followed by activations.relu (fusion_epilogue.fuse_norm_activation's post-op), in one pass."""
    layernorm_rows(x, gamma, beta, eps, n_f, y, mean, inv)
    m, n = y.shape
    for i in range(m):
        out = y[i]
        for j in range(n):
            u = out[j]
            if u == u:
                u = u if u > _ZERO else _ZERO
                u = u if u < _INF else _INF
            out[j] = u
