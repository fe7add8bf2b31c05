"""Normalization with its residual add folded in (passes/fusion_residual_norm.py): LayerNorm(x + r), where the
transformers' residual Add stood as a layer of its own before each LayerNorm. Inputs [x, gamma, beta, r], fused
param `residual_input` = 3; outputs [y, mean, inv_std, x + r] (the sum: the next residual reads it in a
pre-LN block).

Two tactics, the two LayerNorm tactics' floats, each after the Add's own (x + r rounded as numpy's add):
lane-stats-residual (lane-stats: the sum and the row's LayerNorm in one compiled pass a row, numpy passes without
the numba extra) and float64-stats-residual (the numpy add, then float64-stats). Why: one layer fewer per pair,
and on the compiled path the sum is made and normalised while its row is in cache (bert_mini 8 pairs, gpt2_tiny 8,
vit_tiny 12).
"""
from __future__ import annotations

import math

import numpy as np

from native.cpu import jit
from native.cpu.kernels import rows
from native.cpu.kernels.norm import _row_param, normalization, post_activation
from native.tactics import Op, Tactic, register_tactic

def residual_refusal(op, input_shapes) -> str | None:
    """Why the layer is no LayerNorm with a residual add these tactics run (None: it is)."""
    p = op.params
    if p.get("residual_input") != 3:
        return "a Normalization with its residual add (passes/fusion_residual_norm.py) only"
    if p.get("mode", "LAYER") != "LAYER" or p.get("stash_type", 1) != 1:
        return "LayerNormalization with float32 statistics only"
    dtypes = getattr(input_shapes, "dtypes", None) or ()
    if any(dt not in (None, "float32") for dt in list(dtypes[:1]) + list(dtypes[3:4])):
        return "float32 input and residual only"
    shapes = list(input_shapes or [])
    if len(shapes) > 3 and shapes[0] is not None and shapes[3] is not None and list(shapes[0]) != list(shapes[3]):
        return "an input and a residual of one shape only"
    return None


def _plain(op) -> Op:
    """The op without its residual: what the LayerNorm tactics run on the sum."""
    params = {k: v for k, v in op.params.items() if k != "residual_input"}
    return Op(op.kind, op.name, params, op.weights, precision=op.precision, format=op.format)


class _Residual(Tactic):
    kind = "Normalization"
    honours = frozenset({"post_ops", "residual_input"})

    def supports(self, op, input_shapes):
        return residual_refusal(op, input_shapes)


@register_tactic
class LaneStatsResidual(_Residual):
    """x + r, then lane-stats' LayerNorm of it (see the module docstring)."""
    name = "lane-stats-residual"

    def run(self, op, inputs):
        x, r = np.asarray(inputs[0]), np.asarray(inputs[3])
        cfg = op.__dict__.get("_residual")
        if cfg is None or cfg[0] != x.shape or cfg[1] is not inputs[1] or cfg[2] is not inputs[2]:
            axis = op.params.get("axes", [-1])[0] % x.ndim
            tail = x.shape[axis:]
            n, m = math.prod(tail), math.prod(x.shape[:axis])
            g, b = (_row_param(v, tail, n) if v is not None else None for v in (inputs[1], inputs[2]))
            cfg = op.__dict__["_residual"] = (
                x.shape, inputs[1], inputs[2], m, n, g if g is not None else np.ones(n, np.float32),
                b if b is not None else np.zeros(n, np.float32), op.params.get("epsilon", 1e-5),
                x.shape[:axis] + (1,) * len(tail))
        shape, _, _, m, n, g, b, eps, stat_shape = cfg
        if m == 0 or n == 0 or x.dtype != np.float32 or r.dtype != np.float32:
            return _sum_then(op, inputs, normalization)
        x2 = np.ascontiguousarray(x).reshape(m, n)
        r2 = np.ascontiguousarray(r).reshape(m, n)
        s, y = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        fn = jit.kernel("add_layernorm_rows")
        if fn is not None:
            mean, inv = np.empty(m, np.float32), np.empty(m, np.float32)
            fn(x2, r2, s, g, b, np.float32(eps), np.float32(n), y, mean, inv)
        else:
            np.add(x2, r2, out=s)
            y, mean, inv = rows.layernorm_rows(s, g, b, eps, y)
        outs = post_activation(op, [y.reshape(shape), mean.reshape(stat_shape), inv.reshape(stat_shape)])
        return outs + [s.reshape(shape)]


@register_tactic
class Float64StatsResidual(_Residual):
    """x + r (numpy's add), then float64-stats' LayerNorm of it."""
    name = "float64-stats-residual"

    def run(self, op, inputs):
        return _sum_then(op, inputs, normalization)


def _sum_then(op, inputs, norm):
    s = np.add(inputs[0], inputs[3])
    outs = list(norm(_plain(op), [s] + list(inputs[1:3])))
    return outs[:3] + [s]
