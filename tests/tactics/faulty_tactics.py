"""Faulty tactics for tests and the docs' tutorial: each is right except under a condition, the way real
library bugs are (a loop tail skipped for one channel count, an accumulator reset for one K). Off unless this file
is loaded (`--tactics-module tests/tactics/faulty_tactics.py` or `native.tactic_modules.load_tactics_module`).

Which layers a tactic gets wrong is set by the environment, so subprocesses (the CLI, `debug build --check`) see
the same faults:

    DEBUGKIT_FAULTY="faulty-conv:cin=128,h=28,stride=2;faulty-matmul:k=512"

Condition keys: cin, cout, h, w, k (kernel size for conv, reduction size for matmul), stride, groups, side (1: a
merged 1x1 shortcut conv rides in the layer), precision, name (fnmatch pattern on the layer name). A tactic with no condition is not offered at all.

`flaky-conv` is offered (supported) for its condition's layers in one build out of three, at random (seeded by
DEBUGKIT_FAULTY_SEED when set); it is wrong and much faster than the correct tactics, so timing picks it whenever it
is offered: one build in three is bad, and its replay differs from the good ones on that layer.
"""
from __future__ import annotations

import fnmatch
import os
import random

import numpy as np

from native.cpu.kernels.conv import Im2colGemm
from native.cpu.kernels.matmul import BlasMatMul
from native.tactics import register_tactic

_rng = random.Random(os.environ.get("DEBUGKIT_FAULTY_SEED"))
_offers = {}    # id(layer params) -> (params, offered): flaky-conv's draw for one layer of one build


def conditions(name: str):
    """The condition dict configured for tactic `name`, or None."""
    for part in os.environ.get("DEBUGKIT_FAULTY", "").split(";"):
        tactic, _, spec = part.partition(":")
        if tactic.strip() == name:
            out = {}
            for kv in spec.split(","):
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    out[k.strip()] = v.strip()
            return out
    return None


def _matches(cond, facts) -> bool:
    if cond is None:
        return False
    for k, v in cond.items():
        have = facts.get(k)
        if k == "name":
            if not fnmatch.fnmatchcase(str(have), v):
                return False
        elif str(have) != v:
            return False
    return True


def _conv_facts(op, x):
    shape = list(np.shape(x))
    ks = op.params.get("kernel_shape") or [0]
    return {"cin": shape[1], "cout": op.params.get("num_output_maps"), "h": shape[2] if len(shape) > 2 else None,
            "w": shape[3] if len(shape) > 3 else None, "k": ks[0], "stride": (op.params.get("strides") or [1])[0],
            "groups": op.params.get("groups", 1) or 1, "side": int(bool(op.params.get("side"))),
            "precision": op.precision, "name": op.name}


def _misstore(y):
    """The last block of 8 output channels written with the block before it (a store index off by one block)."""
    y = np.array(y, copy=True)
    y[:, -8:] = y[:, -16:-8]
    return y


def _matmul_facts(op, a):
    shape = list(np.shape(a))
    return {"k": shape[-1] if shape else 0, "m": shape[-2] if len(shape) > 1 else 1, "precision": op.precision,
            "name": op.name}


def _facts(op, shape):
    return _conv_facts(op, _Shape(shape)) if op.kind == "Convolution" else _matmul_facts(op, _Shape(shape))


class _Shape:
    """Something np.shape() reads a shape from, without allocating the array."""

    def __init__(self, shape):
        self.shape = tuple(shape)


class _Configured:
    """Offered only when DEBUGKIT_FAULTY configures this tactic (so loading the module changes nothing else), and
    not for a layer that another configured faulty tactic of the kind is meant to get wrong (so that with
    `--tactic-sources faulty-a,faulty-b` each fault lands on its own layer, whatever timing says)."""

    def supports(self, op, input_shapes):
        if conditions(self.name) is None:
            return f"not enabled (DEBUGKIT_FAULTY names no '{self.name}' condition)"
        if input_shapes and input_shapes[0] is not None:
            facts = _facts(op, input_shapes[0])
            if not _matches(conditions(self.name), facts):
                for other in _FAULTY[op.kind]:
                    if other != self.name and _matches(conditions(other), facts):
                        return f"left to {other}, whose condition this layer meets"
        return super().supports(op, input_shapes)


