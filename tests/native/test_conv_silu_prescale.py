"""Conv + SiLU epilogue with the GEMM pre-scaled by 1/2 at prepare time (silu(z) = h + h*tanh(h), h = z/2)."""
import numpy as np
import pytest

from native.cpu.kernels import conv as C
from native.tactics import Op


def _ref(x, w, b, add=None):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    z = np.zeros((n, m, h, wd))
    for i in range(kh):
        for j in range(kw):
            z += np.einsum("mc,nchw->nmhw", w[:, :, i, j], xp[:, :, i:i + h, j:j + wd])
    z += b.reshape(1, -1, 1, 1)
    y = z / (1 + np.exp(-z))
    return y if add is None else y + add


@pytest.mark.parametrize("k,tactic", [(3, C.Im2colGemm), (1, C.PointwiseGemm)])
@pytest.mark.parametrize("add", [None, "full", "broadcast"])
@pytest.mark.parametrize("hw,m", [(5, 40), (48, 40), (12, 400)])  # single thread, row bands, channel bands
def test_conv_silu_prescaled(k, tactic, add, hw, m, monkeypatch):
    if hw > 5:  # split even small layers over the pool, so row and channel bands are both exercised
        monkeypatch.setattr(C.tuning, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 24, hw, hw), dtype=np.float32)
    w = (rng.standard_normal((m, 24, k, k)) * 0.2).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    post = [{"op": "activation", "type": "SILU"}]
    inputs = [x, None, None]
    r = None
    if add is not None:
        r = rng.standard_normal((1, m, hw, hw) if add == "full" else (1, m, 1, hw)).astype(np.float32)
        inputs.append(r)
        post.append({"op": "add", "input": 3})
    params = {"kernel_shape": [k, k], "pre_padding": [k // 2] * 2, "post_padding": [k // 2] * 2,
              "num_output_maps": m, "groups": 1, "post_ops": post}
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    t = tactic()
    op.weights = t.prepare(op)
    assert "kernel_gemm_scale" in op.weights and "bias" not in op.weights
    # the bias rides in the GEMM as a last column, halved with the weights
    np.testing.assert_allclose(op.weights["kernel_gemm_biased"] * 2,
                               np.concatenate([w.reshape(1, m, -1), b.reshape(1, m, 1)], axis=2))
    y = t.run(op, inputs)[0]
    np.testing.assert_allclose(y, _ref(x, w, b, r), rtol=1e-4, atol=1e-4)
    # the unpacked-weights path (builder's first run) agrees
    y0 = t.run(Op("Convolution", "c", params, {"kernel": w, "bias": b}), inputs)[0]
    np.testing.assert_allclose(y0, y, rtol=1e-5, atol=1e-5)


_ACT = {"RELU": lambda z: np.maximum(z, 0), "LEAKY_RELU": lambda z: np.where(z < 0, 0.1 * z, z),
        "SIGMOID": lambda z: 1 / (1 + np.exp(-z)), "HARD_SWISH": lambda z: z * np.clip(z / 6 + 0.5, 0, 1),
        "CLIP": lambda z: np.clip(z, 0.1, 0.5)}


@pytest.mark.parametrize("steps", [[], ["RELU"], ["add", "RELU"], ["RELU", "add"], ["LEAKY_RELU"], ["SIGMOID"],
                                   ["HARD_SWISH", "bias"], ["CLIP"], ["bias"]])
@pytest.mark.parametrize("hw", [7, 48])  # one band (in place on the output) / row bands (temp, last step stores)
def test_conv_band_epilogue_last_step_into_output(steps, hw):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 16, hw, hw), dtype=np.float32)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    b2 = rng.standard_normal(32).astype(np.float32)
    r = rng.standard_normal((1, 32, hw, hw)).astype(np.float32)
    z = _ref_linear(x, w, b)
    post = []
    for st in steps:
        if st == "add":
            post.append({"op": "add", "input": 3})
            z = z + r
        elif st == "bias":
            post.append({"op": "bias", "weight": "b2", "axis": 1})
            z = z + b2.reshape(1, -1, 1, 1)
        else:
            post.append({"op": "activation", "type": st, "alpha": 0.1 if st in ("LEAKY_RELU", "CLIP") else 0.0,
                         "beta": 0.5 if st == "CLIP" else 0.0})
            z = _ACT[st](z)
    params = {"kernel_shape": [3, 3], "pre_padding": [1, 1], "post_padding": [1, 1], "num_output_maps": 32,
              "groups": 1, "post_ops": post}
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b, "b2": b2})
    t = C.Im2colGemm()
    op.weights = t.prepare(op)
    y = t.run(op, [x, None, None, r])[0]
    np.testing.assert_allclose(y, z, rtol=1e-4, atol=1e-4)


def _ref_linear(x, w, b):
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    z = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            z += np.einsum("mc,nchw->nmhw", w[:, :, i, j], xp[:, :, i:i + h, j:j + wd])
    return z + b.reshape(1, -1, 1, 1)
