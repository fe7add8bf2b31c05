"""Fusion passes: fused names present, outputs equal to the unfused engine, graph outputs never fused away."""
import math

import numpy as np
import pytest
from onnx import helper

from tests.backends.fusion_helpers import RNG, build, const, fused_names, kinds, model, run
from native.cpu.kernels.conv import conv_bias

X4 = ("x", [1, 4, 8, 8])


def _compare(m, feeds, atol=1e-5):
    fused, plain = build(m), build(m, fusion=False)
    a, b = run(fused, feeds), run(plain, feeds)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=atol)
    return fused, plain


def _conv(name, x, y, w, b=None, **kw):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], name=name, pads=[1, 1, 1, 1], **kw)


def test_conv_bn_relu_folds_into_one_layer():
    w = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
    bn = [RNG.uniform(0.5, 2, 6).astype(np.float32) for _ in range(4)]
    nodes = [_conv("conv1", "x", "c", "w"),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["n"], name="bn1"),
             helper.make_node("Relu", ["n"], ["y"], name="relu1")]
    m = model(nodes, [X4], ["y"], [const("w", w), const("s", bn[0]), const("bb", bn[1]), const("mu", bn[2]),
                                   const("var", bn[3])])
    fused, plain = _compare(m, {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    assert "conv1 + bn1 + relu1" in fused_names(fused)
    assert kinds(fused) == ["Convolution"]
    assert len(kinds(plain)) == 3


def test_conv_bias_add_activation_and_residual():
    w1 = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal((1, 4, 1, 1)).astype(np.float32)
    nodes = [_conv("conv1", "x", "c", "w1"), helper.make_node("Add", ["c", "bias"], ["cb"], name="addb"),
             helper.make_node("Add", ["cb", "x"], ["r"], name="res"),
             helper.make_node("HardSwish", ["r"], ["y"], name="act")]
    m = model(nodes, [X4], ["y"], [const("w1", w1), const("bias", bias)])
    fused, _ = _compare(m, {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    conv = [n for n in fused.nodes if n.kind == "Convolution"][0]
    assert conv.fused_name == "conv1 + addb + res + act"
    # the constant per-channel add folds into the conv bias; residual and activation become post-ops
    np.testing.assert_allclose(conv_bias(conv.weights), bias.reshape(-1))
    assert [s["op"] for s in conv.params["post_ops"]] == ["add", "activation"]


@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "Gelu"])
def test_matmul_bias_activation(act):
    wm = RNG.standard_normal((8, 5)).astype(np.float32)
    bias = RNG.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["mm"], name="mm"),
             helper.make_node("Add", ["bias", "mm"], ["a"], name="add"),
             helper.make_node(act, ["a"], ["y"], name="act")]
    m = model(nodes, [("x", [2, 3, 8])], ["y"], [const("wm", wm), const("bias", bias)], opset=20)
    fused, _ = _compare(m, {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)})
    assert fused_names(fused) == ["mm + add + act"]


