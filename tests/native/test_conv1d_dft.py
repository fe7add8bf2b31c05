"""conv1d-dft (an STFT written as Conv, computed by real FFTs of windowed frames): recognises windowed DFT bases in
the layouts the audio exports use (real rows, imaginary rows, both; the sin rows' sign either way), matches a float64
reference closer than the GEMM does, writes the planned buffer, gives the same floats split over the pool or not,
and refuses weights that are not such a basis, saying why."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import conv1d_dft
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(11)


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "conv1d-dft")


def _basis(n, parts, sin_sign=-1.0):
    """[M, 1, n] float32 weights: for each part ('re' / 'im') the N/2 + 1 rows win * cos, or sin_sign * win * sin."""
    k = np.arange(n // 2 + 1)[:, None]
    t = np.arange(n)[None, :]
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)          # a Hann window
    rows = [win * (np.cos(2 * np.pi * k * t / n) if p == "re" else sin_sign * np.sin(2 * np.pi * k * t / n))
            for p in parts]
    return np.concatenate(rows).astype(np.float32)[:, None, :]


def _reference(x, w, b, s, pre, post):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre, post)])
    k = w.shape[-1]
    t = (xp.shape[2] - k) // s + 1
    frames = np.stack([xp[:, 0, i * s:i * s + k] for i in range(t)], axis=1)            # [n, t, k]
    y = np.einsum("ntk,mk->nmt", frames, w.reshape(w.shape[0], -1).astype(np.float64))
    return y if b is None else y + b.reshape(1, -1, 1)


@pytest.mark.parametrize("parts,sin_sign,n,s,pre,post,bias,act,rank", [
    (("re", "im"), -1.0, 512, 160, 0, 0, False, None, 3),       # NeMo's [514, 1, 512]
    (("re",), -1.0, 64, 16, 0, 0, False, None, 3),              # openwakeword's real part
    (("im",), 1.0, 64, 16, 32, 32, True, "RELU", 3),            # its imaginary part, another sign, padded
    (("im", "re"), 1.0, 32, 8, 0, 5, True, None, 4)])           # height-1 2-D Conv, blocks the other way round
def test_conv1d_dft_matches_the_reference(parts, sin_sign, n, s, pre, post, bias, act, rank):
    w = _basis(n, parts, sin_sign)
    m = w.shape[0]
    x = RNG.uniform(-1, 1, (2, 1, 40 * s + n)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    params = {"num_output_maps": m, "kernel_shape": [n], "strides": [s], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    want = _reference(x, w, b, s, pre, post)
    if act:
        params["post_ops"] = [{"op": "activation", "type": act, "alpha": 0.0, "beta": 0.0}]
        want = activation(want, act)
    if rank == 4:
        x, w, want = x[:, :, None], w[:, :, None], want[:, :, None]
        params.update(kernel_shape=[1, n], strides=[1, s], pre_padding=[0, pre], post_padding=[0, post])
    weights = {"kernel": w} if b is None else {"kernel": w, "bias": b}
    t = _tactic()
    op = Op("Convolution", "c", params, weights)
    assert t.supports(op, [list(x.shape)]) is None
    packed = t.prepare(op)
    assert "dft_windows" in packed and "kernel" not in packed
    for ws in (weights, packed):
        got = t.run(Op("Convolution", "c", params, ws), [x])[0]
        assert got.shape == want.shape and got.dtype == np.float32
        # one rounding of a float64 transform: within float32's resolution of the largest value
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())
    planned = np.full(want.shape, np.nan, np.float32)
    got = t.run(Op("Convolution", "c", params, packed), [x], [planned])[0]
    assert got is planned and np.allclose(planned, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_a_real_and_imaginary_pair_shares_one_window_and_one_transform():
    """NeMo's [514, 1, 512]: the two blocks' fits differ in their last bits (float32 weights), each reproduces the
    other block within the tolerance: conv1d-dft-shared takes one window, so one FFT per frame; conv1d-dft keeps
    both (its floats unchanged) and the shared tactic refuses weights it would not change; different windows stay
    two."""
    from native.cpu.kernels.conv.conv1d_dft import Conv1dDft, Conv1dDftShared
    t = Conv1dDftShared()
    params = {"num_output_maps": 514, "kernel_shape": [512], "strides": [160], "groups": 1}
    nemo = Op("Convolution", "c", params, {"kernel": _basis(512, ("re", "im"))})
    packed = t.prepare(nemo)
    assert packed["dft_windows"].shape == (1, 512)
    assert packed["dft_blocks"].tolist() == [[0, 0, 1], [1, 0, 1]]   # rows -win * sin: the transform's imag part
    assert Conv1dDft().prepare(nemo)["dft_windows"].shape == (2, 512)
    assert t.supports(nemo, [[1, 1, 512 * 4]]) is None
    plain = Op("Convolution", "c", dict(params, num_output_maps=257), {"kernel": _basis(512, ("re",))})
    assert "no window to share" in t.supports(plain, [[1, 1, 512 * 4]])
    k = np.arange(33)[:, None] * np.arange(64)[None, :] * 2 * np.pi / 64
    hamming = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(64) / 64)
    w = np.concatenate([_basis(64, ("re",))[:, 0], (hamming * np.sin(k)).astype(np.float32)])[:, None, :]
    params = {"num_output_maps": 66, "kernel_shape": [64], "strides": [16], "groups": 1}
    packed = t.prepare(Op("Convolution", "c", params, {"kernel": w}))
    assert packed["dft_windows"].shape == (2, 64) and packed["dft_blocks"].tolist() == [[0, 0, 1], [1, 1, -1]]
    x = RNG.uniform(-1, 1, (1, 1, 20 * 16 + 64)).astype(np.float32)
    want = _reference(x, w, None, 16, 0, 0)
    got = t.run(Op("Convolution", "c", params, packed), [x])[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_the_frames_split_over_the_pool_gives_the_same_floats(monkeypatch):
    w = _basis(128, ("re", "im"))
    x = RNG.uniform(-1, 1, (1, 1, 64 * 40 + 128)).astype(np.float32)
    params = {"num_output_maps": w.shape[0], "kernel_shape": [128], "strides": [40], "groups": 1}
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": w})))
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    one = t.run(op, [x])[0]
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(conv1d_dft, "MIN_FRAMES_SPLIT", 1)
    np.testing.assert_array_equal(t.run(op, [x])[0], one)


@pytest.mark.parametrize("weights,shape,why", [
    (lambda: _basis(64, ("re",)) + np.float32(1e-3), [1, 1, 640], "not a windowed DFT basis"),
    (lambda: RNG.standard_normal((33, 1, 64)).astype(np.float32), [1, 1, 640], "not a windowed DFT basis"),
    (lambda: _basis(64, ("re",))[:20], [1, 1, 640], "blocks of N/2 + 1"),
    (lambda: np.zeros((33, 1, 64), np.float32), [1, 1, 640], "zero"),
    (lambda: _basis(64, ("re",)), [1, 2, 640], "one input channel"),
    (lambda: None, [1, 1, 640], "constant weights")])
def test_conv1d_dft_refuses_with_a_reason(weights, shape, why):
    w = weights()
    params = {"kernel_shape": [64], "strides": [16], "groups": 1}
    op = Op("Convolution", "c", params, {} if w is None else {"kernel": w})
    assert why in _tactic().supports(op, [shape])


@pytest.mark.parametrize("parts,n,s,pre,post,batch,rank,frames,split", [
    (("re", "im"), 512, 160, 0, 0, 1, 3, 100, False),     # NeMo
    (("re",), 512, 160, 0, 0, 1, 3, 96, False),           # openwakeword's real part
    (("re", "im"), 256, 128, 64, 64, 4, 3, 4, False),     # silero-vad's batch of 4 (one transform call)
    (("im", "re"), 256, 128, 64, 64, 2, 3, 150, True),    # padded, two signals, split over the pool
    (("im",), 64, 16, 0, 5, 3, 4, 150, False),            # height-1 2-D Conv, three signals
    (("im",), 64, 16, 0, 5, 3, 4, 20, False)])
def test_the_held_run_gives_the_first_runs_floats(monkeypatch, parts, n, s, pre, post, batch, rank, frames, split):
    w = _basis(n, parts, 1.0)
    params = {"num_output_maps": w.shape[0], "kernel_shape": [n], "strides": [s], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    x = RNG.uniform(-1, 1, (batch, 1, frames * s + n)).astype(np.float32)
    if rank == 4:
        x, w = x[:, :, None], w[:, :, None]
        params.update(kernel_shape=[1, n], strides=[1, s], pre_padding=[0, pre], post_padding=[0, post])
    monkeypatch.setattr(threads, "num_threads", lambda: 2 if split else 1)
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": w})))
    first = t.run(op, [x])[0]                    # the general path; the recipe kept
    assert op.__dict__["_dft_run"][0] == x.shape
    again = t.run(op, [x.copy()])[0]
    np.testing.assert_array_equal(again, first)
    planned = np.full(first.shape, np.nan, np.float32)
    assert t.run(op, [x], [planned])[0] is planned
    np.testing.assert_array_equal(planned, first)
    other = RNG.uniform(-1, 1, x.shape).astype(np.float32)   # new data through the held run: as a fresh op
    fresh = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": w})))
    np.testing.assert_array_equal(t.run(op, [other])[0], t.run(fresh, [other])[0])
    x64 = x.astype(np.float64)                   # another dtype: the general path (a recipe of its own)
    assert t.run(op, [x64])[0].dtype == np.float64


def test_no_recipe_with_a_bias_or_post_ops():
    w = _basis(64, ("re",))
    params = {"num_output_maps": 33, "kernel_shape": [64], "strides": [16], "groups": 1,
              "post_ops": [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]}
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": w})))
    x = RNG.uniform(-1, 1, (1, 1, 640)).astype(np.float32)
    a = t.run(op, [x])[0]
    assert "_dft_run" not in op.__dict__ and (a >= 0).all()
    np.testing.assert_array_equal(t.run(op, [x])[0], a)
