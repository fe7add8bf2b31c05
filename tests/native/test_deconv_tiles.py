"""deconv-tiles-jit: a transposed convolution whose kernel tiles the output (kernel == stride) with few outputs an
input pixel, as one compiled loop: gemm-col2im's values in float64 (within float32 rounding) for 2x2 / 3x3 / 1x2
kernels, batch 2, bias or none, RELU (NaN kept) / SIGMOID, bands over the pool; refused where it does not apply."""
import numpy as np
import pytest

from native.cpu import jit, threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import deconv, tuning
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(7071)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactic(name="deconv-tiles-jit"):
    return next(t for t in tactics_for("Deconvolution", "cpu") if t.name == name)


def _params(m, ks, act=None, **extra):
    p = {"num_output_maps": m, "kernel_shape": list(ks), "strides": list(ks), "pre_padding": [0, 0],
         "post_padding": [0, 0], "dilations": [1, 1], "groups": 1, "output_padding": [0, 0],
         "post_ops": [] if act is None else [{"op": "activation", "type": act, "alpha": 0.0, "beta": 0.0}]}
    p.update(extra)
    return p


@pytest.mark.parametrize("pool", [1, 2, 3])
@pytest.mark.parametrize("n,c,m,h,w,ks,act,biased", [
    (1, 24, 1, 20, 18, (2, 2), "SIGMOID", True),
    (2, 5, 4, 7, 9, (2, 2), "RELU", True),
    (1, 3, 1, 6, 5, (3, 3), None, False),
    (1, 7, 3, 4, 11, (1, 2), "SIGMOID", False),
    (1, 2, 2, 1, 1, (2, 2), "RELU", True),
], ids=lambda v: str(v))
def test_matches_gemm_col2im(monkeypatch, pool, n, c, m, h, w, ks, act, biased):
    if deconv._deconv_tiles_kernel() is None:
        pytest.skip("no numba")
    monkeypatch.setattr(deconv, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((c, m) + ks).astype(np.float32)
    weights = {"kernel": k}
    if biased:
        weights["bias"] = RNG.standard_normal(m).astype(np.float32)
    params = _params(m, ks, act)
    t = _tactic()
    op = Op("Deconvolution", "d", params, weights)
    assert t.supports(op, [list(x.shape)]) is None
    plain = _params(m, ks)
    want = _tactic("gemm-col2im").run(Op("Deconvolution", "d", plain, {k_: v.astype(np.float64) for k_, v in
                                                                       weights.items()}), [x.astype(np.float64)])[0]
    if act:
        want = activation(want, act)
    for ws in (weights, t.prepare(op)):
        got = t.run(Op("Deconvolution", "d", params, ws), [x])[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_relu_keeps_nan():
    if deconv._deconv_tiles_kernel() is None:
        pytest.skip("no numba")
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    op = Op("Deconvolution", "d", _params(2, (2, 2), "RELU"), {"kernel": RNG.standard_normal((3, 2, 2, 2))
                                                                .astype(np.float32)})
    got = _tactic().run(op, [x])[0]
    assert np.isnan(got[0, :, 4:6, 6:8]).all() and np.isnan(got).sum() == 8


def test_refuses_what_it_does_not_compute(monkeypatch):
    t = _tactic()
    k = np.ones((4, 5, 2, 2), np.float32)     # 5 outputs x 4 taps = 20 an input pixel
    assert "at most" in t.supports(Op("Deconvolution", "d", _params(5, (2, 2)), {"kernel": k}), [[1, 4, 8, 8]])
    k = np.ones((4, 1, 2, 2), np.float32)
    for extra, word in (({"strides": [1, 1]}, "kernel == stride"), ({"pre_padding": [1, 1]}, "kernel == stride"),
                        ({"groups": 2}, "one group"),
                        ({"post_ops": [{"op": "activation", "type": "TANH", "alpha": 0.0, "beta": 0.0}]}, "post-op")):
        assert word in t.supports(Op("Deconvolution", "d", _params(1, (2, 2), **extra), {"kernel": k}), [[1, 4, 8, 8]])
    assert "constant" in t.supports(Op("Deconvolution", "d", _params(1, (2, 2)), {}), [[1, 4, 8, 8]])
    monkeypatch.setattr(jit, "available", lambda: False)
    assert "numba" in t.supports(Op("Deconvolution", "d", _params(1, (2, 2)), {"kernel": k}), [[1, 4, 8, 8]])
