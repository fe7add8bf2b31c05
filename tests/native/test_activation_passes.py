"""Activations rewritten as vectorised passes give the floats of the form they replace, bit for bit (special
values included), so the tactics that call them keep their FP32 results."""
import numpy as np
import pytest

from native.cpu.kernels.activations import activation, activation_inplace

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

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


def _numpy_path(monkeypatch, fn):
    """fn() with the numba kernels switched off (DEBUGKIT_JIT=0): the numpy passes."""
    from native import config
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        return fn()
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind,alpha,beta", [("HARD_SWISH", 0.0, 0.0), ("HARD_SIGMOID", 0.2, 0.5),
                                             ("HARD_SIGMOID", 1.0 / 6.0, 0.5), ("HARD_SIGMOID", -0.3, 0.1)])
def test_one_pass_hard_activations_match_the_numpy_passes(monkeypatch, dtype, kind, alpha, beta):
    pytest.importorskip("numba")
    from native import config
    from native.cpu import jit
    config.reload()
    assert jit.kernel(kind.lower()) is not None
    x = _values(dtype).reshape(2, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        got = activation(x, kind, alpha, beta)
        inplace = x.copy()
        assert activation_inplace(inplace, kind, alpha, beta) is inplace
        strided = activation(x[:, ::2], kind, alpha, beta)      # not contiguous: the numpy passes
        want = _numpy_path(monkeypatch, lambda: activation(x, kind, alpha, beta))
    assert got.dtype == want.dtype == dtype
    assert got.tobytes() == want.tobytes() and inplace.tobytes() == want.tobytes()
    assert strided.tobytes() == np.ascontiguousarray(want[:, ::2]).tobytes()
    xf = x.astype(np.float64)   # and the values are the activation's (NaN kept, -0.0 clipped to +0.0)
    with np.errstate(invalid="ignore"):
        gate = np.clip(xf * (1.0 / 6.0) + 0.5 if kind == "HARD_SWISH" else xf * alpha + beta, 0, 1)
        ref = xf * gate if kind == "HARD_SWISH" else gate
    finite = np.isfinite(xf) & (np.abs(xf) < 1e30)
    err = np.abs(got[finite] - ref[finite])
    assert (err <= 1e-6 * (np.abs(xf[finite]) + np.abs(ref[finite])) + 1e-37).all()
    assert np.isnan(got[np.isnan(xf)]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act,alpha,beta", [("HARD_SWISH", 0.0, 0.0), ("HARD_SIGMOID", 0.2, 0.5), ("RELU", 0.0, 0.0)])
@pytest.mark.parametrize("sel", [(slice(None), slice(None)), (slice(None), slice(2, 5))])
def test_conv_epilogue_bias_and_activation_in_one_pass(monkeypatch, dtype, act, alpha, beta, sel):
    """region_epilogue's bias + first activation as one compiled pass gives the two numpy passes' bits (a region
    that is not contiguous, or another activation, runs the numpy passes)."""
    pytest.importorskip("numba")
    from native import config
    from native.cpu.kernels.conv.epilogue import region_epilogue
    from native.tactics import Op
    config.reload()
    y0 = _values(dtype)[:2 * 6 * 7 * 4].reshape(2, 6, 7, 4)
    bias = np.random.default_rng(1).standard_normal(6).astype(dtype)
    op = Op("Convolution", "c", {"post_ops": [{"op": "activation", "type": act, "alpha": alpha, "beta": beta},
                                              {"op": "activation", "type": "CLIP", "alpha": -1.0, "beta": 0.75}]})
    with np.errstate(over="ignore", invalid="ignore"):
        got = y0.copy()
        region_epilogue(got, sel, op, [], bias)
        want = y0.copy()
        _numpy_path(monkeypatch, lambda: region_epilogue(want, sel, op, [], bias))
    assert got.tobytes() == want.tobytes()
    assert np.array_equal(got[:, :2], y0[:, :2], equal_nan=True) or sel[1] == slice(None)  # outside sel: untouched
