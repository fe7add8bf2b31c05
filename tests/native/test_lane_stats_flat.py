"""lane-stats on [m, n] rows (a classifier's [1, n]: no reshaped views) gives the floats and stat shapes of the same
rows as [1, m, n], with and without its fused RELU."""
import numpy as np
import pytest

from native.tactics import Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _run(x, g, b, relu):
    t = next(t for t in tactics_for("Normalization", "cpu") if t.name == "lane-stats")
    params = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5, "stash_type": 1}
    if relu:
        params["post_ops"] = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    return t.run(Op("Normalization", "ln", params), [x, g, b])


@pytest.mark.parametrize("m,n,relu", [(1, 128, True), (3, 96, False), (1, 7, False)])
def test_flat_rows_match_the_batched_rows(m, n, relu):
    rng = np.random.default_rng(m * n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    g, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, mean, inv = _run(x, g, b, relu)
    y3, mean3, inv3 = _run(x[None], g, b, relu)
    assert y.shape == (m, n) and mean.shape == inv.shape == (m, 1)
    assert np.array_equal(y, y3[0]) and np.array_equal(mean, mean3[0]) and np.array_equal(inv, inv3[0])
    xd = x.astype(np.float64)
    want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, np.maximum(want, 0) if relu else want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean[:, 0], xd.mean(-1), rtol=1e-5, atol=1e-6)
