"""The small kernels' per-op held paths (what they keep after the first call at an input shape, so later calls skip
their checks): the same results as the first call's general path on every call, a new shape taking the general
path again, and the same errors. Shuffle's reshapes, Gather's one index, Padding's constant / reflect borders,
If's one-element condition, conv1d-direct's checked-once call."""
import numpy as np
import pytest

from native.cpu import jit
from native.cpu.kernels import tensor
from native.cpu.kernels.control import _scalar_bool
from native.cpu.kernels.conv.epilogue import region_epilogue
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(5)


def _run(op, inputs):
    return tactics_for(op.kind)[0].run(op, inputs)


@pytest.mark.parametrize("params,shapes", [
    ({"reshape_dims": [1, -1]}, [(1, 16, 96), (1, 16, 96), (2, 3, 4), (1, 16, 96)]),        # Flatten
    ({"reshape_dims": [0, 1, -1]}, [(1, 576), (1, 576), (3, 5)]),                           # Unsqueeze, placeholder
    ({"reshape_dims": [-1]}, [(0, 4), (0, 4), (2, 2)]),                                      # an empty input
    ({"first_transpose": [0, 2, 1]}, [(4, 128, 1), (4, 128, 1), (2, 3, 5)]),                # Transpose
    ({"first_transpose": [1, 0, 2], "reshape_dims": [0, -1]}, [(3, 4, 5), (3, 4, 5), (2, 6, 1)]),
    ({"reshape_dims": [0, 2, -1], "second_transpose": [2, 0, 1]}, [(3, 8), (3, 8), (5, 4)]),
    ({"first_transpose": [0, 2, 1, 3], "reshape_dims": [0, 0, -1], "second_transpose": [1, 0, 2]},
     [(1, 257, 97, 2), (1, 257, 97, 2), (2, 3, 4, 5)]),
    ({}, [(2, 3), (2, 3)])])                                                                # nothing: x itself
def test_shuffle_held_steps_give_the_general_paths_views_at_every_shape(params, shapes):
    params = dict(params, zero_is_placeholder=True)
    op = Op("Shuffle", "s", params)
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        want = _run(Op("Shuffle", "s", params), [x])[0]
        got = _run(op, [x])[0]
        assert got.shape == want.shape and got.strides == want.strides
        assert np.shares_memory(got, x) == np.shares_memory(want, x)
        np.testing.assert_array_equal(got, want)
    assert op.__dict__["_shuffle"][0] == shapes[-1]
    # dims from an input are not held: the general path every call
    t = Op("Shuffle", "s", {"zero_is_placeholder": True})
    x = np.arange(6).reshape(2, 3)
    assert _run(t, [x, np.array([3, 2])])[0].shape == (3, 2) and "_shuffle" not in t.__dict__


def test_gather_one_index_held_then_checked():
    op = Op("Gather", "g", {"axis": 1})
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for i in (2, -1, 0, 1):
        got = _run(op, [x, np.array(i, np.int64)])[0]
        np.testing.assert_array_equal(got, x[:, i])
        assert np.shares_memory(got, x)
    assert "_gather" in op.__dict__
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 3"):
        _run(op, [x, np.array(3, np.int64)])
    y = RNG.standard_normal((5, 2)).astype(np.float32)    # another shape: the general path, then held again
    np.testing.assert_array_equal(_run(op, [y, np.array(-2, np.int64)])[0], y[:, 0])
    assert op.__dict__["_gather"][0] == (5, 2)
    np.testing.assert_array_equal(_run(op, [x, np.array([0, 2])])[0], x[:, [0, 2]])   # not one index


@pytest.mark.parametrize("mode,pads,shape", [
    ("constant", [0, 32, 0, 32], (1, 512)),
    ("reflect", [0, 64, 0, 0], (1, 512)),          # silero-vad's STFT pad
    ("reflect", [1, 2, 3, 2, 1, 3], (4, 5, 6)),
    ("constant", [2, 0, 1, 0, 3, 2], (3, 4, 5)),
    ("edge", [1, 1, 1, 1], (3, 3))])               # not held: np.pad each call
