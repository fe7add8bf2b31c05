"""Weights rounded to a layer's precision once per array (native/cpu/precision.py `round_weights`): the candidate
tactics of a layer and the builds of a precision search share the rounded copy; it is read-only, and a replaced
weight array is rounded afresh."""
import gc

import numpy as np
import pytest

from native import numerics
from native.cpu import precision as P
from native.tactics import Op


def _op(weights, precision="float16", math=None):
    return Op("MatrixMultiply", "mm", {}, weights, precision=precision, math=math or "")


def test_a_weight_is_rounded_once_per_precision_and_the_copy_is_read_only():
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32) * 1e3
    w[0, 0] = 7e4                                              # past FP16's largest: inf
    first = P.round_weights(_op({"b": w}))["b"]
    again = P.round_weights(_op({"b": w}))["b"]
    assert again is first and np.array_equal(first, numerics.round_fp16(w)) and np.isinf(first[0, 0])
    with pytest.raises(ValueError):
        first[0, 1] = 0.0                                      # shared: a write would change other layers
    assert w.flags.writeable and w[0, 0] == 7e4                # the caller's array is untouched
    bf16 = P.round_weights(_op({"b": w}, "bfloat16"))["b"]
    assert bf16 is not first and np.array_equal(bf16, numerics.round_bf16(w))
    tf32 = P.round_weights(_op({"b": w}, "float32", "tf32"))["b"]
    assert np.array_equal(tf32, numerics.round_tf32(w))
    replaced = w.copy()                                        # equal values, another array: rounded afresh
    assert P.round_weights(_op({"b": replaced}))["b"] is not first


def test_the_entry_goes_with_its_array():
    w = np.ones((64, 128), np.float32)
    P.round_weights(_op({"b": w}))
    key = (id(w), "fp16")
    assert key in P._ROUNDED
    del w
    gc.collect()
    assert key not in P._ROUNDED


def test_small_arrays_are_rounded_per_call():
    w = np.full(8, 1.0 + 2 ** -12, np.float32)
    a, b = P.round_weights(_op({"b": w}))["b"], P.round_weights(_op({"b": w}))["b"]
    assert a is not b and a.flags.writeable and np.array_equal(a, np.ones(8, np.float32))
