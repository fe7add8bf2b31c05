"""Inference BatchNormalization's per-channel affine pass compiled (jit_norm.channel_affine, the numba extra) gives
numpy's two broadcast passes bit for bit: float32 maps of 2 to 5 dimensions, NaN / inf / -0.0 included."""
import numpy as np
import pytest

from native.cpu import jit
from native.cpu.kernels import norm

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


@pytest.mark.parametrize("shape", [(1, 24, 76, 32), (2, 3), (3, 5, 7), (1, 4, 2, 3, 5), (2, 6, 1, 1)])
def test_channel_affine_is_numpys_two_passes(shape, monkeypatch):
    pytest.importorskip("numba")
    assert jit.kernel("channel_affine") is not None
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32) * 10
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, -0.0][:flat.size]
    c = shape[1]
    params = [rng.random(c).astype(np.float32) + 0.5, rng.standard_normal(c).astype(np.float32),
              rng.standard_normal(c).astype(np.float32), rng.random(c).astype(np.float32)]
    p = {"epsilon": 1e-3, "training_mode": False}
    got = norm._batch(x, [x] + params, p)[0]
    monkeypatch.setattr(jit, "kernel", lambda name: None)     # numpy's passes: what runs without numba
    want = norm._batch(x, [x] + params, p)[0]
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == shape
    assert got.tobytes() == want.tobytes()
    inv = params[0].astype(np.float64) / np.sqrt(params[3].astype(np.float64) + 1e-3)
    ref = (x[:, :, ...].astype(np.float64) - params[2].reshape((1, c) + (1,) * (len(shape) - 2))) \
        * inv.reshape((1, c) + (1,) * (len(shape) - 2)) + params[1].reshape((1, c) + (1,) * (len(shape) - 2))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-5, atol=1e-5)
