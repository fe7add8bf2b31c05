"""conv1d-frames (long-kernel 1-D convolutions as frames x weights in channel bands over the CPU pool): the values of
a float64 reference for STFT- and resampler-like shapes, 1-D and height-1 2-D, pads, dilation, bias and fused
activations, packed or not, on one thread and split over the pool; what it refuses, it says why."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import tuning
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(7)


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "conv1d-frames")


def _reference(x, w, b, s, d, pre, post):
    n, c, length = x.shape
    m, _, k = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre, post)])
    wo = (length + pre + post - d * (k - 1) - 1) // s + 1
    y = np.zeros((n, m, wo))
    for o in range(wo):
        patch = xp[:, :, o * s:o * s + d * (k - 1) + 1:d]            # [n, c, k]
        y[:, :, o] = np.einsum("nck,mck->nm", patch, w.astype(np.float64))
    return y if b is None else y + b.reshape(1, -1, 1)


@pytest.mark.parametrize("split_over_pool", [False, True])
@pytest.mark.parametrize("n,c,m,length,k,s,d,pre,post,act,bias,rank", [
    (1, 1, 257, 2000, 512, 160, 1, 0, 0, None, False, 3),          # an STFT as Conv
    (2, 1, 40, 900, 64, 20, 1, 3, 5, "RELU", True, 3),
    (1, 3, 9, 300, 16, 7, 2, 0, 4, "SIGMOID", True, 3),
    (1, 1, 16, 2000, 47, 44, 1, 2, 45, None, True, 4)])             # a polyphase resampler, [N, C, 1, L]
def test_conv1d_frames_matches_the_reference(monkeypatch, split_over_pool, n, c, m, length, k, s, d, pre, post, act,
                                             bias, rank):
    if split_over_pool:   # every layer large enough to split, the pool on
        monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 0)
        monkeypatch.setattr(threads, "num_threads", lambda: 2)
    x = RNG.standard_normal((n, c, length)).astype(np.float32)
    w = (RNG.standard_normal((m, c, k)) / np.sqrt(c * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [s], "dilations": [d], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    want = _reference(x, w, b, s, d, pre, post)
    if act:
        params["post_ops"] = [{"op": "activation", "type": act, "alpha": 0.0, "beta": 0.0}]
        want = activation(want, act)
    if rank == 4:
        x, w, want = x[:, :, None], w[:, :, None], want[:, :, None]
        params.update(kernel_shape=[1, k], strides=[1, s], dilations=[1, d], pre_padding=[0, pre],
                      post_padding=[0, post])
    weights = {"kernel": w} if b is None else {"kernel": w, "bias": b}
    t = _tactic()
    op = Op("Convolution", "c", params, weights)
    assert t.supports(op, [list(x.shape)]) is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), [x])[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    planned = np.full(want.shape, np.nan, np.float32)          # it writes the planned buffer when given one
    got = t.run(Op("Convolution", "c", params, t.prepare(op)), [x], [planned])[0]
    assert got is planned and np.allclose(planned, want, rtol=1e-4, atol=1e-5)


def test_the_split_does_not_change_the_floats(monkeypatch):
    """Channel bands over the pool give the single-thread floats (each output's sum is one GEMM's either way)."""
    x = RNG.standard_normal((1, 1, 4000)).astype(np.float32)
    w = RNG.standard_normal((130, 1, 256)).astype(np.float32)
    params = {"num_output_maps": 130, "kernel_shape": [256], "strides": [64], "groups": 1}
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": w})))
    one = t.run(op, [x])[0]
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    assert np.array_equal(t.run(op, [x])[0], one)


@pytest.mark.parametrize("params,shape,why", [
    ({"kernel_shape": [3, 3]}, [1, 4, 8, 8], "1-D"), ({"kernel_shape": [1, 32]}, [1, 4, 2, 64], "1-D"),
    ({"kernel_shape": [64], "groups": 2}, [1, 4, 800], "ungrouped"),
    ({"kernel_shape": [8]}, [1, 4, 800], "at least 16 taps"),
    ({"kernel_shape": [1, 32], "pre_padding": [1, 0], "post_padding": [0, 0]}, [1, 1, 1, 800], "height-1"),
    ({"kernel_shape": [64], "pre_padding": [-1]}, [1, 4, 800], "cropping"),
    ({"kernel_shape": [64], "post_ops": [{"op": "add", "input": 3}]}, [1, 4, 800], "residual")])
def test_conv1d_frames_refuses_with_a_reason(params, shape, why):
    assert why in _tactic().supports(Op("Convolution", "c", params, {}), [shape])