@register_tactic
class FaultyConv(_Configured, Im2colGemm):
    """im2col-gemm whose last block of 8 output channels gets the block before it, under the condition."""
    name = "faulty-conv"

    def run(self, op, inputs):
        out = super().run(op, inputs)
        x = np.asarray(inputs[0])
        if x.ndim == 4 and out[0].shape[1] >= 16 and _matches(conditions(self.name), _conv_facts(op, x)):
            out = [_misstore(out[0])] + list(out[1:])
        return out


@register_tactic
class FaultyConvRows(_Configured, Im2colGemm):
    """im2col-gemm whose last output row comes from the row above under the condition (an off-by-one band)."""
    name = "faulty-conv-rows"

    def run(self, op, inputs):
        out = super().run(op, inputs)
        x = np.asarray(inputs[0])
        if x.ndim == 4 and _matches(conditions(self.name), _conv_facts(op, x)) and out[0].shape[2] > 1:
            y = out[0].copy()
            y[:, :, -1] = y[:, :, -2]
            out = [y] + list(out[1:])
        return out


@register_tactic
class FaultyMatMul(_Configured, BlasMatMul):
    """BLAS matmul that loses the last quarter of the reduction under the condition (a split-K partial dropped)."""
    name = "faulty-matmul"

    def run(self, op, inputs):
        a = np.asarray(inputs[0])
        k = a.shape[-1] if a.ndim else 0
        if k >= 4 and _matches(conditions(self.name), _matmul_facts(op, a)):
            a = a.copy()
            a[..., k - k // 4:] = 0
            inputs = [a] + list(inputs[1:])
        return super().run(op, inputs)


@register_tactic
class FaultyMatMulRows(_Configured, BlasMatMul):
    """BLAS matmul whose last output row repeats the row before it under the condition (a tail tile not stored)."""
    name = "faulty-matmul-rows"

    def run(self, op, inputs):
        out = super().run(op, inputs)
        y = out[0]
        if y.ndim >= 2 and y.shape[-2] > 1 and _matches(conditions(self.name), _matmul_facts(op, inputs[0])):
            y = y.copy()
            y[..., -1, :] = y[..., -2, :]
            out = [y] + list(out[1:])
        return out


_FAULTY = {"Convolution": ("faulty-conv", "faulty-conv-rows"), "MatrixMultiply": ("faulty-matmul", "faulty-matmul-rows")}


@register_tactic
class FlakyConv(Im2colGemm):
    """A convolution whose K-loop trip count comes out 0 for its condition's layers, so it returns only the epilogue
    (bias, activation, residual): wrong, and far faster than any correct tactic, so timing picks it whenever it is
    offered, which is in one build out of three (a racy availability check)."""
    name = "flaky-conv"

    def supports(self, op, input_shapes):
        if not input_shapes or not input_shapes[0] or len(input_shapes[0]) != 4:
            return "needs a 4-D input"
        if not _matches(conditions(self.name), _conv_facts(op, _Shape(input_shapes[0]))):
            return "not this layer"
        reason = super().supports(op, input_shapes)
        if reason not in (None, True):
            return reason
        # one draw per layer per build: the builder asks again before it commits (still_offered), and a second
        # draw there would withdraw two offers in three, so one build in nine would be bad, not one in three
        # (a build's layer keeps its params dict; the dict is kept here so its id is not reused)
        drawn = _offers.get(id(op.params))
        if drawn is None or drawn[0] is not op.params:
            drawn = _offers[id(op.params)] = (op.params, _rng.random() < 1 / 3)
        return None if drawn[1] else "not offered in this build"

    def run(self, op, inputs):
        from native.cpu.kernels.conv.epilogue import finish
        from native.cpu.kernels.conv.geometry import geometry
        from native.cpu.kernels.conv.weights import kernel_and_bias, kernel_spatial
        x = np.asarray(inputs[0])
        w, b = kernel_and_bias(op, inputs)
        ks = op.params.get("kernel_shape") or kernel_spatial(op, w)
        out = geometry(op.params, x.shape, ks)[4]
        y = np.zeros((x.shape[0], op.params["num_output_maps"]) + tuple(out), x.dtype)
        return finish(op, y, b, inputs, x.dtype)
