"""Reduced-precision GEMMs on an all-NaN operand (downstream of an FP16 overflow) skip BLAS's slow NaN path: the
outputs are NaN everywhere, exactly what the tactic gives, with the same shapes and types; anything else runs as
before."""
import numpy as np
import pytest

from native.cpu import precision
from native.device import call_tactic
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(3)


def _tactic(kind, name):
    return next(t for t in tactics_for(kind) if t.name == name)


def _both(tactic, op, args, monkeypatch):
    """(shortcut result, the tactic's own result through the same adapter)."""
    short = precision.run(tactic, op, args)
    calls = []
    monkeypatch.setattr(precision, "_all_nan_outputs", lambda *a: calls.append(1))
    monkeypatch.setattr(precision, "_nan_input", lambda op, args: False)
    full = precision.run(tactic, op, args)
    return short, full


@pytest.mark.parametrize("which", [0, 1])
def test_matmul_with_an_all_nan_operand(which, monkeypatch):
    a = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    b = RNG.standard_normal((2, 8, 3)).astype(np.float32)
    (a if which == 0 else b)[...] = np.nan
    op = Op("MatrixMultiply", "mm", {}, {}, precision="float16", output_types=("float16",))
    assert precision._nan_input(op, [a, b])
    short, full = _both(_tactic("MatrixMultiply", "blas"), op, [a, b], monkeypatch)
    assert short[0].shape == full[0].shape == (2, 5, 3) and short[0].dtype == full[0].dtype == np.float16
    assert np.isnan(short[0]).all() and np.isnan(full[0]).all()


def test_finite_or_partly_nan_operands_run_the_tactic():
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    op = Op("MatrixMultiply", "mm", {}, {}, precision="float16")
    assert not precision._nan_input(op, [a, a.T.copy()])
    a[0, 0] = np.nan   # first element NaN, the rest finite: the full check says no
    assert not precision._nan_input(op, [a, a.T.copy()])
    assert not precision._nan_input(Op("ElementWise", "e", {"op": "SUM"}, {}, precision="float16"),
                                    [np.full(3, np.nan, np.float32)] * 2)


def test_conv_shortcut_only_where_no_output_window_lies_wholly_in_padding(monkeypatch):
    x = np.full((1, 4, 6, 6), np.nan, np.float32)
    w = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    geo = {"num_output_maps": 5, "kernel_shape": [3, 3], "strides": [1, 1], "dilations": [1, 1], "groups": 1}
    t = _tactic("Convolution", "im2col-gemm")
    op = Op("Convolution", "c", {**geo, "pre_padding": [1, 1], "post_padding": [1, 1]}, {"kernel": w, "bias": b},
            precision="float16")
    assert precision._nan_input(op, [x])
    short, full = _both(t, op, [x], monkeypatch)
    assert short[0].shape == full[0].shape and np.isnan(full[0]).all() and np.isnan(short[0]).all()
    # a 1x1 kernel with padding: the border outputs are the bias alone, so no shortcut
    op1 = Op("Convolution", "c", {**geo, "kernel_shape": [1, 1], "pre_padding": [1, 1], "post_padding": [1, 1]},
             {"kernel": w[:, :, :1, :1].copy(), "bias": b}, precision="float16")
    assert not precision._nan_input(op1, [x])
    y = call_tactic(t, op1, [x])[0]
    np.testing.assert_allclose(y[0, :, 0, 0], b, rtol=1e-6)
