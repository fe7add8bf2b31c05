"""The optional numba kernels (native/cpu/jit.py) compute the floats of the numpy code they stand in for, bit for
bit; without numba (or with DEBUGKIT_JIT=0) the numpy path runs. The JIT half needs the `jit` extra (numba)."""
import numpy as np
import pytest

from native import config
from native.cpu import jit
from native.cpu.kernels.conv import depthwise_cl as dcl

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(3)

CASES = [  # (C, H, W, k, stride, dilation, pad)
    (88, 3, 96, 5, (1, 1), (1, 1), 2), (16, 23, 21, 3, (2, 2), (1, 1), 1), (40, 9, 9, 3, (1, 2), (2, 1), 2),
    (24, 7, 7, 5, (2, 1), (1, 1), 2), (5, 6, 4, 1, (1, 1), (1, 1), 0)]


def _run(x, taps, bias, k, stride, dil, pad, dtype):
    n, c, h, w = x.shape
    out = [(h + 2 * pad - dil[0] * (k - 1) - 1) // stride[0] + 1, (w + 2 * pad - dil[1] * (k - 1) - 1) // stride[1] + 1]
    return dcl.depthwise_cl(x.astype(dtype), taps.astype(dtype), None if bias is None else bias.astype(dtype),
                            [k, k], list(stride), list(dil), [pad, pad], [pad, pad], out)


def _reference(x, taps, bias, k, stride, dil, pad):
    """float64 depthwise convolution."""
    n, c, h, w = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - dil[0] * (k - 1) - 1) // stride[0] + 1
    wo = (w + 2 * pad - dil[1] * (k - 1) - 1) // stride[1] + 1
    y = np.zeros((n, c, ho, wo))
    for t, (i, j) in enumerate((i, j) for i in range(k) for j in range(k)):
        y += xp[:, :, i * dil[0]:i * dil[0] + stride[0] * (ho - 1) + 1:stride[0],
                j * dil[1]:j * dil[1] + stride[1] * (wo - 1) + 1:stride[1]] * taps[t][None, :, None, None]
    return y + (0 if bias is None else bias[None, :, None, None])