def test_graph_output_is_never_fused_away():
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [_conv("conv1", "x", "c", "w"), helper.make_node("Relu", ["c"], ["y"], name="relu1")]
    m = model(nodes, [X4], ["c", "y"], [const("w", w)])
    fused, _ = _compare(m, {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    assert "conv1 + relu1" not in fused_names(fused)
    assert set(fused.output_names) == {"c", "y"}


def test_pointwise_chain_becomes_one_layer():
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
             helper.make_node("Mul", ["a", "s"], ["b"], name="silu"),
             helper.make_node("Exp", ["b"], ["e"], name="exp"),
             helper.make_node("Sub", ["e", "x"], ["y"], name="sub")]
    m = model(nodes, [("x", [3, 7])], ["y"], [const("two", np.float32(2.0))])
    fused, _ = _compare(m, {"x": RNG.standard_normal((3, 7)).astype(np.float32)})
    # sigmoid(a) * a is first recognised as SiLU, after which every link is single-consumer: one layer
    assert kinds(fused) == ["Pointwise"]
    assert fused.nodes[-1].name == "PWN(mul, sig + silu, exp, sub)"
    prog = fused.nodes[-1].params["program"]
    assert [s["op"] for s in prog] == ["ElementWise", "Activation", "Unary", "ElementWise"]
    assert [s["args"] for s in prog] == [["in:0", "w:c0"], ["s:0"], ["s:1"], ["s:2", "in:0"]]


def test_gelu_erf_and_tanh_patterns():
    s2 = math.sqrt(2.0)
    erf_nodes = [helper.make_node("Div", ["x", "s2"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
                 helper.make_node("Add", ["e", "one"], ["a"], name="add"), helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
                 helper.make_node("Mul", ["m", "half"], ["y"], name="mul2")]
    inits = [const("s2", np.float32(s2)), const("one", np.float32(1)), const("half", np.float32(0.5))]
    m = model(erf_nodes, [("x", [4, 16])], ["y"], inits)
    x = RNG.standard_normal((4, 16)).astype(np.float32) * 3
    fused, _ = _compare(m, {"x": x})
    assert kinds(fused) == ["Activation"] and fused.nodes[-1].params["type"] == "GELU_ERF"
    assert fused.nodes[-1].fused_name == "div + erf + add + mul + mul2"

    tanh_nodes = [helper.make_node("Mul", ["x", "half"], ["h"], name="h"),
                  helper.make_node("Pow", ["x", "three"], ["p"], name="pow"),
                  helper.make_node("Mul", ["p", "c1"], ["q"], name="q"), helper.make_node("Add", ["x", "q"], ["s"], name="s"),
                  helper.make_node("Mul", ["s", "c2"], ["t"], name="t"), helper.make_node("Tanh", ["t"], ["th"], name="tanh"),
                  helper.make_node("Add", ["th", "one"], ["a"], name="a"), helper.make_node("Mul", ["h", "a"], ["y"], name="y")]
    inits = [const("half", np.float32(0.5)), const("three", np.float32(3)), const("c1", np.float32(0.044715)),
             const("c2", np.float32(math.sqrt(2 / math.pi))), const("one", np.float32(1))]
    m = model(tanh_nodes, [("x", [4, 16])], ["y"], inits)
    fused, _ = _compare(m, {"x": x})
    assert kinds(fused) == ["Activation"] and fused.nodes[-1].params["type"] == "GELU_TANH"


def test_layernorm_and_softmax_patterns():
    gamma, beta = RNG.standard_normal(16).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["var"], name="var", axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "g"], ["ng"], name="gamma"),
             helper.make_node("Add", ["ng", "b"], ["ln"], name="beta"),
             helper.make_node("ReduceMax", ["ln"], ["mx"], name="max", axes=[-1]),
             helper.make_node("Sub", ["ln", "mx"], ["z"], name="shift"),
             helper.make_node("Exp", ["z"], ["ez"], name="exp"),
             helper.make_node("ReduceSum", ["ez", "ax"], ["se"], name="sum"),
             helper.make_node("Div", ["ez", "se"], ["y"], name="norm")]
    inits = [const("two", np.float32(2)), const("eps", np.float32(1e-5)), const("g", gamma), const("b", beta),
             const("ax", np.array([-1], np.int64))]
    m = model(nodes, [("x", [2, 5, 16])], ["y"], inits)
    fused, _ = _compare(m, {"x": RNG.standard_normal((2, 5, 16)).astype(np.float32)})
    assert kinds(fused) == ["Normalization", "Softmax"]
    assert fused.nodes[-2].fused_name == "mean + sub + pow + var + eps + sqrt + div + gamma + beta"
    assert fused.nodes[-1].fused_name == "max + shift + exp + sum + norm"


def test_attention_pattern_with_scale_mask_and_nan_guard():
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Div", ["s", "scale"], ["ss"], name="scale"),
             helper.make_node("Add", ["ss", "mask"], ["sm"], name="mask"),
             helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
             helper.make_node("Where", ["nan", "zero", "p"], ["pp"], name="where"),
             helper.make_node("MatMul", ["pp", "v"], ["y"], name="pv")]
    shp = [2, 2, 6, 8]
    m = model(nodes, [("q", shp), ("k", shp), ("v", shp), ("mask", [2, 1, 1, 6])], ["y"],
              [const("scale", np.float32(math.sqrt(8))), const("zero", np.float32(0))])
    mask = np.zeros((2, 1, 1, 6), np.float32)
    mask[1, ..., 3:] = -np.inf
    feeds = {n: RNG.standard_normal(shp).astype(np.float32) for n in "qkv"}
    feeds["mask"] = mask
    fused, _ = _compare(m, feeds)
    att = [n for n in fused.nodes if n.kind == "Attention"]
    assert len(att) == 1 and att[0].params["mask_kind"] == "add" and att[0].params["nan_to_zero"]
    assert att[0].params["scale"] == pytest.approx(1 / math.sqrt(8), rel=1e-6)


