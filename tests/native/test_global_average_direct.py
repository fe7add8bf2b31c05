"""global-average-direct (pooling_variants.py, the numba extra): global AVERAGE pooling as one compiled pass, within
float32 rounding of the float64 mean; refuses what it does not compute."""
import numpy as np
import pytest

from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit


def _tactic():
    return next(t for t in tactics_for("Pooling", "cpu") if t.name == "global-average-direct")


@pytest.mark.parametrize("shape", [(1, 576, 7, 7), (2, 3, 1, 48), (1, 5, 17), (1, 4, 3, 5, 6), (1, 2, 1, 1)])
def test_global_average_direct_is_the_mean(shape):
    pytest.importorskip("numba")
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32) * 100
    op = Op(kind="Pooling", name="gap", params={"type": "AVERAGE", "global": True})
    assert _tactic().supports(op, LayerContext([list(shape)], ["float32"])) is None
    out = np.full(shape[:2] + (1,) * (len(shape) - 2), np.nan, np.float32)
    y = _tactic().run(op, [x], [out])[0]
    assert y is out
    want = x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    np.testing.assert_allclose(y, want, rtol=2e-7, atol=1e-6)
    assert np.array_equal(_tactic().run(op, [x])[0], y)     # without a planned buffer: its own


def test_global_average_direct_refuses_other_pools():
    pytest.importorskip("numba")
    t = _tactic()
    ctx = LayerContext([[1, 4, 3, 3]], ["float32"])
    assert t.supports(Op(kind="Pooling", name="p", params={"type": "MAX", "global": True}), ctx) is not None
    assert t.supports(Op(kind="Pooling", name="p", params={"type": "AVERAGE", "window": [2, 2]}), ctx) is not None
    assert t.supports(Op(kind="Pooling", name="p", params={"type": "AVERAGE", "global": True}),
                      LayerContext([[1, 4, 3, 3]], ["float16"])) is not None
