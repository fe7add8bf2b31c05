"""max-tiles (max pooling over 1x2 / 2x1 / 2x2 windows that tile the map, the numba extra): strided-taps' floats bit
for bit, NaN, -0.0 / +0.0 ties and infinities included; what it refuses, it says why."""
import numpy as np
import pytest

from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactics():
    ts = {t.name: t for t in tactics_for("Pooling", "cpu")}
    return ts["max-tiles"], ts["strided-taps"]


def _op(k, **extra):
    return Op("Pooling", "p", {"type": "MAX", "window": list(k), "strides": list(k), **extra}, {})


@pytest.mark.parametrize("shape,k", [((1, 48, 32, 16), (1, 2)), ((1, 24, 72, 32), (2, 2)), ((2, 3, 6, 2), (2, 2)),
                                     ((1, 5, 4, 7), (2, 1)), ((1, 96, 10, 4), (1, 2)), ((1, 2, 3, 3), (1, 1))])
def test_max_tiles_is_strided_taps_bit_for_bit(shape, k):
    pytest.importorskip("numba")
    tiles, taps = _tactics()
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    special = np.array([np.nan, 0.0, -0.0, 0.0, -0.0, np.inf, -np.inf, 1.0, np.nan, np.nan], np.float32)
    idx = rng.choice(flat.size, size=min(flat.size, 40), replace=False)
    flat[idx] = special[np.arange(idx.size) % special.size]
    op = _op(k)
    assert tiles.supports(op, LayerContext([list(shape)], ["float32"])) is None
    got = tiles.run(op, [x])[0]
    want = taps.run(op, [x])[0]
    assert got.shape == want.shape == (shape[0], shape[1], shape[2] // k[0], shape[3] // k[1])
    assert got.tobytes() == want.tobytes()
    # and a plain reference where it is defined (no NaN): the window max
    ref = x.reshape(shape[0], shape[1], shape[2] // k[0], k[0], shape[3] // k[1], k[1]).max(axis=(3, 5))
    ok = ~np.isnan(ref)
    assert np.array_equal(got[ok], ref[ok]) and np.isnan(got[~ok]).all()


@pytest.mark.parametrize("params,shape,why", [
    ({"window": [3, 3], "strides": [3, 3]}, [1, 2, 6, 6], "taps"),
    ({"window": [2, 2], "strides": [1, 1]}, [1, 2, 6, 6], "stride"),
    ({"window": [2, 2], "strides": [2, 2]}, [1, 2, 5, 6], "tile"),
    ({"window": [2, 2], "strides": [2, 2], "pre_padding": [1, 1], "post_padding": [1, 1]}, [1, 2, 6, 6], "tile"),
    ({"window": [2, 2], "strides": [2, 2], "type": "AVERAGE"}, [1, 2, 6, 6], "MAX"),
    ({"window": [2, 2], "strides": [2, 2], "num_outputs": 2}, [1, 2, 6, 6], "one output"),
    ({"window": [2, 2], "strides": [2, 2], "post_ops": [{"op": "activation", "type": "RELU"}]}, [1, 2, 6, 6],
     "post-ops"),
    ({"window": [2, 2], "strides": [2, 2]}, [1, 2, 6], "4-D"),
])
def test_max_tiles_refuses_with_a_reason(params, shape, why):
    tiles, _ = _tactics()
    reason = tiles.supports(Op("Pooling", "p", {"type": "MAX", **params}, {}), LayerContext([shape], ["float32"]))
    assert isinstance(reason, str) and why in reason