def test_transpose_pairs_and_identities_removed():
    nodes = [helper.make_node("Identity", ["x"], ["i"], name="id"),
             helper.make_node("Transpose", ["i"], ["t1"], name="t1", perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], name="t2", perm=[0, 3, 1, 2]),
             helper.make_node("Relu", ["t2"], ["y"], name="relu")]
    m = model(nodes, [X4], ["y"])
    fused, plain = _compare(m, {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    assert kinds(fused) == ["Activation"]
    assert len(kinds(plain)) == 4


def test_disable_fusion_flag_keeps_every_layer():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Exp", ["a"], ["y"], name="e1")]
    m = model(nodes, [("x", [3])], ["y"])
    assert kinds(build(m, fusion=False)) == ["Activation", "Unary"]
    assert kinds(build(m)) == ["Pointwise"]


def test_conv_silu_becomes_conv_epilogue():
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [_conv("conv", "x", "c", "w"), helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["y"], name="mul")]
    m = model(nodes, [X4], ["y"], [const("w", w)])
    fused, _ = _compare(m, {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)})
    assert fused_names(fused) == ["conv + sig + mul"]
    assert fused.nodes[-1].params["post_ops"][-1]["type"] == "SILU"


def _act_pool_model(act, extra_reader=False):
    nodes = [helper.make_node(act, ["x"], ["a"], name="act"),
             helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    outputs = ["p"]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["a"], ["n"], name="neg"))
        outputs.append("n")
    return model(nodes, [("x", [1, 3, 9, 9])], outputs)


def test_relu_moves_past_max_pool_as_its_epilogue():
    """max_pool(relu(x)) == relu(max_pool(x)): the ReLU runs on the pooled map, inside the Pooling layer."""
    m = _act_pool_model("Relu")
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    fused, plain = build(m), build(m, fusion=False)
    assert kinds(fused) == ["Pooling"] and fused_names(fused) == ["pool + act"]
    assert [s["type"] for s in fused.nodes[0].params["post_ops"]] == ["RELU"]
    np.testing.assert_array_equal(run(fused, {"x": x})[0], run(plain, {"x": x})[0])  # bit-identical


@pytest.mark.parametrize("act,extra", [("Sigmoid", False), ("Relu", True)])
def test_activation_stays_before_max_pool(act, extra):
    """Smooth activations (rounding may break monotonicity) and activations whose output is read elsewhere stay."""
    m = _act_pool_model(act, extra_reader=extra)
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    fused = build(m)
    assert "Activation" in kinds(fused) and not any(n.params.get("post_ops") for n in fused.nodes
                                                      if n.kind == "Pooling")
    for a, b in zip(run(fused, {"x": x}), run(build(m, fusion=False), {"x": x})):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _shortcut_block(stride):
    """x -> conv_a(3x3) -> relu -> conv_b(3x3, stride) ; x -> short(1x1, stride) ; relu(conv_b + short)."""
    wa = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.3
    wb = RNG.standard_normal((8, 6, 3, 3)).astype(np.float32) * 0.3
    ws = RNG.standard_normal((8, 4, 1, 1)).astype(np.float32) * 0.3
    bb, bs = (RNG.standard_normal(8).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
             helper.make_node("Conv", ["ra", "wb", "bb"], ["b"], name="conv_b", pads=[1, 1, 1, 1],
                              strides=[stride, stride]),
             helper.make_node("Conv", ["x", "ws", "bs"], ["s"], name="short", strides=[stride, stride]),
             helper.make_node("Add", ["b", "s"], ["r"], name="res"),
             helper.make_node("Relu", ["r"], ["y"], name="relu_out")]
    return model(nodes, [("x", [2, 4, 10, 10])], ["y"], [const("wa", wa), const("wb", wb), const("ws", ws),
                                                        const("bb", bb), const("bs", bs)])


