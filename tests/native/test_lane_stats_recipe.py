"""lane-stats' per-op recipe (h82: the row and stats shapes kept with it): one op run on inputs of changing shape,
layout and dtype gives, call by call, the floats and shapes a fresh op gives each input."""
import numpy as np
import pytest

from native.tactics import Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _op(relu):
    params = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5, "stash_type": 1}
    if relu:
        params["post_ops"] = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    return Op("Normalization", "ln", params)


@pytest.mark.parametrize("relu", [True, False])
def test_one_op_over_changing_inputs_gives_what_a_fresh_op_gives(relu):
    t = next(t for t in tactics_for("Normalization", "cpu") if t.name == "lane-stats")
    n = 24
    rng = np.random.default_rng(3)
    g, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    wide = rng.standard_normal((2, 3, 2 * n)).astype(np.float32)
    inputs = [rng.standard_normal((1, n)).astype(np.float32), rng.standard_normal((2, 3, n)).astype(np.float32),
              wide[..., ::2], rng.standard_normal((4, n)).astype(np.float64), rng.standard_normal((1, n)).astype(
                  np.float32)]
    op = _op(relu)
    for x in inputs:
        got, ref = t.run(op, [x, g, b]), t.run(_op(relu), [x, g, b])
        assert len(got) == len(ref) == 3
        for a, r in zip(got, ref):
            assert a.shape == r.shape and a.dtype == r.dtype and np.array_equal(a, r)
        assert got[0].shape == x.shape and got[1].shape == x.shape[:-1] + (1,)
