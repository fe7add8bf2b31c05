"""packed-gemm-direct (a few rows' product with its [bias +] activation as one compiled loop, the numba extra): the
values of a float64 reference for each epilogue, NaN and the sigmoid's far tails included; what it refuses, it says
why."""
import numpy as np
import pytest

from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(11)


def _tactic():
    return next(t for t in tactics_for("MatrixMultiply", "cpu") if t.name == "packed-gemm-direct")


def _op(w, bias=None, act=None, transpose_b=False, **act_params):
    weights = {"b": w.T.copy() if transpose_b else w}
    post = []
    if bias is not None:
        weights["bias"] = bias
        post.append({"op": "bias", "weight": "bias", "axis": -1})
    if act:
        post.append({"op": "activation", "type": act, "alpha": act_params.get("alpha", 0.0), "beta": 0.0})
    params = {"transpose_a": False, "transpose_b": transpose_b}
    if post:
        params["post_ops"] = post
    op = Op("MatrixMultiply", "mm", params, weights)
    op.weights = _tactic().prepare(op)
    return op


def _reference(a, w, bias, act, alpha=0.0):
    y = a.astype(np.float64) @ w.astype(np.float64)
    if bias is not None:
        y = y + bias
    if act == "RELU":
        y = np.maximum(y, 0)
    elif act == "SIGMOID":
        y = 1 / (1 + np.exp(-y))
    elif act == "TANH":
        y = np.tanh(y)
    elif act == "LEAKY_RELU":
        y = np.where(y < 0, y * alpha, y)
    return y


@pytest.mark.parametrize("lead,k,n,act,bias,transpose_b", [
    ((1,), 1536, 128, None, True, True), ((1,), 128, 128, "RELU", True, True), ((1,), 128, 1, "SIGMOID", True, True),
    ((2, 3), 67, 33, "TANH", False, False), ((8,), 5, 9, "LEAKY_RELU", True, False), ((), 64, 16, "SIGMOID", False, True)])
def test_gemm_direct_matches_the_reference(lead, k, n, act, bias, transpose_b):
    pytest.importorskip("numba")
    a = RNG.standard_normal(lead + (k,)).astype(np.float32)
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32) if bias else None
    op = _op(w, b, act, transpose_b, alpha=0.1)
    assert _tactic().supports(op, LayerContext([list(a.shape)], ["float32"])) is None
    y = _tactic().run(op, [a])[0]
    want = _reference(a, w, b, act, 0.1)
    assert y.dtype == np.float32 and y.shape == lead + (n,)
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6 * np.sqrt(k))


def test_gemm_direct_writes_the_planned_buffer_and_keeps_nan():
    pytest.importorskip("numba")
    w = np.eye(4, dtype=np.float32)
    op = _op(w, np.zeros(4, np.float32), "RELU")
    out = np.full((2, 4), 7.0, np.float32)
    a = np.array([[np.nan, -1.0, 2.0, -0.0], [1.0, 2.0, -3.0, 4.0]], np.float32)
    y = _tactic().run(op, [a], [out])[0]
    assert y is out
    assert np.isnan(y[0]).all()           # NaN * 0 is NaN: a NaN input reaches every output of its row, as in BLAS
    assert y[1].tolist() == [1.0, 2.0, 0.0, 4.0]


def test_gemm_direct_sigmoid_keeps_small_probabilities_relative():
    """e / (1 + e) below 0: a probability of 1e-30 keeps ~7 digits; past float32's exp range it is 0, and +inf is 1."""
    pytest.importorskip("numba")
    v = np.array([[-69.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, -90.0, np.inf, -np.inf, np.nan]], np.float32)
    op = _op(np.ones((1, 1), np.float32), None, "SIGMOID")
    y = np.array([_tactic().run(op, [x.reshape(1, 1)])[0][0, 0] for x in v[0]])   # one per row: inf * 0 is NaN
    want = 1 / (1 + np.exp(-v[0, :6].astype(np.float64)))
    np.testing.assert_allclose(y[:6], want, rtol=1e-6)
    assert y[6:9].tolist() == [0.0, 1.0, 0.0] and np.isnan(y[9])


@pytest.mark.parametrize("params,shape,why", [
    ({"transpose_a": True}, [1, 8], "transposed"),
    ({"post_ops": [{"op": "add", "input": 1}]}, [1, 8], "post-ops"),
    ({}, [9, 8], "rows at most"),
    ({}, [3, 3, 8], "rows at most"),
    ({}, [-1, 8], "known shape"),
])
def test_gemm_direct_refuses_with_a_reason(params, shape, why):
    op = Op("MatrixMultiply", "mm", {"transpose_a": False, "transpose_b": False, **params},
            {"b": np.ones((8, 4), np.float32)})
    reason = _tactic().supports(op, LayerContext([shape], ["float32"]))
    assert isinstance(reason, str) and why in reason
    assert "float32" in _tactic().supports(Op("MatrixMultiply", "mm", {}, {"b": np.ones((8, 4), np.float32)}),
                                           LayerContext([[1, 8]], ["float16"]))
