"""conv1d-direct (small 1-D convolutions as a compiled loop, the numba extra): the values of a float64 reference
for strides, dilations, pads, bias and fused activations, packed or not; what it refuses, it says why."""
import numpy as np
import pytest

from native.cpu.kernels.activations import activation
from native.tactics import Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(5)


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "conv1d-direct")


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


@pytest.mark.parametrize("n,c,m,length,k,s,d,pre,post,act,bias", [
    (1, 129, 128, 3, 3, 1, 1, 1, 1, "RELU", True), (2, 1, 258, 576, 256, 128, 1, 0, 0, None, False),
    (1, 128, 1, 1, 1, 1, 1, 0, 0, "SIGMOID", True), (2, 7, 5, 20, 4, 3, 2, 2, 1, "HARD_SWISH", True),
    (1, 3, 4, 9, 3, 2, 1, 0, 2, None, True), (2, 3, 6, 100, 5, 2, 1, 2, 2, "RELU", True)])   # 50 outputs: blocks
def test_conv1d_direct_matches_the_reference(n, c, m, length, k, s, d, pre, post, act, bias):
    pytest.importorskip("numba")
    x = RNG.standard_normal((n, c, length)).astype(np.float32)
    w = (RNG.standard_normal((m, c, k)) / np.sqrt(c * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [s], "dilations": [d], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    if act:
        params["post_ops"] = [{"op": "activation", "type": act, "alpha": 0.0, "beta": 0.0}]
    weights = {"kernel": w} if b is None else {"kernel": w, "bias": b}
    want = _reference(x, w, b, s, d, pre, post)
    if act:
        want = activation(want, act)
    t = _tactic()
    op = Op("Convolution", "c", params, weights)
    assert t.supports(op, [list(x.shape)]) is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), [x])[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    planned = np.full(want.shape, np.nan, np.float32)          # it writes the planned buffer when given one
    got = t.run(Op("Convolution", "c", params, t.prepare(op)), [x], [planned])[0]
    assert got is planned and np.allclose(planned, want, rtol=1e-5, atol=1e-5)


def test_the_recipe_follows_the_weights_and_the_input_shape():
    """run() keeps its per-shape recipe on the op: new packed weights or another input length are not served stale."""
    pytest.importorskip("numba")
    t = _tactic()
    params = {"num_output_maps": 4, "kernel_shape": [3], "strides": [1], "pre_padding": [1], "post_padding": [1],
              "groups": 1}
    op = Op("Convolution", "c", params, {"kernel": RNG.standard_normal((4, 2, 3)).astype(np.float32)})
    op.weights = t.prepare(op)
    for length in (5, 9, 5):
        x = RNG.standard_normal((1, 2, length)).astype(np.float32)
        w = RNG.standard_normal((4, 2, 3)).astype(np.float32)
        t.run(op, [x])
        op.weights = t.prepare(Op("Convolution", "c", params, {"kernel": w}))
        np.testing.assert_allclose(t.run(op, [x])[0], _reference(x, w, None, 1, 1, 1, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params,shape,why", [
    ({"kernel_shape": [3, 3]}, [1, 4, 8, 8], "1-D"), ({"kernel_shape": [3], "groups": 2}, [1, 4, 8], "ungrouped"),
    ({"kernel_shape": [3], "num_output_maps": 512}, [1, 512, 4096], "large"),
    ({"kernel_shape": [3], "post_ops": [{"op": "add", "input": 3}]}, [1, 4, 8], "residual")])
def test_conv1d_direct_refuses_with_a_reason(params, shape, why):
    pytest.importorskip("numba")
    assert why in _tactic().supports(Op("Convolution", "c", params, {}), [shape])


def test_without_numba_it_is_not_offered(monkeypatch):
    from native import config
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert "numba" in _tactic().supports(Op("Convolution", "c", {"kernel_shape": [3]}, {}), [[1, 4, 8]])
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()


def test_a_lone_relu_in_the_loop_gives_the_numpy_epilogues_floats():
    """The compiled loop applies a lone RELU itself: the bits of the conv without it followed by activations.relu
    (numpy's clip: NaN kept, -0.0 to +0.0), over NaN, infinities and zeros."""
    pytest.importorskip("numba")
    from native.cpu.kernels.activations import relu
    t = _tactic()
    x = RNG.standard_normal((2, 5, 40)).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1] = 0.0
    w = RNG.standard_normal((6, 5, 3)).astype(np.float32)
    b = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5], np.float32)
    params = {"num_output_maps": 6, "kernel_shape": [3], "strides": [1], "pre_padding": [1], "post_padding": [1],
              "groups": 1}
    plain = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    want = relu(t.run(Op("Convolution", "c", params, t.prepare(plain)), [x])[0])
    fused = dict(params, post_ops=[{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}])
    got = t.run(Op("Convolution", "c", fused, t.prepare(Op("Convolution", "c", fused, {"kernel": w, "bias": b}))),
                [x])[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("n,c,m,length,k,s,d,pre,post,act,rank", [
    (1, 1, 1, 4000, 28, 2, 1, 13, 15, None, 4),          # a polyphase resampler as a height-1 2-D Conv
    (2, 3, 2, 500, 7, 3, 2, 5, 4, "RELU", 3), (1, 2, 4, 300, 5, 1, 1, 0, 0, "SIGMOID", 3),
    (1, 1, 1, 64, 3, 1, 1, 70, 70, None, 3)])           # pads wider than the input: taps out of range skipped
def test_few_channels_run_vectorised_over_positions_with_the_same_floats(monkeypatch, n, c, m, length, k, s, d, pre,
                                                                        post, act, rank):
    """Few output channels over many positions take the loop vectorised over positions: the reference's values,
    and bit for bit the channel-vectorised loop's floats (NaN, infinities and -0.0 in the input included)."""
    pytest.importorskip("numba")
    from native.cpu.kernels.conv import conv1d_direct
    x = RNG.standard_normal((n, c, length)).astype(np.float32)
    w = (RNG.standard_normal((m, c, k)) / np.sqrt(c * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
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
    t = _tactic()
    assert t.supports(Op("Convolution", "c", params, {}), [list(x.shape)]) is None
    runs = {}
    for channels in (conv1d_direct.POS_MAX_CHANNELS, 0):     # positions-vectorised, then channel-vectorised
        monkeypatch.setattr(conv1d_direct, "POS_MAX_CHANNELS", channels)
        op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
        op.weights = t.prepare(op)
        runs[channels] = t.run(op, [x])[0]
        assert op.__dict__["_conv1d_direct"][9] == ("conv1d_direct_pos" if channels else "conv1d_direct") \
            or want.shape[-1] < conv1d_direct.POS_MIN_POSITIONS
    got = runs[conv1d_direct.POS_MAX_CHANNELS]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    x_special = x.copy()
    x_special.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    outs = []
    for channels in (conv1d_direct.POS_MAX_CHANNELS, 0):
        monkeypatch.setattr(conv1d_direct, "POS_MAX_CHANNELS", channels)
        op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
        op.weights = t.prepare(op)
        outs.append(t.run(op, [x_special])[0])
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_one_element_sigmoid_gives_the_numpy_epilogues_bits(dtype):
    """A lone SIGMOID on a one-element output (silero-vad's 128 -> 1 projection) runs on a numpy scalar
    (`sigmoid_of_one`): the bits of activations' numpy sigmoid, over normal values, zeros, infinities, NaN, tiny
    and huge ones, through the tactic and alone."""
    from native.cpu.kernels.activations import activation
    from native.cpu.kernels.conv.conv1d_direct import sigmoid_of_one
    vals = np.concatenate([RNG.standard_normal(3000) * 12, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7,
                                                           -88.7, -104.0, -110.0, 3.4e38, -3.4e38, 1e-30]]).astype(dtype)
    want = activation(vals.copy(), "SIGMOID")
    got = np.empty_like(vals)
    for i, v in enumerate(vals):
        one = np.array([v])
        sigmoid_of_one(one)
        got[i] = one[0]
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    pytest.importorskip("numba")
    t = _tactic()
    w = (RNG.standard_normal((1, 128, 1)) / 11).astype(np.float32)
    params = {"num_output_maps": 1, "kernel_shape": [1], "strides": [1], "groups": 1,
              "post_ops": [{"op": "activation", "type": "SIGMOID", "alpha": 0.0, "beta": 0.0}]}
    plain = {k: v for k, v in params.items() if k != "post_ops"}
    for scale in (0.1, 1.0, 30.0):
        x = (RNG.standard_normal((1, 128, 1)) * scale).astype(np.float32)
        op = Op("Convolution", "c", params, {"kernel": w, "bias": np.array([0.3], np.float32)})
        op.weights = t.prepare(op)
        got = t.run(op, [x])[0]
        assert op.__dict__["_conv1d_direct"][-1] is True
        base = t.run(Op("Convolution", "c", plain, op.weights), [x])[0]
        np.testing.assert_array_equal(got.view(np.uint32), activation(base, "SIGMOID").view(np.uint32))


@pytest.mark.parametrize("n,c,m,length,k,s,d,pre,post,relu,kernel", [
    (1, 129, 128, 3, 3, 1, 1, 1, 1, True, "conv1d_rows4_padded"), (1, 128, 64, 3, 3, 2, 1, 1, 1, True, "conv1d_rows4"),
    (1, 1, 258, 576, 256, 128, 1, 0, 0, False, "conv1d_rows4_padded"),
    (4, 129, 128, 4, 3, 1, 1, 1, 1, True, "conv1d_rows4_padded"), (2, 7, 17, 5, 3, 1, 2, 2, 1, False, "conv1d_rows4_padded"),
    (1, 5, 16, 1, 3, 1, 1, 1, 1, True, "conv1d_rows4"), (1, 80, 64, 64, 3, 1, 1, 1, 1, True, "conv1d_rows4_padded"),
    (2, 6, 9, 20, 5, 2, 1, 3, 2, False, "conv1d_rows4_padded")])
def test_four_rows_a_pass_give_the_same_floats(n, c, m, length, k, s, d, pre, post, relu, kernel):
    """Four weight rows a pass (jit_conv1d.py: few positions one by one, or every position at once for finite
    weights, the padding read as zeros): the reference's values, and bit for bit the channel-vectorised loop's
    floats (NaN, infinities and -0.0 in the input, a bias or none); a non-finite weight keeps the padding's rows
    skipped (not the padded loop)."""
    pytest.importorskip("numba")
    from native.cpu import jit
    w = (RNG.standard_normal((m, c, k)) / np.sqrt(c * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [s], "dilations": [d], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    if relu:
        params["post_ops"] = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    x = RNG.standard_normal((n, c, length)).astype(np.float32)
    for case in ("plain", "special inputs", "an infinite weight"):
        if case == "special inputs":
            x.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
            x[-1, -1, -1] = -np.inf
        if case == "an infinite weight":
            w = w.copy()
            w[0, 0, 0] = np.inf
        weights = {"kernel": w} if m % 2 else {"kernel": w, "bias": b}
        op = Op("Convolution", "c", params, weights)
        op.weights = _tactic().prepare(op)
        with np.errstate(invalid="ignore"):
            got = _tactic().run(op, [x])[0]
        held = op.__dict__["_conv1d_direct"]
        want_kernel = kernel if case != "an infinite weight" or kernel == "conv1d_rows4" else (
            "conv1d_rows4" if got.shape[-1] <= 4 else "conv1d_direct")
        assert held[9] == want_kernel
        ref = np.empty_like(got)
        jit.kernel("conv1d_direct")(x, held[4], held[5], ref, *held[6], held[8])
        assert got.tobytes() == ref.tobytes()
        if case == "plain":
            want = _reference(x, w, weights.get("bias", np.zeros(m, np.float32)), s, d, pre, post)
            np.testing.assert_allclose(got, activation(want, "RELU") if relu else want, rtol=1e-5, atol=1e-5)
