"""NN kernels: every Convolution tactic agrees with a direct reference; deconvolution, pooling, resize, RNN and
quantize kernels agree with ONNX Runtime on cases the ONNX node tests do not cover."""
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from native.tactics import Op, tactics_for

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)


def reference_conv(x, w, b, stride, pad, dil, groups):
    """Direct float64 convolution (loops over output pixels: test-only)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, ho, wo))
    mg = m // groups
    for oy, ox in itertools.product(range(ho), range(wo)):
        patch = xp[:, :, oy * stride:oy * stride + dil * (kh - 1) + 1:dil, ox * stride:ox * stride + dil * (kw - 1) + 1:dil]
        for g in range(groups):
            pg = patch[:, g * cg:(g + 1) * cg].reshape(n, -1)
            y[:, g * mg:(g + 1) * mg, oy, ox] = pg @ w[g * mg:(g + 1) * mg].reshape(mg, -1).T
    return y + b.reshape(1, -1, 1, 1)


CONV_CASES = [  # (c, m, hw, k, stride, pad, dil, groups)
    (3, 8, 11, 3, 1, 1, 1, 1), (4, 6, 9, 3, 2, 1, 1, 2), (8, 8, 10, 3, 1, 2, 2, 8), (6, 5, 7, 1, 1, 0, 1, 1),
    (6, 4, 8, 1, 2, 0, 1, 1), (5, 7, 12, 5, 2, 2, 1, 1), (4, 4, 9, 3, 2, 1, 1, 4), (3, 4, 6, 2, 1, 0, 1, 1),
]


@pytest.mark.parametrize("c,m,hw,k,stride,pad,dil,groups", CONV_CASES)
def test_every_conv_tactic_matches_reference(c, m, hw, k, stride, pad, dil, groups):
    x = RNG.standard_normal((2, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((m, c // groups, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [dil] * 2, "groups": groups}
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    want = reference_conv(x, w, b, stride, pad, dil, groups)
    ran = []
    for t in tactics_for("Convolution"):
        if t.supports(op, [list(x.shape)]) is not None:
            continue
        for weights in (op.weights, t.prepare(op)):       # unpacked (first build run) and pre-packed
            got = t.run(Op("Convolution", "c", params, weights), [x])[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=t.name)
        ran.append(t.name)
    assert "im2col-gemm" in ran
    if k == 1 and pad == 0:
        assert "1x1-gemm" in ran
    if groups == c == m:
        assert "depthwise" in ran and "depthwise-cl" in ran


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,hw,k,stride,pre,post,dil", [(24, 9, 3, 1, 1, 1, 1), (16, 12, 5, 2, 2, 1, 1),
                                                        (8, 10, 3, 1, 2, 2, 2), (32, 7, 3, 2, 0, 1, 1)])
def test_depthwise_channels_last_writes_the_planned_buffer(monkeypatch, threads, c, hw, k, stride, pre, post, dil):
    """depthwise-cl (channels-last taps between two reformats): asymmetric pads, strides, dilation, the row
    split over the pool, bias + HardSwish; it writes into the planned NCHW buffer and sums the taps in the same
    order as the NCHW depthwise tactic, so both give the same floats."""
    from native.cpu.kernels.activations import activation
    from native.cpu.kernels.conv import tuning
    monkeypatch.setenv("DEBUGKIT_THREADS", str(threads))
    monkeypatch.setattr(tuning, "PARALLEL_MIN_DW_MACS", 1)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_DW_JIT_MACS", 1)
    x = RNG.standard_normal((2, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((c, 1, k, k)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    params = {"num_output_maps": c, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pre] * 2,
              "post_padding": [post] * 2, "dilations": [dil] * 2, "groups": c,
              "post_ops": [{"op": "activation", "type": "HARD_SWISH"}]}
    xp = np.pad(x, [(0, 0), (0, 0), (pre, post), (pre, post)])
    want = activation(reference_conv(xp, w, b, stride, 0, dil, c).astype(np.float32), "HARD_SWISH")
    t = next(t for t in tactics_for("Convolution") if t.name == "depthwise-cl")
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    assert t.supports(op, [list(x.shape)]) is None
    op.weights = t.prepare(op)
    dst = np.full(want.shape, np.nan, np.float32)
    got = t.run(op, [x], [dst])[0]
    assert np.shares_memory(got, dst)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    nchw = next(t for t in tactics_for("Convolution") if t.name == "depthwise")
    op2 = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    op2.weights = nchw.prepare(op2)
    np.testing.assert_array_equal(got, nchw.run(op2, [x])[0])



THREADED_CASES = [  # (n, c, m, hw, k, stride, pad, dil, groups): row bands, channel split (m > ho*wo), phases
    (1, 3, 16, 23, 7, 2, 3, 1, 1), (2, 5, 6, 17, 7, 3, 2, 1, 1), (1, 6, 40, 5, 3, 1, 1, 1, 1),
    (1, 4, 6, 19, 3, 2, 1, 1, 2), (3, 8, 8, 12, 3, 1, 2, 2, 1), (1, 8, 12, 9, 1, 2, 0, 1, 1), (1, 16, 70, 6, 1, 1, 0, 1, 1),
    (2, 6, 6, 15, 3, 2, 1, 1, 6), (1, 8, 8, 20, 5, 1, 2, 2, 8),  # depthwise
]


@pytest.mark.parametrize("n,c,m,hw,k,stride,pad,dil,groups", THREADED_CASES)
@pytest.mark.parametrize("threads,cols_bytes", [(1, 1 << 20), (3, 1 << 20), (2, 64)])
def test_threaded_conv_with_post_ops(monkeypatch, n, c, m, hw, k, stride, pad, dil, groups, threads, cols_bytes):
    """conv2d_gemm (bands of rows / output channels over the pool, cache-sized sub-bands, phase split for large
    strided kernels) with bias + residual add + ReLU applied per region equals reference + add + relu."""
    from native.cpu.kernels import conv
    monkeypatch.setenv("DEBUGKIT_THREADS", str(threads))
    monkeypatch.setattr(conv.tuning, "COLS_BYTES", cols_bytes)
    monkeypatch.setattr(conv.tuning, "DW_BYTES", cols_bytes)
    x = RNG.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((m, c // groups, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = reference_conv(x, w, b, stride, pad, dil, groups)
    r = RNG.standard_normal(want.shape).astype(np.float32)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [dil] * 2, "groups": groups,
              "post_ops": [{"op": "add", "input": 1}, {"op": "activation", "type": "RELU"}]}
    want = np.maximum(want + r, 0)
    for t in tactics_for("Convolution"):
        op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
        if t.name not in ("im2col-gemm", "1x1-gemm", "depthwise") or t.supports(op, [list(x.shape)]) is not None:
            continue
        op.weights = t.prepare(op)
        got = t.run(op, [x, r])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=t.name)
        assert got.flags.c_contiguous

def _ort(node, feeds, out_names, opset=21, inits=(), out_types=None):
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    types = out_types or {}
    outputs = [helper.make_tensor_value_info(o, types.get(o, TensorProto.FLOAT), None) for o in out_names]
    g = helper.make_graph([node], "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, sess.run(None, feeds)


def _ours(model, feeds):
    from backends.engine.onnx_backend import Backend
    return Backend.prepare(model).run(list(feeds.values()))


def _check(node, feeds, out_names, rtol=1e-4, atol=1e-5, opset=21, out_types=None):
    model, want = _ort(node, feeds, out_names, opset, out_types=out_types)
    got = _ours(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def test_conv_1d_and_3d_and_same_lower():
    x = RNG.standard_normal((1, 3, 10)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    _check(helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2]), {"x": x, "w": w}, ["y"])
    x = RNG.standard_normal((1, 2, 5, 6, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 2, 3, 2)).astype(np.float32)
    _check(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 0, 1, 1]), {"x": x, "w": w}, ["y"])


def test_convtranspose_strided_grouped_output_padding():
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 3], group=2, pads=[1, 0, 0, 1],
                            output_padding=[1, 2], dilations=[1, 2])
    _check(node, {"x": x, "w": w}, ["y"])



@pytest.mark.parametrize("kernel,strides,dil", [([2, 2], [2, 2], [1, 1]), ([3, 2], [3, 2], [1, 1]), ([2, 2], [4, 4], [2, 2])])
def test_convtranspose_tiling_kernel_equals_stride(kernel, strides, dil):
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3) + tuple(kernel)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=strides, dilations=dil)
    _check(node, {"x": x, "w": w, "b": b}, ["y"])

def test_pools_against_ort():
    x = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
    _check(helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                            ceil_mode=1), {"x": x}, ["y", "i"], out_types={"i": TensorProto.INT64})
    _check(helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1],
                            count_include_pad=1), {"x": x}, ["y"])



@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], ceil_mode=1),
                                   dict(kernel_shape=[1, 3], strides=[3, 1], pads=[0, 2, 0, 1]),
                                   dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])])
def test_separable_max_pool_against_ort(attrs):
    x = RNG.standard_normal((2, 5, 13, 11)).astype(np.float32)
    _check(helper.make_node("MaxPool", ["x"], ["y"], **attrs), {"x": x}, ["y"])

def test_resize_linear_antialias_and_nearest_upsample():
    x = RNG.standard_normal((1, 2, 12, 9)).astype(np.float32)
    scales = np.array([1, 1, 0.5, 0.7], np.float32)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)
    _check(node, {"x": x, "s": scales}, ["y"], opset=18)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", nearest_mode="floor",
                            coordinate_transformation_mode="asymmetric")
    _check(node, {"x": x, "s": np.array([1, 1, 2, 2], np.float32)}, ["y"], opset=18)


@pytest.mark.parametrize("lens", [[5, 2, 4], [5, 5, 5]])   # some sequences shorter, or all full (no masking)
@pytest.mark.parametrize("op,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_bidirectional_recurrent_with_sequence_lengths(op, gates, lens):
    t, b, i, h = 5, 3, 4, 6
    feeds = {"x": RNG.standard_normal((t, b, i)).astype(np.float32),
             "w": RNG.standard_normal((2, gates * h, i)).astype(np.float32) * 0.5,
             "r": RNG.standard_normal((2, gates * h, h)).astype(np.float32) * 0.5,
             "b": RNG.standard_normal((2, 2 * gates * h)).astype(np.float32) * 0.1,
             "l": np.array(lens, np.int32)}
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    node = helper.make_node(op, ["x", "w", "r", "b", "l"], outs, hidden_size=h, direction="bidirectional", **extra)
    _check(node, feeds, outs, opset=14)


def test_quantize_per_axis_roundtrip():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    s = np.array([0.01, 0.02, 0.05], np.float32)
    z = np.array([0, 10, -5], np.int8)
    _check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1), {"x": x, "s": s, "z": z}, ["y"],
           out_types={"y": TensorProto.INT8})
    q = RNG.integers(-128, 127, (2, 3, 4)).astype(np.int8)
    _check(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1), {"q": q, "s": s, "z": z}, ["y"])


@pytest.mark.parametrize("group", [1, 2])
def test_deconv_batchnorm_folds_into_kernel(group):
    """ConvTranspose + BatchNormalization folds (kernel [C, M/g, kh, kw] scaled per output channel); the fused
    engine equals the unfused one."""
    from tests.backends.fusion_helpers import build, const, kinds, model, run
    w = RNG.standard_normal((4, 6 // group, 2, 2)).astype(np.float32)
    bn = [RNG.uniform(0.5, 2, 6).astype(np.float32) for _ in range(4)]
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], name="up", strides=[2, 2], group=group),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], name="bn")]
    m = model(nodes, [("x", [1, 4, 5, 5])], ["y"], [const("w", w), const("s", bn[0]), const("bb", bn[1]),
                                                    const("mu", bn[2]), const("var", bn[3])])
    feeds = {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)}
    fused, plain = build(m), build(m, fusion=False)
    np.testing.assert_allclose(run(fused, feeds)[0], run(plain, feeds)[0], rtol=1e-5, atol=1e-5)
    assert kinds(fused) == ["Deconvolution"] and "Normalization" in kinds(plain)


def reference_conv1d(x, w, b, stride, pre, post, dil, groups):
    """Direct float64 1-D convolution (test-only)."""
    y = reference_conv(np.pad(x, [(0, 0), (0, 0), (pre, post)])[:, :, None, :], w[:, :, None, :], b, 1, 0, 1, groups)
    # reference_conv takes one stride/dilation for both dims: subsample and dilate here instead
    if stride == 1 and dil == 1:
        return y[:, :, 0]
    n, c, length = x.shape
    k = w.shape[2]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre, post)])
    lo = (length + pre + post - dil * (k - 1) - 1) // stride + 1
    m, mg, cg = w.shape[0], w.shape[0] // groups, w.shape[1]
    out = np.zeros((n, m, lo))
    for o in range(lo):
        patch = xp[:, :, o * stride:o * stride + dil * (k - 1) + 1:dil]
        for g in range(groups):
            out[:, g * mg:(g + 1) * mg, o] = patch[:, g * cg:(g + 1) * cg].reshape(n, -1) @ \
                w[g * mg:(g + 1) * mg].reshape(mg, -1).T
    return out + b.reshape(1, -1, 1)


@pytest.mark.parametrize("c,m,length,k,stride,pre,post,dil,groups", [
    (1, 16, 640, 64, 32, 0, 0, 1, 1), (4, 6, 50, 5, 2, 2, 1, 1, 2), (3, 5, 31, 3, 1, 1, 1, 2, 1), (2, 4, 9, 1, 1, 0, 0, 1, 1)])
def test_1d_conv_tactics_match_reference(c, m, length, k, stride, pre, post, dil, groups):
    """im2col-gemm (all taps gathered in one strided copy) and conv1d-gemm (the 2-D banded driver at height 1, writing
    into the planned buffer) on [N, C, L] convolutions with a fused ReLU."""
    x = RNG.standard_normal((2, c, length)).astype(np.float32)
    w = RNG.standard_normal((m, c // groups, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [stride], "pre_padding": [pre],
              "post_padding": [post], "dilations": [dil], "groups": groups,
              "post_ops": [{"op": "activation", "type": "RELU"}]}
    want = np.maximum(reference_conv1d(x, w, b, stride, pre, post, dil, groups), 0)
    for name in ("im2col-gemm", "conv1d-gemm"):
        t = next(t for t in tactics_for("Convolution") if t.name == name)
        op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
        assert t.supports(op, [list(x.shape)]) is None, name
        op.weights = t.prepare(op)
        dst = np.full(want.shape, np.nan, np.float32)
        got = t.run(op, [x], [dst])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=name)
        if name == "conv1d-gemm":
            assert np.shares_memory(got, dst)


@pytest.mark.parametrize("c,m,length,k,stride,pre,post,dil,groups,post_ops,bias", [
    (1, 16, 640, 64, 32, 0, 0, 1, 1, ["RELU"], True), (4, 6, 50, 5, 2, 2, 1, 1, 2, ["RELU"], True),
    (3, 5, 31, 3, 1, 1, 1, 2, 1, [], False), (129, 32, 4, 3, 1, 1, 1, 1, 1, ["SIGMOID"], True),
    (8, 8, 9, 3, 1, 1, 1, 1, 1, ["SILU"], True), (8, 4, 7, 3, 2, 1, 1, 1, 4, ["SILU"], True)])
def test_conv1d_small_path_is_conv2d_gemm_bit_for_bit(c, m, length, k, stride, pre, post, dil, groups, post_ops,
                                                       bias):
    """conv1d-gemm's small-convolution path (one gather, recipe made once per input shape) gives the floats the
    banded driver gives (same GEMM operands), on repeated calls, with and without the planned output buffer."""
    from native.cpu.kernels.conv import conv1d_gemm
    x = RNG.standard_normal((2, c, length)).astype(np.float32)
    w = RNG.standard_normal((m, c // groups, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    params = {"num_output_maps": m, "kernel_shape": [k], "strides": [stride], "pre_padding": [pre],
              "post_padding": [post], "dilations": [dil], "groups": groups,
              "post_ops": [{"op": "activation", "type": t} for t in post_ops]}
    t = next(t for t in tactics_for("Convolution") if t.name == "conv1d-gemm")
    weights = {"kernel": w, "bias": b} if bias else {"kernel": w}
    op = Op("Convolution", "c", params, dict(weights))
    op.weights = t.prepare(op)
    fast = [t.run(op, [x])[0].copy() for _ in range(2)]
    assert op.__dict__["_small1d"][1] is not None   # the recipe was made (and kept)
    dst = np.full(fast[0].shape, np.nan, np.float32)
    into = t.run(op, [x], [dst])[0]
    assert np.shares_memory(into, dst)
    general = Op("Convolution", "c", params, dict(weights))
    general.weights = t.prepare(general)
    make = conv1d_gemm._Small1d.make
    x2 = RNG.standard_normal((1, c, length + 3)).astype(np.float32)   # another shape: a recipe of its own
    conv1d_gemm._Small1d.make = classmethod(lambda cls, *a: None)
    try:
        want = t.run(general, [x])[0]
        want2 = t.run(general, [x2])[0]
    finally:
        conv1d_gemm._Small1d.make = make
    assert general.__dict__["_small1d"][1] is None
    for got in fast + [into]:
        np.testing.assert_array_equal(got, want)
    ref = reference_conv1d(x, w, b if bias else np.zeros(m, np.float32), stride, pre, post, dil, groups)
    if post_ops == ["RELU"]:
        np.testing.assert_allclose(want, np.maximum(ref, 0), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(t.run(op, [x2])[0], want2)
    assert op.__dict__["_small1d"][1].shape == x2.shape


@pytest.mark.parametrize("n,c,m,hw,groups,post,bias", [
    (1, 240, 64, 1, 1, [("activation", "RELU")], True), (1, 64, 240, 1, 1, [("activation", "HARD_SIGMOID")], True),
    (2, 40, 24, 14, 1, [("add", None)], True), (1, 16, 16, 7, 4, [("activation", "SILU")], True),
    (1, 24, 72, 5, 1, [], False), (1, 24, 48, 6, 1, [("activation", "SILU")], True)])
def test_pointwise_small_path_is_conv2d_gemm_bit_for_bit(n, c, m, hw, groups, post, bias):
    """1x1-gemm's small path (squeeze-excite GEMVs, small maps: a recipe per input shape, one GEMM per sample)
    gives the banded driver's floats, with the bias in the GEMM or not, SiLU's pre-halved weights, a residual add,
    into the planned buffer; and the reference's values."""
    from native.cpu.kernels.conv import pointwise_1x1
    x = RNG.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((m, c // groups, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    r = RNG.standard_normal((n, m, hw, hw)).astype(np.float32)
    steps = [{"op": "add", "input": 1} if k == "add" else {"op": k, "type": t} for k, t in post]
    params = {"num_output_maps": m, "kernel_shape": [1, 1], "strides": [1, 1], "pre_padding": [0, 0],
              "post_padding": [0, 0], "dilations": [1, 1], "groups": groups, "post_ops": steps}
    inputs = [x, r] if any(k == "add" for k, _ in post) else [x]
    t = next(t for t in tactics_for("Convolution") if t.name == "1x1-gemm")
    weights = {"kernel": w, "bias": b} if bias else {"kernel": w}
    op = Op("Convolution", "c", params, dict(weights))
    op.weights = t.prepare(op)
    fast = [t.run(op, inputs)[0].copy() for _ in range(2)]
    assert op.__dict__["_small1x1"][1] is not None
    dst = np.full(fast[0].shape, np.nan, np.float32)
    into = t.run(op, inputs, [dst])[0]
    assert np.shares_memory(into, dst)
    general = Op("Convolution", "c", params, dict(weights))
    general.weights = t.prepare(general)
    make = pointwise_1x1._SmallPointwise.make
    pointwise_1x1._SmallPointwise.make = classmethod(lambda cls, *a: None)
    try:
        want = t.run(general, inputs)[0]
    finally:
        pointwise_1x1._SmallPointwise.make = make
    for got in fast + [into]:
        np.testing.assert_array_equal(got, want)
    ref = reference_conv(x, w, b if bias else np.zeros(m, np.float32), 1, 0, 1, groups)
    if post == [("add", None)]:
        np.testing.assert_allclose(want, ref + r, rtol=1e-4, atol=1e-4)
    if not post:
        np.testing.assert_allclose(want, ref, rtol=1e-4, atol=1e-4)


def test_im2col_gather_is_the_per_tap_gather_bit_for_bit():
    """The N-d path's one strided copy builds exactly the column matrix the per-tap loop built: same GEMM operands,
    the same floats out (FP32 results of this tactic did not change)."""
    import itertools
    from native.cpu.kernels.conv.epilogue import finish
    from native.cpu.kernels.conv.geometry import geometry, pad_input, tap_slices
    from native.cpu.kernels.conv.weights import gemm_weights
    x = RNG.standard_normal((2, 3, 6, 7, 5)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 2, 2)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    params = {"num_output_maps": 4, "kernel_shape": [3, 2, 2], "strides": [1, 2, 1], "pre_padding": [1, 0, 1],
              "post_padding": [1, 1, 0], "dilations": [1, 1, 2], "groups": 1}
    t = next(t for t in tactics_for("Convolution") if t.name == "im2col-gemm")
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    op.weights = t.prepare(op)
    got = t.run(op, [x])[0]
    ks = [3, 2, 2]
    strides, dil, pre, post, out = geometry(params, x.shape, ks)
    xp = pad_input(x, pre, post)
    cols = np.empty((2, 3, 12) + tuple(out), np.float32)
    for i, taps in enumerate(itertools.product(*[range(k) for k in ks])):
        cols[:, :, i] = xp[(slice(None), slice(None)) + tap_slices(taps, dil, strides, out)]
    wm = gemm_weights(op, None, 1, np.float32)
    y = np.matmul(wm, cols.reshape(2, 1, 36, -1)).reshape((2, 4) + tuple(out))
    np.testing.assert_array_equal(got, finish(op, y, b, [x], np.dtype(np.float32))[0])


@pytest.mark.parametrize("t,b,h", [(1, 1, 16), (4, 3, 8), (6, 2, 5)])
def test_plain_lstm_steps_are_the_general_loop_bit_for_bit(t, b, h):
    """The plain-LSTM path (default activations, every sequence full length) does the general step loop's
    operations in the same order: the same bits."""
    from native.cpu.kernels import rnn
    xw = RNG.standard_normal((t, b, 4 * h)).astype(np.float32)
    w_r = (RNG.standard_normal((4 * h, h)) * 0.5).astype(np.float32)
    b_r = RNG.standard_normal(4 * h).astype(np.float32)
    h0, c0 = RNG.standard_normal((2, b, h)).astype(np.float32)
    general = rnn._run_direction("LSTM", xw, w_r, b_r, h0, c0, None, rnn._acts({}, "LSTM", 1)[0],
                                 np.ones((t, b), bool), None, 0, 0)
    fast = rnn._lstm_steps(xw, w_r, b_r, h0, c0)
    for g, f in zip(general, fast):
        assert g.dtype == f.dtype and g.shape == f.shape and g.tobytes() == f.tobytes()


def test_forward_lstm_with_initial_state_against_ort_and_batch_first():
    """ONNX Runtime runs layout 0 only: layout 1 (batch first) is checked as the transpose of our layout 0."""
    from native.cpu.kernels import rnn
    t, b, i, h = 3, 2, 4, 6
    feeds = {"x": RNG.standard_normal((t, b, i)).astype(np.float32),
             "w": RNG.standard_normal((1, 4 * h, i)).astype(np.float32) * 0.5,
             "r": RNG.standard_normal((1, 4 * h, h)).astype(np.float32) * 0.5,
             "b": RNG.standard_normal((1, 8 * h)).astype(np.float32) * 0.1,
             "h0": RNG.standard_normal((1, b, h)).astype(np.float32),
             "c0": RNG.standard_normal((1, b, h)).astype(np.float32)}
    node = helper.make_node("LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=h)
    _check(node, feeds, ["y", "yh", "yc"], opset=14)
    f = feeds
    seq = rnn.rnn(Op("RNN", "l", {"cell": "LSTM"}), [f["x"], f["w"], f["r"], f["b"], None, f["h0"], f["c0"]])
    bf = rnn.rnn(Op("RNN", "l", {"cell": "LSTM", "layout": 1}),
                 [f["x"].transpose(1, 0, 2), f["w"], f["r"], f["b"], None, f["h0"].transpose(1, 0, 2),
                  f["c0"].transpose(1, 0, 2)])
    np.testing.assert_array_equal(bf[0], seq[0].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(bf[1], seq[1].transpose(1, 0, 2))
    np.testing.assert_array_equal(bf[2], seq[2].transpose(1, 0, 2))