@pytest.mark.parametrize("stride", [1, 2])
def test_shortcut_conv_merges_into_the_residual_conv(stride):
    """ResNet's projection shortcut: its 1x1 conv becomes extra GEMM columns of the conv it is added to."""
    m = _shortcut_block(stride)
    x = RNG.standard_normal((2, 4, 10, 10)).astype(np.float32)
    fused, plain = build(m), build(m, fusion=False)
    assert kinds(fused) == ["Convolution", "Convolution"]
    merged = fused.nodes[1]
    assert merged.name == "conv_b + res + relu_out + short" and merged.params["side"]["strides"] == [stride] * 2
    assert [s["op"] for s in merged.params["post_ops"]] == ["activation"]
    np.testing.assert_allclose(run(fused, {"x": x})[0], run(plain, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _conv_ref(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, ho, wo))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("mc,nchw->nmhw", w[:, :, i, j],
                           xp[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride])
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


@pytest.mark.parametrize("stride,k", [(1, 3), (2, 3), (1, 1), (2, 1)])
def test_every_conv_tactic_honours_a_merged_shortcut(stride, k, monkeypatch):
    """Unpacked and packed weights (shortcut rows in the patch matrix), inline and threaded, every tactic: the
    merged layer equals relu(conv(h) + b + shortcut(x) + b_s)."""
    from native.cpu.kernels import conv as conv_mod
    from native.tactics import Op, tactics_for
    h = RNG.standard_normal((2, 6, 10, 10)).astype(np.float32)
    x = RNG.standard_normal((2, 4, 10, 10)).astype(np.float32)
    w = RNG.standard_normal((8, 6, k, k)).astype(np.float32) * 0.3
    ws = RNG.standard_normal((8, 4)).astype(np.float32) * 0.3
    b, bs = (RNG.standard_normal(8).astype(np.float32) for _ in range(2))
    pad = k // 2   # k == 1: the main conv is pointwise too (its GEMM reads the input directly, no patch matrix)
    ref = np.maximum(_conv_ref(h, w, b, stride, pad) + _conv_ref(x, ws[:, :, None, None], bs, stride, 0), 0)
    params = {"kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2, "post_padding": [pad] * 2,
              "groups": 1, "num_output_maps": 8, "post_ops": [{"op": "activation", "type": "RELU"}],
              "side": {"input": 3, "strides": [stride] * 2}}
    weights = {"kernel": w, "bias": b + bs, "side_kernel": ws}
    args = [h, None, None, x]
    seen = set()
    for limit in (0, 1 << 40):
        monkeypatch.setattr(conv_mod.tuning, "PARALLEL_MIN_MACS", limit)
        for t in tactics_for("Convolution", "cpu"):
            op = Op("Convolution", "c", params, dict(weights))
            if t.supports(op, [list(h.shape), None, None, list(x.shape)]) is not None:
                continue
            seen.add(t.name)
            np.testing.assert_allclose(t.run(op, args)[0], ref, rtol=1e-4, atol=1e-4, err_msg=t.name)
            op.weights = t.prepare(op)
            np.testing.assert_allclose(t.run(op, args)[0], ref, rtol=1e-4, atol=1e-4, err_msg=f"{t.name} prepared")
    assert "im2col-gemm" in seen and (k == 3 or "1x1-gemm" in seen)


def test_bypass_keeps_the_view_maps_as_a_full_refresh_would():
    """View.bypass updates producers / consumers incrementally: the same lists, in graph order, with a reader of
    the removed tensor that also reads its source (and reads it twice) counted per read."""
    from backends.engine.builder.passes.fusion_util import View
    from backends.engine.engine_graph import Graph, Node, TensorInfo
    nodes = [Node("a", "Activation", ["x"], ["t0"], params={"type": "RELU"}),
             Node("id", "Identity", ["t0"], ["t1"]),
             Node("m", "ElementWise", ["t1", "t1"], ["t2"], params={"op": "PROD"}),
             Node("s", "ElementWise", ["t0", "t1"], ["t3"], params={"op": "SUM"}),
             Node("u", "ElementWise", ["t2", "t3"], ["y"], params={"op": "SUM"})]
    g = Graph("g", inputs=[TensorInfo("x", "float32", [2])], outputs=[TensorInfo("y", "float32", [2])], nodes=nodes)
    view = View(g)
    assert view.bypass(nodes[1], "t0", "t1")
    assert [n.name for n in g.nodes] == ["a", "m", "s", "u"]
    fresh = View(g)
    assert view.prod == fresh.prod
    assert {k: [n.name for n in v] for k, v in view.cons.items()} == \
        {k: [n.name for n in v] for k, v in fresh.cons.items()}
    assert [n.name for n in view.cons["t0"]] == ["m", "m", "s", "s"]


@pytest.mark.parametrize("gemm_residual", [False, True])
def test_gemm_residual_add_fuses_only_where_the_device_adds_it_in_the_gemm(monkeypatch, gemm_residual):
    """x @ W + b + x: the residual becomes the GEMM's post-op on a device that fuses it (CUDA: cuBLASLt's C), and
    stays an ElementWise layer elsewhere; the values agree either way."""
    from native.device import get_device
    monkeypatch.setattr(type(get_device("cpu")), "fuses_gemm_residual", gemm_residual)
    wm = RNG.standard_normal((16, 16)).astype(np.float32)
    bias = RNG.standard_normal(16).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "bias"], ["a"], name="bias_add"),
             helper.make_node("Add", ["a", "x"], ["y"], name="residual")]
    m = model(nodes, [("x", [2, 5, 16])], ["y"], [const("wm", wm), const("bias", bias)])
    fused, _ = _compare(m, {"x": RNG.standard_normal((2, 5, 16)).astype(np.float32)})
    mm = [n for n in fused.nodes if n.kind == "MatrixMultiply"][0]
    steps = [s["op"] for s in mm.params.get("post_ops") or []]
    assert steps == (["bias", "add"] if gemm_residual else ["bias"])
    assert ("ElementWise" in kinds(fused)) is not gemm_residual