def test_padding_held_borders_match_np_pad(mode, pads, shape):
    params = {"pads": pads, "mode": mode, "value": 1.5}
    op = Op("Padding", "p", params)
    n = len(shape)
    width = [(pads[i], pads[i + n]) for i in range(n)]
    for _ in range(3):
        x = RNG.standard_normal(shape).astype(np.float32)
        want = np.pad(x, width, mode=mode, **({"constant_values": 1.5} if mode == "constant" else {}))
        got = _run(op, [x])[0]
        np.testing.assert_array_equal(got, want)
    assert (op.__dict__["_pad"][6] is None) == (mode == "edge")
    x = RNG.standard_normal(shape[:-1] + (shape[-1] + 3,)).astype(np.float32)   # another shape
    want = np.pad(x, width, mode=mode, **({"constant_values": 1.5} if mode == "constant" else {}))
    np.testing.assert_array_equal(_run(op, [x])[0], want)


def test_border_fills_decline_crops_and_wide_reflects():
    x = np.zeros((2, 3), np.float32)
    assert tensor._border_fills(x, (slice(0, 2), slice(1, 3)), [(0, 0), (0, 0)], "constant", 0.0) is None
    assert tensor._border_fills(x, None, [(0, 0), (3, 0)], "reflect", None) is None     # 3 >= the axis
    assert tensor._border_fills(x, None, [(0, 0), (0, 0)], "constant", 0.0) is None     # nothing to pad


@pytest.mark.parametrize("cond,want", [
    (np.array([[True]]), True), (np.array(False), False), (np.array([0.0], np.float32), False),
    (np.array([np.nan]), True), (np.array([1, 0]), True), (np.array([0, 1]), False), (True, True)])
def test_if_condition(cond, want):
    assert _scalar_bool(cond) is want


@pytest.mark.skipif(not jit.available(), reason="conv1d-direct needs the numba extra")
@pytest.mark.parametrize("c,m,length,k,s,pre,post,act", [
    (129, 128, 3, 3, 1, 1, 1, "RELU"), (128, 1, 1, 1, 1, 0, 0, "SIGMOID"), (16, 8, 40, 5, 2, 2, 2, None),
    (4, 6, 20, 3, 1, 1, 1, "TANH"), (128, 1, 4, 1, 1, 0, 0, "SIGMOID"),   # one numpy activation: held too
    (4, 6, 20, 3, 1, 1, 1, "TANH+SIGMOID")])   # two steps: the general epilogue (nothing held)
def test_conv1d_direct_held_call_gives_the_recipe_bits(c, m, length, k, s, pre, post, act):
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == "conv1d-direct")
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [s], "pre_padding": [pre],
              "post_padding": [post], "groups": 1}
    if act:
        params["post_ops"] = [{"op": "activation", "type": a, "alpha": 0.0, "beta": 0.0} for a in act.split("+")]
    w = {"kernel": RNG.standard_normal((m, c, k)).astype(np.float32),
         "bias": RNG.standard_normal(m).astype(np.float32)}
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, w)))
    x = RNG.standard_normal((1, c, length)).astype(np.float32)
    first = t.run(op, [x])[0]                       # the recipe's path (and the held call made)
    assert ("_conv1d_direct_fast" in op.__dict__) == (act != "TANH+SIGMOID")
    if act in ("TANH", "SIGMOID") and first.size > 1:   # the held call's activation is the general epilogue's
        ref = Op("Convolution", "c", {**params, "post_ops": []}, op.weights)
        z = t.run(ref, [x])[0]
        region_epilogue(z[:, :, None, :], (slice(None), slice(None)), op, [x], None)
        np.testing.assert_array_equal(first, z)
    for _ in range(2):
        np.testing.assert_array_equal(t.run(op, [x.copy()])[0], first)
        planned = np.full(first.shape, np.nan, np.float32)
        assert t.run(op, [x], [planned])[0] is planned
        np.testing.assert_array_equal(planned, first)
    strided = np.repeat(x, 2, axis=2)[:, :, ::2]    # not C-contiguous: the recipe's path, the same bits
    np.testing.assert_array_equal(t.run(op, [strided])[0], first)
    x64 = x.astype(np.float64)                      # another dtype: not the held call
    np.testing.assert_allclose(t.run(op, [x64])[0], first, rtol=1e-4, atol=1e-4)
