"""The HardSwish / HardSigmoid kernels compiled with numba (the `jit` extra), reached through
`native.cpu.jit.kernel(name)`: hard_swish, hard_swish_inplace, hard_sigmoid, hard_sigmoid_inplace,
bias_hard_act_inplace, silu_polyexp_inplace (signatures in jit.py's doc). Module-level functions sharing one module-level clip, so numba's
on-disk cache finds them again in the next process (a closure over a compiled helper is keyed by that helper, which
differs per process: such kernels recompiled every time). Imported only where numba is installed.

The SiLU of the *-polyexp tactics (`_silu_row`: silu_polyexp_inplace, bias_steps_inplace's codes 6 / 7, the
Winograd band's output) runs as LLVM IR of our own on <16 x float> vectors, four independent vectors a step
(`_silu_vectors`): LLVM's vectorisation of the element loop left one ~90-cycle dependent chain a vector and ran at
0.33-0.40 ns an element, this at ~0.18 (tools/silu_bench.py). The same IEEE operations per lane, no fast-math: the
floats of `_silu_poly` and of the numpy passes, bit for bit (tested).
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
from native.cpu.jit_rows import _LO, _c_row, _exp

_NJIT = dict(nogil=True, cache=True)
_F32_ONE, _F32_ZERO = np.float32(1.0), np.float32(0.0)


@numba.njit(inline="always", **_NJIT)
def _clip01(t, zero, one):
    """t clipped to [zero, one] as numpy's clip loop does: NaN stays NaN, -0.0 becomes +0.0."""
    if t != t:
        return t
    t = t if t > zero else zero
    return t if t < one else one


@numba.njit(**_NJIT)
def hard_swish(x, y):
    sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        v = x[k]
        t = v * sixth
        t = t + half
        y[k] = v * _clip01(t, zero, one)


# one array argument: with y aliasing x numba's loop cannot be vectorised (20x slower), so in place is its own kernel
@numba.njit(**_NJIT)
def hard_swish_inplace(x):
    sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        v = x[k]
        t = v * sixth
        t = t + half
        x[k] = v * _clip01(t, zero, one)


@numba.njit(inline="always", **_NJIT)
def _relu6_swish(v, three, six, zero):
    """x + 3, clipped to [0, 6] as numpy's clip loop (NaN kept), times x, / 6: each step rounded to x's type."""
    t = v + three
    if t == t:
        t = t if t > zero else zero
        t = t if t < six else six
    t = v * t
    return t / six


@numba.njit(error_model="numpy", **_NJIT)
def hard_swish_relu6(x, y):
    three, six, zero = x.dtype.type(3.0), x.dtype.type(6.0), x.dtype.type(0.0)
    for k in range(x.shape[0]):
        y[k] = _relu6_swish(x[k], three, six, zero)


@numba.njit(error_model="numpy", **_NJIT)
def hard_swish_relu6_inplace(x):
    three, six, zero = x.dtype.type(3.0), x.dtype.type(6.0), x.dtype.type(0.0)
    for k in range(x.shape[0]):
        x[k] = _relu6_swish(x[k], three, six, zero)


@numba.njit(**_NJIT)
def hard_sigmoid(x, y, alpha, beta):
    a, b = x.dtype.type(alpha), x.dtype.type(beta)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        t = x[k] * a
        t = t + b
        y[k] = _clip01(t, zero, one)


@numba.njit(**_NJIT)
def hard_sigmoid_inplace(x, alpha, beta):
    a, b = x.dtype.type(alpha), x.dtype.type(beta)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    for k in range(x.shape[0]):
        t = x[k] * a
        t = t + b
        x[k] = _clip01(t, zero, one)


@numba.njit(**_NJIT)
def bias_hard_act_inplace(y, bias, swish, alpha, beta):
    t = y.dtype.type
    sixth, half, zero, one = t(1.0 / 6.0), t(0.5), t(0.0), t(1.0)
    a, b = t(alpha), t(beta)
    n_, c_n, s_n = y.shape
    for n in range(n_):
        for c in range(c_n):
            row = y[n, c]
            bc = bias[c]
            if swish:
                for k in range(s_n):
                    v = row[k] + bc
                    u = v * sixth
                    u = u + half
                    row[k] = v * _clip01(u, zero, one)
            else:
                for k in range(s_n):
                    u = (row[k] + bc) * a
                    u = u + b
                    row[k] = _clip01(u, zero, one)


