"""gemv-dot (a one-row product as dot products over the transposed weights, with its [bias +] activation, the numba
extra): the values of a float64 reference for each epilogue and weight orientation, NaN kept, the planned buffer
written; what it refuses, it says why."""
import numpy as np
import pytest

from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(12)


def _tactic():
    return next(t for t in tactics_for("MatrixMultiply", "cpu") if t.name == "gemv-dot")


def _op(w, bias=None, act=None, transpose_b=False, alpha=0.0):
    weights = {"b": w.T.copy() if transpose_b else w}
    post = []
    if bias is not None:
        weights["bias"] = bias
        post.append({"op": "bias", "weight": "bias", "axis": -1})
    if act:
        post.append({"op": "activation", "type": act, "alpha": alpha, "beta": 0.0})
    params = {"transpose_a": False, "transpose_b": transpose_b}
    if post:
        params["post_ops"] = post
    op = Op("MatrixMultiply", "mm", params, weights)
    op.weights = _tactic().prepare(op)
    return op


def _reference(a, w, bias, act, alpha):
    y = a.astype(np.float64) @ w.astype(np.float64)
    if bias is not None:
        y = y + bias
    if act == "RELU":
        y = np.maximum(y, 0)
    elif act == "SIGMOID":
        y = 1 / (1 + np.exp(-y))
    elif act == "LEAKY_RELU":
        y = np.where(y < 0, y * alpha, y)
    return y


@pytest.mark.parametrize("lead,k,n,act,bias,transpose_b", [
    ((1,), 1536, 128, "RELU", True, True), ((1,), 1536, 64, None, True, True), ((1, 1), 128, 1, "SIGMOID", True, False),
    ((), 67, 33, "LEAKY_RELU", False, False), ((1,), 5, 9, None, False, True), ((1,), 1000, 17, "SIGMOID", True, True)])
def test_gemv_dot_matches_the_reference(lead, k, n, act, bias, transpose_b):
    pytest.importorskip("numba")
    a = RNG.standard_normal(lead + (k,)).astype(np.float32)
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32) if bias else None
    op = _op(w, b, act, transpose_b, alpha=0.1)
    assert _tactic().supports(op, LayerContext([list(a.shape)], ["float32"])) is None
    y = _tactic().run(op, [a])[0]
    assert y.dtype == np.float32 and y.shape == lead + (n,)
    np.testing.assert_allclose(y, _reference(a, w, b, act, 0.1), rtol=2e-5, atol=2e-6 * np.sqrt(k))
    # a strided row (a column slice of a wider tensor) gives the same floats as the contiguous one
    wide = np.zeros(lead + (2 * k,), np.float32)
    wide[..., ::2] = a
    assert np.array_equal(_tactic().run(op, [wide[..., ::2]])[0], y)


def test_gemv_dot_writes_the_planned_buffer_and_keeps_nan():
    pytest.importorskip("numba")
    op = _op(np.eye(4, dtype=np.float32), np.zeros(4, np.float32), "RELU")
    out = np.full((1, 4), 7.0, np.float32)
    y = _tactic().run(op, [np.array([[1.0, -2.0, 3.0, -0.0]], np.float32)], [out])[0]
    assert y is out and y[0].tolist() == [1.0, 0.0, 3.0, 0.0]
    y = _tactic().run(op, [np.array([[np.nan, -1.0, 2.0, 4.0]], np.float32)])[0]
    assert np.isnan(y[0]).all()           # NaN * 0 is NaN: a NaN input reaches every output, as in BLAS


@pytest.mark.parametrize("params,shape,why", [
    ({"transpose_a": True}, [1, 8], "transposed"),
    ({"post_ops": [{"op": "add", "input": 1}]}, [1, 8], "post-ops"),
    ({}, [2, 8], "one row"),
    ({}, [1, 3, 8], "one row"),
    ({}, [-1, 8], "one row"),
])
def test_gemv_dot_refuses_with_a_reason(params, shape, why):
    op = Op("MatrixMultiply", "mm", {"transpose_a": False, "transpose_b": False, **params},
            {"b": np.ones((8, 4), np.float32)})
    reason = _tactic().supports(op, LayerContext([shape], ["float32"]))
    assert isinstance(reason, str) and why in reason
    assert "float32" in _tactic().supports(Op("MatrixMultiply", "mm", {}, {"b": np.ones((8, 4), np.float32)}),
                                           LayerContext([[1, 8]], ["float16"]))
