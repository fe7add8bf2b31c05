"""Activations rewritten as vectorised passes give the floats of the form they replace, bit for bit (special
values included), so the tactics that call them keep their FP32 results."""
import numpy as np
import pytest

from native.cpu.kernels.activations import activation, activation_inplace

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-38, -1e-38, 3e38, -3e38]


def _values(dtype):
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):
        x = rng.standard_normal(4000) * 10.0 ** rng.uniform(-40, 38, 4000)
        return np.concatenate([x, SPECIALS]).astype(dtype)


def _masked_leaky(x, a):
    y = x.copy()
    np.multiply(y, a, out=y, where=y < 0)   # the form the fast path replaces
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [0.2, 0.20000000298023224, 0.01, 0.999, 1.0, 1.5, 0.0, -0.5])
def test_leaky_relu_bits_match_the_masked_multiply(dtype, alpha):
    x = _values(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = _masked_leaky(x, alpha)
        got = activation(x, "LEAKY_RELU", alpha)
        inplace = x.copy()
        out = activation_inplace(inplace, "LEAKY_RELU", alpha)
    assert got.dtype == want.dtype and out is inplace
    assert got.tobytes() == want.tobytes() and inplace.tobytes() == want.tobytes()
    assert x.tobytes() == _values(dtype).tobytes()   # the input is untouched