@numba.njit(error_model="numpy", **_NJIT)
def bias_steps_inplace(y, bias, steps, res):
    # y + bias per channel (bias may be empty), then each step in order, in place on y [N, C, S]: code 1 clip to
    # [alpha, beta] as numpy's clip loop (RELU is [0, inf]), code 2 + res (same shape as y), code 3
    # HARD_SWISH_RELU6, code 4 HARD_SWISH, code 5 LEAKY_RELU with alpha, code 6 SILU_POLYEXP, code 7 SILU_POLYEXP
    # of 2x (float32 only, the caller checks): the numpy epilogue's passes (each rounded as numpy rounds it) as one
    # pass per row
    t = y.dtype.type
    three, six, zero = t(3.0), t(6.0), t(0.0)
    sixth, half, one = t(1.0 / 6.0), t(0.5), t(1.0)
    n_, c_n, s_n = y.shape
    has_bias = bias.shape[0] == c_n
    k_n = steps.shape[0]
    fused = has_bias and k_n > 0 and steps[0, 0] >= 6.0   # the bias added in the first SiLU's own pass
    for n in range(n_):
        for c in range(c_n):
            row = y[n, c]
            if has_bias and not fused:
                bc = bias[c]
                for k in range(s_n):
                    row[k] = row[k] + bc
            for s in range(k_n):
                if steps[s, 0] == 1.0:
                    lo, hi = t(steps[s, 1]), t(steps[s, 2])
                    for k in range(s_n):
                        v = row[k]
                        if v == v:
                            v = v if v > lo else lo
                            v = v if v < hi else hi
                        row[k] = v
                elif steps[s, 0] == 3.0:
                    for k in range(s_n):
                        row[k] = _relu6_swish(row[k], three, six, zero)
                elif steps[s, 0] == 4.0:     # HARD_SWISH: as activations._hard_swish
                    for k in range(s_n):
                        v = row[k]
                        u = v * sixth
                        u = u + half
                        row[k] = v * _clip01(u, zero, one)
                elif steps[s, 0] == 5.0:     # LEAKY_RELU: as activations._leaky_relu (x < 0: x * alpha)
                    a = t(steps[s, 1])
                    for k in range(s_n):
                        v = row[k]
                        row[k] = v * a if v < zero else v
                elif steps[s, 0] >= 6.0:     # SILU_POLYEXP (float32 only), code 7 of 2x (a GEMM pre-scaled by 1/2,
                    b = bias[c] if fused and s == 0 else zero   # the bias halved with it): as silu_polyexp_inplace
                    _silu_row(row, b, fused and s == 0, steps[s, 0] == 7.0)
                else:
                    r = res[n, c]
                    for k in range(s_n):
                        row[k] = row[k] + r[k]


@numba.njit(inline="always", error_model="numpy", **_NJIT)
def _silu_poly(v):
    """v * sigmoid(v) with polyexp's exp (native/cpu/polyexp.py), sigmoid in the form without cancellation: e / (1 + e)
    below 0 and 1 / (1 + e) from 0 up, e = exp(-|v|) (0 below EXP_LO). Branch-free selects, so loops vectorise; the
    floats of activations.silu_polyexp_inplace's numpy passes."""
    nv = -v if v >= _F32_ZERO else v
    e = _exp(nv)
    e = e if nv >= _LO else _F32_ZERO
    num = _F32_ONE if v >= _F32_ZERO else e
    return v * (num / (e + _F32_ONE))


_VL, _CHAINS = 16, 4   # lanes of a vector (one zmm), vectors in flight a step