@pytest.fixture
def no_jit(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    yield
    monkeypatch.delenv("DEBUGKIT_JIT")
    config.reload()


@pytest.mark.parametrize("case", CASES)
def test_numpy_depthwise_cl_matches_float64(no_jit, case):
    c, h, w, k, stride, dil, pad = case
    assert jit.kernel("depthwise_cl_rows") is None
    x = RNG.standard_normal((2, c, h, w)).astype(np.float32)
    taps = RNG.standard_normal((k * k, c)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    y = _run(x, taps, bias, k, stride, dil, pad, np.float32)
    np.testing.assert_allclose(y, _reference(x, taps, bias, k, stride, dil, pad), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_jit_depthwise_cl_is_bit_identical_to_numpy(monkeypatch, case, dtype):
    pytest.importorskip("numba")
    c, h, w, k, stride, dil, pad = case
    x = RNG.standard_normal((2, c, h, w)).astype(np.float32)
    taps = RNG.standard_normal((k * k, c)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    config.reload()
    assert jit.kernel("depthwise_cl_rows") is not None
    got = _run(x, taps, bias, k, stride, dil, pad, dtype)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        want = _run(x, taps, bias, k, stride, dil, pad, dtype)
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, _reference(x, taps, bias, k, stride, dil, pad), rtol=1e-5, atol=1e-5)


def _tactic_outputs(name, x, params, w, b):
    from native.tactics import Op, tactics_for
    t = next(t for t in tactics_for("Convolution") if t.name == name)
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    assert t.supports(op, [list(x.shape)]) is None
    op.weights = t.prepare(op)
    return t.run(op, [x])[0]


@pytest.mark.parametrize("tactic", ["depthwise", "depthwise-cl"])
@pytest.mark.parametrize("c,hw,k,stride,dil", [(16, 40, 3, 1, 1), (8, 33, 3, 2, 1), (24, 12, 5, 1, 2), (4, 9, 3, 1, 1)])
def test_depthwise_tactics_give_the_same_bits_with_and_without_the_jit(monkeypatch, tactic, c, hw, k, stride, dil):
    """Both depthwise tactics, with a fused bias + ReLU epilogue: the compiled loops (numba present) and the
    numpy path (DEBUGKIT_JIT=0) agree bit for bit, and both match a float64 reference."""
    pad = dil * (k // 2)
    x = RNG.standard_normal((2, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [dil] * 2, "groups": c,
              "post_ops": [{"op": "activation", "type": "RELU"}]}
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        want = _tactic_outputs(tactic, x, params, w, b)
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    ref = np.maximum(_reference(x, w.reshape(c, -1).T, b, k, (stride, stride), (dil, dil), pad), 0)
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-5)
    if jit.available():
        np.testing.assert_array_equal(_tactic_outputs(tactic, x, params, w, b), want)


@pytest.mark.parametrize("act", [None, "RELU", "HARD_SWISH", "HARD_SWISH_RELU6", "HARD_SIGMOID"])
@pytest.mark.parametrize("case", CASES)
def test_depthwise_cl_epilogue_in_the_kernel_is_bit_identical(monkeypatch, case, act):
    """depthwise-cl's compiled kernel adding the bias and applying RELU / HARD_SWISH itself, storing NCHW, gives
    the bits of the channels-last accumulator + copy back + numpy epilogue path (other activations take that path)."""
    pytest.importorskip("numba")
    from native.tactics import Op, tactics_for
    c, h, w, k, stride, dil, pad = case
    x = RNG.standard_normal((2, c, h, w)).astype(np.float32)
    x[0, 0, 0, :2] = [np.nan, -0.0]
    kernel = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": list(stride), "dilations": list(dil),
              "pre_padding": [pad, pad], "post_padding": [pad, pad], "groups": c}
    if act:
        params["post_ops"] = [{"op": "activation", "type": act, "alpha": 0.2, "beta": 0.5}]
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == "depthwise-cl")
    op = Op("Convolution", "dw", params, {"kernel": kernel, "bias": bias})
    config.reload()
    got = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
    real = jit.kernel
    monkeypatch.setattr(jit, "kernel", lambda name: None if name.startswith("depthwise_cl_rows_nchw") else real(name))
    want = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


UNROLLED_CASES = [  # (C, H, W, (kh, kw), stride, dilation, (pad_h, pad_w))
    (72, 12, 11, (3, 3), (2, 2), (1, 1), (1, 1)), (13, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1)),
    (240, 7, 7, (5, 5), (1, 1), (1, 1), (2, 2)), (21, 11, 9, (5, 5), (2, 1), (1, 2), (2, 4)),
    (8, 6, 20, (1, 5), (1, 2), (1, 1), (0, 2)), (33, 10, 6, (5, 3), (1, 1), (2, 1), (4, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("case", UNROLLED_CASES)
def test_unrolled_depthwise_kernels_give_the_general_kernels_bits(case, act, dtype):
    """jit_dw's kernels (a kernel row's 3 or 5 taps unrolled) give depthwise_cl_rows_nchw's bits: every output
    row range, bias or none, each activation code, NaN / inf / -0.0 in the input and a zero weight's signed zeros."""
    pytest.importorskip("numba")
    config.reload()
    c, h, w, (kh, kw), (sh, sw), (dh, dw), (ph, pw) = case
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xl = np.zeros((h + 2 * ph, w + 2 * pw, c), dtype)
    xl[ph:ph + h, pw:pw + w] = RNG.standard_normal((h, w, c)) * 4
    xl[ph, pw, :4] = [np.nan, np.inf, -np.inf, -0.0]
    taps = RNG.standard_normal((kh, kw, c)).astype(dtype)
    taps[0, 0, 1] = -0.0
    fast = jit.kernel(f"depthwise_cl_rows_nchw_k{kw}")
    general = jit.kernel("depthwise_cl_rows_nchw")
    for bias in (RNG.standard_normal(c).astype(dtype), np.empty(0, dtype)):
        want = np.full((c, ho, wo), 7, dtype)
        got = np.full((c, ho, wo), 7, dtype)
        general(xl, taps, bias, want, 0, ho, sh, sw, dh, dw, act)
        fast(xl, taps, bias, got, 0, ho - 1, sh, sw, dh, dw, act)   # row ranges: the last row in a call of its own
        fast(xl, taps, bias, got, ho - 1, ho, sh, sw, dh, dw, act)
        assert got.tobytes() == want.tobytes()
        if act == 0 and bias.size:   # and the sums are a depthwise convolution's
            x = xl[ph:ph + h, pw:pw + w].transpose(2, 0, 1)[None].astype(np.float64)
            ref = _reference(np.nan_to_num(x, nan=0, posinf=0, neginf=0), taps.reshape(kh * kw, c), bias,
                             kh, (sh, sw), (dh, dw), ph) if kh == kw and ph == pw else None
            if ref is not None:
                fin = np.isfinite(want)
                clean = np.full((c, ho, wo), 7, dtype)
                xl2 = np.nan_to_num(xl, nan=0, posinf=0, neginf=0)
                fast(xl2, taps, bias, clean, 0, ho, sh, sw, dh, dw, act)
                np.testing.assert_allclose(clean, ref[0], rtol=1e-4, atol=1e-4)
                assert fin.sum() < fin.size   # the NaN / inf reached some outputs


PLANE_CASES = [  # (C, H, W, k, stride, dilation, pad): PaddleOCR's wide rows, mobilenets' 7-28-wide maps, odd ones
    (12, 2, 96, 5, (1, 1), (1, 1), 2), (6, 9, 100, 3, (2, 2), (1, 1), 1), (5, 6, 97, 3, (1, 2), (2, 1), 2),
    (3, 4, 150, 3, (2, 3), (1, 2), 2), (20, 14, 14, 5, (1, 1), (1, 1), 2), (17, 15, 13, 5, (2, 2), (1, 1), 2),
    (9, 7, 7, 5, (1, 1), (1, 1), 2), (8, 12, 11, 3, (2, 1), (1, 1), 1), (4, 10, 9, 4, (3, 2), (1, 1), 1),
    (3, 9, 10, 2, (1, 3), (2, 3), 0), (10, 14, 14, 5, (2, 2), (1, 1), 2), (6, 8, 12, 3, (1, 2), (1, 2), 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", [None, "RELU", "HARD_SWISH", "HARD_SWISH_RELU6", "HARD_SIGMOID"])
@pytest.mark.parametrize("case", PLANE_CASES)
def test_depthwise_pads_planes_in_the_kernel_with_the_same_bits(monkeypatch, case, act, dtype):
    """The depthwise tactic pads each channel's plane into its stride phases inside the compiled loop (each tap one
    run over all output rows) and applies the bias and RELU / HARD_SWISH (_RELU6) there (jit.depthwise_planes; for
    3 / 5 taps in the last kernel row's loop): the bits of the padded-input compiled loop + numpy epilogue (other
    activations run after it, in place), NaN and -0.0 included, for kernels of 3 / 5 taps (unrolled) and others,
    strides and dilations per axis, and a float64 reference's values."""
    pytest.importorskip("numba")
    from native.tactics import Op, tactics_for
    c, h, w, k, stride, dil, pad = case
    x = RNG.standard_normal((2, c, h, w)).astype(dtype)
    x[0, 0, 0, :2] = [np.nan, -0.0]
    kernel = RNG.standard_normal((c, 1, k, k)).astype(dtype)
    bias = RNG.standard_normal(c).astype(dtype)
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": list(stride), "dilations": list(dil),
              "pre_padding": [pad, pad], "post_padding": [pad, pad], "groups": c}
    if act:
        params["post_ops"] = [{"op": "activation", "type": act, "alpha": 0.2, "beta": 0.5}]
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == "depthwise")
    op = Op("Convolution", "dw", params, {"kernel": kernel, "bias": bias})
    config.reload()
    calls = []
    real = jit.kernel
    monkeypatch.setattr(jit, "kernel", lambda name: calls.append(name) or real(name))
    got = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
    assert "depthwise_planes" in calls
    monkeypatch.setattr(jit, "kernel", lambda name: None if name == "depthwise_planes" else real(name))
    want = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
    assert got.dtype == want.dtype == dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    monkeypatch.setattr(jit, "kernel", lambda name: None)   # and the numpy path's (no numba)
    assert t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0].tobytes() == want.tobytes()
    if act is None:
        ref = _reference(x, kernel.reshape(c, -1).T, bias, k, stride, dil, pad)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", [None, "HARD_SWISH_RELU6"])
@pytest.mark.parametrize("h,stride", [(2, 1), (3, 1), (6, 2)])
def test_depthwise_planes_padding_rows_keep_the_bits(monkeypatch, h, stride, act, dtype):
    """depthwise_planes sums the taps that read only the zero padding too (a 5x5 kernel over PaddleOCR's 2-3-row
    maps: 60% of the taps): the padded-input loop's bits, the sign of an all-zero sum included, and NaN where a
    non-finite weight meets the padding."""
    pytest.importorskip("numba")
    from native.tactics import Op, tactics_for
    c, w, k = 8, 64, 5
    x = RNG.standard_normal((1, c, h, w)).astype(dtype)
    x[0, :4] = 0.0                     # all-zero channels: the sums are +-0, their sign set by every product
    x[0, 1] = -0.0
    kernel = RNG.standard_normal((c, 1, k, k)).astype(dtype)
    kernel[0] = -np.abs(kernel[0])                       # every product -0: the sum stays -0
    kernel[1, 0, 2:4] = np.abs(kernel[1, 0, 2:4])        # -0 inputs: +w gives -0, the padding rows' -w give +0
    kernel[1, 0, [0, 1, 4]] = -np.abs(kernel[1, 0, [0, 1, 4]])
    kernel[2, 0, 2:4] = -np.abs(kernel[2, 0, 2:4])       # +0 inputs, negative inside, -0.0 / positive outside
    kernel[2, 0, [0, 1]] = -0.0
    kernel[2, 0, 4] = np.abs(kernel[2, 0, 4])
    kernel[3, 0, 0, 0] = np.inf                          # a padding row's product is NaN
    kernel[4, 0, 4, 1] = np.nan
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": [stride, 1], "pre_padding": [2, 2],
              "post_padding": [2, 2], "groups": c}
    if act:
        params["post_ops"] = [{"op": "activation", "type": act}]
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == "depthwise")
    op = Op("Convolution", "dw", params, {"kernel": kernel})
    config.reload()
    with np.errstate(all="ignore"):
        got = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
        real = jit.kernel
        monkeypatch.setattr(jit, "kernel", lambda name: None if name == "depthwise_planes" else real(name))
        want = t.run(Op("Convolution", "dw", params, t.prepare(op)), [x])[0]
    assert got.tobytes() == want.tobytes()
    assert np.signbit(want[0, 0]).all() and not np.signbit(want[0, 2]).any() and np.isnan(want[0, 3]).any()


EPILOGUES = {   # a convolution's post-ops that bias_steps_inplace runs with its bias in one pass
    "bias": [], "relu": [{"op": "activation", "type": "RELU"}],
    "relu6 then residual": [{"op": "activation", "type": "CLIP", "alpha": 0.0, "beta": 6.0}, {"op": "add", "input": 3}],
    "residual then relu": [{"op": "add", "input": 3}, {"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}],
    "hard-swish then residual": [{"op": "activation", "type": "HARD_SWISH"}, {"op": "add", "input": 3}],
    "residual then relu6-swish": [{"op": "add", "input": 3}, {"op": "activation", "type": "HARD_SWISH_RELU6"}],
    "clip, clip": [{"op": "activation", "type": "CLIP", "alpha": -1.0, "beta": np.inf},
                   {"op": "activation", "type": "CLIP", "alpha": -np.inf, "beta": 0.5}],
    "leaky then clip": [{"op": "activation", "type": "LEAKY_RELU", "alpha": 0.20000000298023224, "beta": 0.0},
                        {"op": "activation", "type": "CLIP", "alpha": -0.4000000059604645, "beta": np.inf}],
    "residual then leaky 1.5": [{"op": "add", "input": 3}, {"op": "activation", "type": "LEAKY_RELU", "alpha": 1.5}],
    "leaky -0.3": [{"op": "activation", "type": "LEAKY_RELU", "alpha": -0.3}]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tactic", ["1x1-gemm", "im2col-gemm", "sliding-window", "nhwc-gemm"])
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_jit_conv_epilogue_is_bit_identical_to_numpy(monkeypatch, name, tactic, dtype):
    """bias + RELU / CLIP / HARD_SWISH / LEAKY_RELU / residual add as one compiled pass (conv epilogue
    `_bias_and_steps`, from region_epilogue and from `finish`) gives the numpy passes' floats, NaN, infinities and
    -0.0 included."""
    pytest.importorskip("numba")
    from native.tactics import Op, tactics_for
    c, m, k = 5, 7, (1 if tactic == "1x1-gemm" else 3)
    x = RNG.standard_normal((2, c, 6, 9)).astype(dtype) * 4
    x.reshape(-1)[:4] = (np.nan, np.inf, -np.inf, -0.0)
    w = RNG.standard_normal((m, c, k, k)).astype(dtype)
    b = RNG.standard_normal(m).astype(dtype)
    b[0] = -0.0
    res = RNG.standard_normal((2, m, 6, 9)).astype(dtype) * 4
    res.reshape(-1)[:3] = (-0.0, np.nan, -np.inf)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [1, 1], "pre_padding": [k // 2] * 2,
              "post_padding": [k // 2] * 2, "groups": 1, "post_ops": EPILOGUES[name]}
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == tactic)

    def conv():
        op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
        op.weights = t.prepare(op)
        with np.errstate(all="ignore"):
            return t.run(op, [x, None, None, res])[0]
    assert jit.kernel("bias_steps_inplace") is not None
    got = conv()
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert jit.kernel("bias_steps_inplace") is None
        want = conv()
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("tactic,shape,k,stride", [("depthwise", (2, 24, 3, 96), 5, (1, 1)),
                                                   ("depthwise", (1, 8, 12, 64), 3, (2, 1)),
                                                   ("depthwise-cl", (2, 40, 14, 14), 5, (1, 1)),
                                                   ("depthwise-cl", (1, 72, 9, 9), 3, (2, 2))])
@pytest.mark.parametrize("post", [[], ["RELU"], ["HARD_SWISH"], ["add"]])
def test_depthwise_recipes_make_the_general_paths_calls(monkeypatch, tactic, shape, k, stride, post):
    """The depthwise tactics' per-shape recipes (operands worked out once) give the general path's bits, and a
    layer they do not cover (a residual add) takes the general path."""
    pytest.importorskip("numba")
    from native.cpu.kernels.conv import depthwise
    from native.tactics import Op, tactics_for
    config.reload()
    n, c, h, w = shape
    x = RNG.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :2] = [np.nan, -0.0]
    kernel = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = RNG.standard_normal(c).astype(np.float32)
    pad = k // 2
    ho, wo = (h + 2 * pad - k) // stride[0] + 1, (w + 2 * pad - k) // stride[1] + 1
    inputs, post_ops = [x], []
    for p in post:
        if p == "add":
            post_ops.append({"op": "add", "input": 1})
            inputs.append(RNG.standard_normal((n, c, ho, wo)).astype(np.float32))
        else:
            post_ops.append({"op": "activation", "type": p})
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": list(stride), "dilations": [1, 1],
              "pre_padding": [pad, pad], "post_padding": [pad, pad], "groups": c, "post_ops": post_ops}
    t = next(t for t in tactics_for("Convolution", "cpu") if t.name == tactic)
    op = Op("Convolution", "dw", params, {"kernel": kernel, "bias": bias})
    op = Op("Convolution", "dw", params, t.prepare(op))
    got = [t.run(op, inputs)[0] for _ in range(2)]   # the second call reuses the recipe
    key = "_dw_planes" if tactic == "depthwise" else "_dw_cl"
    made = op.__dict__.get(key)
    assert (made is not None and made[1] is not None) == ("add" not in post)
    monkeypatch.setattr(depthwise if tactic == "depthwise" else dcl, "recipe", lambda *a: None)
    want = t.run(Op("Convolution", "dw", params, dict(op.weights)), inputs)[0]
    for g in got:
        assert g.tobytes() == want.tobytes()
