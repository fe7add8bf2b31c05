"""shifted-gemm-bands and sliding-window-bands: their base tactics cut into bands of output rows over the CPU pool:
the values of a float64 reference convolution (bias, dilation, stride, residual add, activation, a merged
shortcut) whatever the pool size; one band is the base tactic's own GEMMs (the same bits); offered only with more
than one pool thread."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import row_bands, tuning
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(12)
BANDED = {"shifted-gemm-bands": "shifted-gemm", "sliding-window-bands": "sliding-window"}


def _tactic(name):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _layer(c, m, hw, k, stride, pad, dil, post):
    x = RNG.standard_normal((2, c, hw, hw + 3)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = reference_conv(x, w, b, stride, pad, dil, 1)
    inputs, post_ops = [x, None, None], []
    for p in post:
        if p == "add":
            r = RNG.standard_normal(want.shape).astype(np.float32)
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(r)
            want = want + r
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
            want = activation(want, p)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [dil] * 2, "groups": 1, "post_ops": post_ops}
    return params, {"kernel": w, "bias": b}, inputs, want


@pytest.mark.parametrize("name", sorted(BANDED))
@pytest.mark.parametrize("pool", [2, 3])
@pytest.mark.parametrize("c,m,hw,k,stride,pad,dil,post", [
    (8, 6, 11, 3, 1, 1, 1, ["add", "RELU"]), (5, 7, 12, 5, 1, 2, 1, ["HARD_SWISH"]), (4, 4, 9, 3, 1, 2, 2, []),
    (6, 3, 10, 3, 2, 1, 1, ["RELU"]), (3, 5, 7, 3, 1, 0, 1, ["add"])])
def test_bands_match_the_reference(monkeypatch, name, pool, c, m, hw, k, stride, pad, dil, post):
    monkeypatch.setattr(row_bands, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)   # parallel_for really splits
    params, weights, inputs, want = _layer(c, m, hw, k, stride, pad, dil, post)
    t = _tactic(name)
    op = Op("Convolution", "c", params, dict(weights))
    why = t.supports(op, [list(inputs[0].shape)])
    if stride != 1 and name == "shifted-gemm-bands":
        assert why is not None and "declined" in why
        return
    assert why is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), inputs)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(BANDED))
def test_one_band_is_the_base_tactic_bit_for_bit(monkeypatch, name):
    """Below the parallel threshold the whole output is one band: the base tactic's GEMMs and epilogue."""
    monkeypatch.setattr(row_bands, "num_threads", lambda: 2)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1 << 60)
    params, weights, inputs, _ = _layer(16, 12, 14, 3, 1, 1, 1, ["add", "RELU"])
    outs = []
    for n in (name, BANDED[name]):
        t = _tactic(n)
        op = Op("Convolution", "c", params, dict(weights))
        op.weights = t.prepare(op)
        outs.append(t.run(op, inputs)[0])
    assert outs[0].tobytes() == outs[1].tobytes()


def test_merged_shortcut_rides_the_epilogue(monkeypatch):
    """A merged 1x1 shortcut (params 'side') is added once over the whole output, as the base tactic adds it."""
    monkeypatch.setattr(row_bands, "num_threads", lambda: 2)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    params, weights, inputs, want = _layer(6, 8, 10, 3, 1, 1, 1, [])
    x2 = RNG.standard_normal((2, 5, 10, 13)).astype(np.float32)
    ws = RNG.standard_normal((8, 5)).astype(np.float32)
    params = dict(params, side={"input": 3, "strides": [1, 1]})
    inputs = inputs + [x2]
    want = want + np.einsum("mc,nchw->nmhw", ws.astype(np.float64), x2.astype(np.float64))
    for name in BANDED:
        t = _tactic(name)
        assert "side" in t.honours
        op = Op("Convolution", "c", params, dict(weights, side_kernel=ws))
        op.weights = t.prepare(op)
        np.testing.assert_allclose(t.run(op, inputs)[0], want, rtol=1e-4, atol=1e-4)


def test_one_thread_is_not_offered(monkeypatch):
    op = Op("Convolution", "c", {"kernel_shape": [3, 3], "groups": 1, "strides": [1, 1]}, {})
    for name in BANDED:
        monkeypatch.setattr(row_bands, "num_threads", lambda: 1)
        assert "one CPU thread" in _tactic(name).supports(op, [[1, 4, 8, 8]])
        monkeypatch.setattr(row_bands, "num_threads", lambda: 2)
        assert _tactic(name).supports(op, [[1, 4, 8, 8]]) is None