def _silu_vectors(b, vs, bias, double):
    """`_silu_poly` of each <16 x float> of vs (of v + bias first with bias, then v + v with double) as LLVM IR, the
    vectors' operations interleaved: one chain a vector, independent, emitted step by step across them, so the core
    has several in flight (LLVM's own vectorisation of the element loop left one ~90-cycle chain a vector). The same
    IEEE operations per lane in the same order, no fast-math flags: the floats of `_silu_poly`. Three steps are
    written in fewer instructions with the same results: -|v| as v with its sign bit set (`-v if v >= 0 else v`
    differs only for -0.0, where +0.0 and -0.0 reach the same r = +0.0 in the range reduction, and in a NaN's sign,
    which is not read: a NaN clamps to EXP_LO and e is 0); the clamp to EXP_HI is left out (-|v| <= 0 < EXP_HI, and a
    NaN was clamped to EXP_LO before it); 2^k from the bits of t = a * LOG2E + ROUND (in [ROUND - 126, ROUND]: ulp 1,
    so bits(t) = bits(ROUND) + k, and bits(ROUND) << 23 is 0 in 32 bits) instead of converting kf = t - ROUND."""
    f32 = ir.FloatType()
    vty = ir.VectorType(f32, _VL)

    def c(x):
        return ir.Constant(vty, [ir.Constant(f32, float(x))] * _VL)

    def each(fn, *cols):
        return [fn(*a) for a in zip(*cols)]

    zero, one, lo = c(0.0), c(1.0), c(px.EXP_LO)
    if bias is not None:
        vs = each(lambda v: b.fadd(v, bias), vs)
    if double:
        vs = each(lambda v: b.fadd(v, v), vs)
    pos = each(lambda v: b.fcmp_ordered(">=", v, zero), vs)
    i32 = ir.VectorType(ir.IntType(32), _VL)
    sign = ir.Constant(i32, [ir.Constant(ir.IntType(32), -2 ** 31)] * _VL)
    nv = each(lambda v: b.bitcast(b.or_(b.bitcast(v, i32), sign), vty), vs)
    a = each(lambda v: b.select(b.fcmp_ordered(">", v, lo), v, lo), nv)
    t = each(lambda v: b.fadd(b.fmul(v, c(px.LOG2E)), c(px.ROUND)), a)
    kf = each(lambda v: b.fsub(v, c(px.ROUND)), t)
    r = each(lambda v, k: b.fsub(v, b.fmul(k, c(px.LN2_HI))), a, kf)
    r = each(lambda v, k: b.fsub(v, b.fmul(k, c(px.LN2_LO))), r, kf)
    p = each(lambda x: b.fadd(b.fmul(c(px.EXP_C[0]), x), c(px.EXP_C[1])), r)
    for k in list(px.EXP_C[2:]) + [px.ONE, px.ONE]:
        p = each(lambda q, x: b.fadd(b.fmul(q, x), c(k)), p, r)
    c127 = ir.Constant(i32, [ir.Constant(ir.IntType(32), 127)] * _VL)
    c23 = ir.Constant(i32, [ir.Constant(ir.IntType(32), 23)] * _VL)
    scale = each(lambda k: b.bitcast(b.shl(b.add(b.bitcast(k, i32), c127), c23), vty), t)
    e = each(lambda q, s: b.fmul(q, s), p, scale)
    e = each(lambda q, v: b.select(b.fcmp_ordered(">=", v, lo), q, zero), e, nv)
    num = each(lambda p_, q: b.select(p_, one, q), pos, e)
    q = each(lambda n_, q: b.fdiv(n_, b.fadd(q, one)), num, e)
    return each(lambda v, t: b.fmul(v, t), vs, q)


