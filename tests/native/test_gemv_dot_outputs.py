"""gemv-dot's run around its compiled call (h82: dtype checks by identity first, the [1, N] row shape kept per op):
the planned buffer written when it fits (shape, float32, C-contiguous), a fresh array otherwise, rows of any
leading shape and float64 inputs handled as before; the floats are the compiled call's, bit for bit."""
import numpy as np
import pytest

from native.cpu import jit
from native.tactics import Op, tactics_for

pytestmark = pytest.mark.jit


def _op(k, n, seed=0):
    tac = next(t for t in tactics_for("MatrixMultiply", "cpu") if t.name == "gemv-dot")
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    op = Op("MatrixMultiply", "mm", {"transpose_a": False, "transpose_b": False,
                                     "post_ops": [{"op": "bias", "weight": "bias", "axis": -1},
                                                  {"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]},
            {"b": w, "bias": b})
    op.weights = tac.prepare(op)
    return tac, op, w, b


def _direct(op, a2):
    """The compiled kernel called on its own: the floats run must return."""
    y = np.empty((1, op.weights["bt_gemv"].shape[0]), np.float32)
    jit.kernel("gemv_dot")(a2, op.weights["bt_gemv"], op.weights["bias"], True, 1, y)
    return y


@pytest.mark.parametrize("lead", [(1,), (), (1, 1)])
def test_gemv_dot_writes_a_fitting_buffer_and_allocates_otherwise(lead):
    pytest.importorskip("numba")
    k, n = 96, 40
    tac, op, w, b = _op(k, n)
    a = np.random.default_rng(1).standard_normal(lead + (k,)).astype(np.float32)
    ref = _direct(op, a.reshape(1, k)).reshape(lead + (n,))
    np.testing.assert_allclose(ref, np.maximum(a.astype(np.float64) @ w + b, 0), rtol=1e-5, atol=1e-5)
    out = np.full(lead + (n,), np.nan, np.float32)
    y = tac.run(op, [a], [out])[0]
    assert y is out and np.array_equal(y, ref)
    for bad in (np.zeros(lead + (n + 1,), np.float32), np.zeros(lead + (n,), np.float64),
                np.zeros(lead + (2 * n,), np.float32)[..., ::2], None):
        y = tac.run(op, [a], [bad])[0]
        assert y is not bad and y.shape == lead + (n,) and y.dtype == np.float32 and np.array_equal(y, ref)
    assert np.array_equal(tac.run(op, [a])[0], ref)
    y = tac.run(op, [a.astype(np.float64)])[0]        # cast to float32 first, as before
    assert y.dtype == np.float32 and np.array_equal(y, ref)
    wide = np.zeros(lead + (2 * k,), np.float32)      # a strided row: made contiguous, the same floats
    wide[..., ::2] = a
    assert np.array_equal(tac.run(op, [wide[..., ::2]])[0], ref)
