"""ai.onnx opsets 27 and 28 (onnx 1.23): the ops they added or changed, against references written here; a model
with onnx.helper.make_model's defaults through `debugkit run --engine --onnxrt`; a node of a newer opset than we
implement is an error naming that op and opset."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.runners.engine import EngineRunner
from tests import onnx_compat


def _model(nodes, inputs, outputs, opset=28, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=14 if opset >= 27 else 10)


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _run(model, feeds):
    with EngineRunner(model) as r:
        return r.infer(feeds)


def test_swiglu_is_swish_of_the_gate_times_the_value():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 8)).astype(np.float32), rng.standard_normal((2, 3, 8)).astype(np.float32)
    for alpha in (1.0, 0.5):
        m = _model([helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=alpha)],
                   [_vi("a", [2, 3, 8]), _vi("b", [2, 3, 8])], [_vi("y", None)])
        want = a / (1 + np.exp(-alpha * a.astype(np.float64))) * b
        np.testing.assert_allclose(_run(m, {"a": a, "b": b})["y"], want, rtol=1e-5, atol=1e-6)


def test_swiglu_refuses_inputs_of_two_shapes():
    from native.errors import ParseError
    m = _model([helper.make_node("SwiGLU", ["a", "b"], ["y"], name="glu")],
               [_vi("a", [2, 8]), _vi("b", [1, 8])], [_vi("y", None)])
    with pytest.raises(ParseError, match=r"glu.*one shape"):
        _run(m, {"a": np.zeros((2, 8), np.float32), "b": np.zeros((1, 8), np.float32)})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_mode_is_the_inverse_of_depth_to_space(mode):
    """Opset 28 gave SpaceToDepth DepthToSpace's `mode`: each undoes the other in the same mode."""
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    m = _model([helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2, mode=mode),
                helper.make_node("DepthToSpace", ["s"], ["y"], blocksize=2, mode=mode)],
               [_vi("x", [2, 3, 4, 6])], [_vi("s", None), _vi("y", None)])
    out = _run(m, {"x": x})
    np.testing.assert_array_equal(out["y"], x)
    b, c, h, w = x.shape
    blocks = x.reshape(b, c, h // 2, 2, w // 2, 2)     # (b, c, h', row, w', col)
    depth_first = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    np.testing.assert_array_equal(out["s"], blocks.transpose(depth_first).reshape(b, c * 4, h // 2, w // 2))
    if mode == "CRD":   # the two modes do order the depth differently
        assert not np.array_equal(out["s"], blocks.transpose(0, 3, 5, 1, 2, 4).reshape(b, c * 4, h // 2, w // 2))


def test_causal_conv_with_state_equals_a_padded_depthwise_convolution_and_carries_its_state():
    """Two calls with the state carried equal one call on the whole sequence."""
    rng = np.random.default_rng(1)
    b, c, length, k = 2, 3, 7, 4
    x = rng.standard_normal((b, c, length)).astype(np.float32)
    w = rng.standard_normal((c, 1, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("CausalConvWithState", ["x", "w", "bias", "past"], ["y", "present"], activation="silu")

    def model(n):
        return _model([node], [_vi(name, shape) for name, shape in (("x", [b, c, n]), ("w", [c, 1, k]), ("bias", [c]),
                                                                    ("past", [b, c, k - 1]))],
                      [_vi("y", None), _vi("present", None)], opset=27)
    padded = np.concatenate([np.zeros((b, c, k - 1), np.float64), x], axis=2)
    pre = np.stack([sum(w[None, :, 0, j] * padded[:, :, t + j] for j in range(k)) for t in range(length)], -1)
    pre = pre + bias[None, :, None]
    want = pre / (1 + np.exp(-pre))
    zeros = np.zeros((b, c, k - 1), np.float32)
    whole = _run(model(length), {"x": x, "w": w, "bias": bias, "past": zeros})
    first = _run(model(4), {"x": x[:, :, :4], "w": w, "bias": bias, "past": zeros})
    second = _run(model(length - 4), {"x": x[:, :, 4:], "w": w, "bias": bias, "past": first["present"]})
    np.testing.assert_allclose(whole["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(whole["present"], x[:, :, -(k - 1):])
    np.testing.assert_allclose(np.concatenate([first["y"], second["y"]], axis=2), whole["y"], rtol=1e-5, atol=1e-6)


def test_linear_attention_linear_rule_is_causal_kernel_attention():
    """update_rule linear: o_t = scale * sum_{s <= t} (q_t . k_s) v_s, per head, query heads sharing KV heads."""
    rng = np.random.default_rng(2)
    b, t, hq, hkv, dk, dv = 2, 5, 4, 2, 3, 6
    q = rng.standard_normal((b, t, hq * dk)).astype(np.float32)
    k = rng.standard_normal((b, t, hkv * dk)).astype(np.float32)
    v = rng.standard_normal((b, t, hkv * dv)).astype(np.float32)
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["o", "state"], update_rule="linear",
                            q_num_heads=hq, kv_num_heads=hkv)
    m = _model([node], [_vi("q", [b, t, hq * dk]), _vi("k", [b, t, hkv * dk]), _vi("v", [b, t, hkv * dv])],
               [_vi("o", None), _vi("state", None)], opset=27)
    out = _run(m, {"q": q, "k": k, "v": v})
    q4, k4, v4 = q.reshape(b, t, hq, dk), k.reshape(b, t, hkv, dk), v.reshape(b, t, hkv, dv)
    want = np.zeros((b, t, hq, dv))
    for h in range(hq):
        g = h // (hq // hkv)
        scores = np.einsum("btd,bsd->bts", q4[:, :, h], k4[:, :, g]) * np.tril(np.ones((t, t)))
        want[:, :, h] = np.einsum("bts,bsd->btd", scores, v4[:, :, g]) / np.sqrt(dk)
    np.testing.assert_allclose(out["o"], want.reshape(b, t, hq * dv), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["state"], np.einsum("bthk,bthv->bhkv", k4, v4), rtol=1e-5, atol=1e-5)


def test_linear_attention_names_a_missing_gate():
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["o", "state"], update_rule="gated",
                            q_num_heads=1, kv_num_heads=1)
    m = _model([node], [_vi(n, [1, 2, 4]) for n in "qkv"], [_vi("o", None), _vi("state", None)], opset=27)
    x = np.ones((1, 2, 4), np.float32)
    with pytest.raises(Exception, match="needs the decay input"):
        _run(m, {"q": x, "k": x, "v": x})


def test_bitshift_on_signed_integers_shifts_arithmetically():
    """Opset 28: signed types; a right shift keeps the sign, a shift by the bit width or more (or a negative one)
    leaves only the sign fill: -1 for a right shift of a negative value, 0 otherwise."""
    x = np.array([-16, 16, -1, 100, -100, 5], np.int8)
    y = np.array([2, 2, 7, 8, 9, -1], np.int8)
    outs = {}
    for d in ("LEFT", "RIGHT"):
        m = _model([helper.make_node("BitShift", ["x", "y"], ["z"], direction=d)],
                   [_vi("x", [6], TensorProto.INT8), _vi("y", [6], TensorProto.INT8)], [_vi("z", None, TensorProto.INT8)])
        outs[d] = _run(m, {"x": x, "y": y})["z"].tolist()
    assert outs["RIGHT"] == [-4, 4, -1, 0, -1, 0]
    assert outs["LEFT"] == [-64, 64, -128, 0, 0, 0]


def test_mod_of_floats_follows_opset_28s_special_values():
    a = np.array([5.0, -5.0, 0.0, -0.0, np.inf, 5.0, 7.5, -7.5], np.float32)
    b = np.array([np.inf, np.inf, -3.0, 3.0, 2.0, 0.0, 2.0, 2.0], np.float32)
    m = _model([helper.make_node("Mod", ["a", "b"], ["c"])], [_vi("a", [8]), _vi("b", [8])], [_vi("c", None)])
    c = _run(m, {"a": a, "b": b})["c"]
    np.testing.assert_array_equal(c[[0, 1, 6, 7]], [5.0, np.inf, 1.5, 0.5])
    assert np.signbit(c[2]) and not np.signbit(c[3])          # a zero takes the divisor's sign
    assert np.isnan(c[4]) and np.isnan(c[5])


def test_range_in_float16_computes_in_float32_by_default():
    """Opset 27's stash_type (default float32): start + i * delta in float32, rounded once to float16; a model
    that asks for float16 arithmetic keeps its attribute through import."""
    start, limit, delta = (helper.make_tensor(n, TensorProto.FLOAT16, [], [v]) for n, v in
                           (("s", 2048.0), ("l", 2050.0), ("d", 0.25)))
    m = _model([helper.make_node("Range", ["s", "l", "d"], ["y"]), helper.make_node("Identity", ["x"], ["x2"])],
               [_vi("x", [1])], [_vi("y", None, TensorProto.FLOAT16), _vi("x2", None)], opset=27,
               inits=[start, limit, delta])
    y = _run(m, {"x": np.zeros(1, np.float32)})["y"]
    np.testing.assert_array_equal(y, (2048 + 0.25 * np.arange(8, dtype=np.float32)).astype(np.float16))
    assert y.dtype == np.float16 and y.tolist() == [2048] * 5 + [2050] * 3   # float16 steps by 2 here
    from backends.engine.network import NetworkDefinition
    from backends.engine.onnx_parser.parser import OnnxParser
    for stash, params in ((1, {}), (TensorProto.FLOAT16, {"stash_type": TensorProto.FLOAT16})):
        m.graph.node[0].ClearField("attribute")
        m.graph.node[0].attribute.append(helper.make_attribute("stash_type", stash))
        net = NetworkDefinition()
        assert OnnxParser(net).parse(m.SerializeToString())
        layer = next(la for la in net.layers if la.kind == "Range")
        assert {k: v for k, v in (layer.params or {}).items() if k == "stash_type"} == params


def test_a_node_of_an_opset_newer_than_ours_is_named_with_its_opset(monkeypatch):
    """With our newest opset held back to 25, a model of opset 26 imports its unchanged ops and names the one op
    that opset 26 added (CumProd): the error is about that node, not the whole model."""
    from backends.engine.onnx_parser import parser
    from native.errors import ParseError
    monkeypatch.setattr(parser, "MAX_OPSET", 25)
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [0])
    m = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("CumProd", ["r", "axis"], ["y"], name="cp")],
               [_vi("x", [4])], [_vi("y", None)], opset=26, inits=[axis])
    with pytest.raises(ParseError) as e:
        _run(m, {"x": np.ones(4, np.float32)})
    msg = str(e.value)
    assert "node 'cp' (CumProd): unsupported op 'CumProd' of ai.onnx opset 26" in msg and "opset 25" in msg, msg
    assert "Relu" not in msg and "outside the supported range" not in msg


def test_make_model_defaults_run_through_debugkit_against_onnxruntime(tmp_path):
    """A model written with onnx.helper.make_model's defaults (the installed onnx's newest opset and IR: 28 and 14
    with onnx 1.23) runs through `debugkit run --engine --onnxrt` and agrees."""
    from debugkit.cli.main import main
    make = onnx_compat._ORIGINAL_MAKE_MODEL     # the real defaults, not the suite's onnxruntime-safe ones
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("Mul", ["r", "r"], ["y"])], "defaults",
                          [_vi("x", [2, 4])], [_vi("y", [2, 3])],
                          [onnx.numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")])
    model = make(g)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    assert opset == onnx.defs.onnx_opset_version() and model.ir_version == onnx.IR_VERSION
    onnx_compat.require_ort_opset(opset, model.ir_version)
    path = str(tmp_path / "defaults.onnx")
    onnx.save(model, path)
    assert main(["run", path, "--engine", "--onnxrt", "-q"]) == 0