def _silu_loop(builder, ptr, n, bias, double):
    """Emit `_silu_vectors` over ptr[:n] in place where n >= 16 (over nothing below): _CHAINS vectors a step, then
    one a step, then, where n % 16 is not 0, the last 16 elements as one vector, loaded before the loops ran (the
    ones it shares with the last whole vector are stored again with the values they already got from the same
    inputs: the same floats, no scalar tail)."""
    vty = ir.VectorType(ir.FloatType(), _VL)
    vptr = builder.bitcast(ptr, vty.as_pointer())
    last = builder.bitcast(builder.gep(ptr, [builder.sub(n, n.type(_VL))]), vty.as_pointer())
    tail = builder.and_(builder.icmp_signed("!=", builder.srem(n, n.type(_VL)), n.type(0)),
                        builder.icmp_signed(">=", n, n.type(_VL)))
    kept = cgutils.alloca_once(builder, vty)
    with builder.if_then(tail):
        builder.store(builder.load(last, align=4), kept)
    blocks = builder.sdiv(n, n.type(_VL))
    steps = builder.sdiv(blocks, n.type(_CHAINS))
    with cgutils.for_range(builder, steps) as loop:
        base = builder.mul(loop.index, n.type(_CHAINS))
        ps = [builder.gep(vptr, [builder.add(base, n.type(i))]) for i in range(_CHAINS)]
        vs = [builder.load(p_, align=4) for p_ in ps]
        for p_, v in zip(ps, _silu_vectors(builder, vs, bias, double)):
            builder.store(v, p_, align=4)
    done = builder.mul(steps, n.type(_CHAINS))
    with cgutils.for_range(builder, builder.sub(blocks, done)) as loop:
        p_ = builder.gep(vptr, [builder.add(done, loop.index)])
        builder.store(_silu_vectors(builder, [builder.load(p_, align=4)], bias, double)[0], p_, align=4)
    with builder.if_then(tail):
        builder.store(_silu_vectors(builder, [builder.load(kept)], bias, double)[0], last, align=4)


@intrinsic
def _silu_blocks(typingctx, row, bias, has_bias, double):
    """`_silu_poly` of a row of n >= 16 in place (of v + bias first with has_bias, then v + v with double; row 1-D C
    float32, bias float32): `_silu_loop`'s interleaved vectors, one loop per case. Returns where the caller's
    element loop takes over: n (all done), or 0 for a row shorter than a vector."""
    if not _c_row(row):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        n = builder.extract_value(ary.shape, 0)
        vty = ir.VectorType(ir.FloatType(), _VL)
        bvec = builder.insert_element(ir.Constant(vty, ir.Undefined), args[1], ir.Constant(ir.IntType(32), 0))
        bvec = builder.shuffle_vector(bvec, ir.Constant(vty, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), _VL), [0] * _VL))
        with builder.if_else(args[2]) as (with_bias, without):
            for arm, bias in ((with_bias, bvec), (without, None)):
                with arm:
                    with builder.if_else(args[3]) as (twice, once):
                        with twice:
                            _silu_loop(builder, ary.data, n, bias, True)
                        with once:
                            _silu_loop(builder, ary.data, n, bias, False)
        return builder.select(builder.icmp_signed(">=", n, n.type(_VL)), n, n.type(0))
    return types.intp(row, types.float32, types.boolean, types.boolean), codegen


def _silu_head(row, bias, has_bias, double):
    """`_silu_blocks` on a 1-D C float32 row (returns where the rest starts), nothing on any other (returns 0)."""


@overload(_silu_head, inline="always")
def _silu_head_impl(row, bias, has_bias, double):
    if _c_row(row):
        return lambda row, bias, has_bias, double: _silu_blocks(row, bias, has_bias, double)
    return lambda row, bias, has_bias, double: 0


@numba.njit(inline="always", error_model="numpy", **_NJIT)
def _silu_row(row, bias, has_bias, double):
    """_silu_poly of row (of row + bias first with has_bias, then doubled with double) in place: by `_silu_blocks`
    (a C row of 16 or more), element by element (a shorter or strided row)."""
    for k in range(_silu_head(row, bias, has_bias, double), row.shape[0]):
        v = row[k]
        if has_bias:
            v = v + bias
        if double:
            v = v + v
        row[k] = _silu_poly(v)


@numba.njit(error_model="numpy", **_NJIT)
def silu_polyexp_inplace(x, double):
    # _silu_poly of x (of x + x with double: a GEMM pre-scaled by 1/2) in place
    _silu_row(x, _F32_ZERO, False, double)
