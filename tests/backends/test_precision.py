"""The precision pass: which precision each layer computes in, storage types, reformat layers, constraints."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine.build import parse_onnx, profile_from_shapes
from backends.engine.builder import Builder, BuilderConfig, BuilderFlag
from backends.engine.dtypes import DataType
from backends.engine.runtime import Runtime
from native import numerics
from native.errors import BuildError, UsageError


def conv_model():
    """x[2,3,9,9] → Conv 'conv' (5 out, 3x3) → Relu 'relu' → Cast(int32) 'to_int' → Cast(float) 'to_float'
    → Add(0.5) 'add' → y.  The Casts have no FP16 implementation."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["m"], name="scale"),
             helper.make_node("Cast", ["m"], ["i"], name="to_int", to=TensorProto.INT32),
             helper.make_node("Cast", ["i"], ["f"], name="to_float", to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "h"], ["y"], name="add")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 9, 9])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(3.0), "k"),
                           numpy_helper.from_array(np.float32(0.5), "h")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def build(model, *flags, layer_precisions=(), output_types=(), network_hook=None, logger=None, tactics=None):
    net, _ = parse_onnx(model.SerializeToString())
    if network_hook:
        network_hook(net)
    cfg = BuilderConfig()
    for f in flags:
        cfg.set_flag(BuilderFlag(f))
    from backends.engine.builder.precision_spec import parse_layer_output_types, parse_layer_precisions
    cfg.layer_precisions = parse_layer_precisions(list(layer_precisions))
    cfg.layer_output_types = parse_layer_output_types(list(output_types))
    cfg.tactic_sources = tactics
    prof = profile_from_shapes(net, {})
    if prof:
        cfg.add_optimization_profile(prof)
    return Runtime().deserialize_engine(Builder(logger).build_serialized_network(net, cfg))


def layers(engine):
    return {l["Name"]: l for l in engine.create_engine_inspector().layers()}


def by_source(engine, onnx_name):
    return next(l for l in layers(engine).values() if onnx_name in l["SourceNodes"])


def test_fp16_layers_reformats_and_fp32_fallback():
    import io
    from native.logger import Logger
    log = io.StringIO()
    eng = build(conv_model(), "fp16", logger=Logger(Logger.VERBOSE, stream=log))
    assert "layer 'to_int' (Cast) runs in float32: a Cast produces exactly the type its ONNX node names" \
        in log.getvalue()
    ls = layers(eng)
    assert by_source(eng, "conv")["Precision"] == "float16"
    assert by_source(eng, "to_int")["Precision"] == "float32"   # Cast: no FP16 implementation
    assert by_source(eng, "add")["Precision"] == "float16"
    reformats = sorted((l["Params"]["from"], l["Params"]["to"]) for l in ls.values() if l["LayerType"] == "Reformat")
    # input x -> fp16 (conv), fp16 -> fp32 before the Cast, fp32 -> fp16 after the Cast, fp16 -> fp32 network output
    assert reformats == [("float16", "float32"), ("float16", "float32"), ("float32", "float16"),
                         ("float32", "float16")]
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    out = eng.create_execution_context().execute({"x": x}, taps=["r"])
    assert out["y"].dtype == np.float32 and out["r"].dtype == np.float16  # FP16 storage inside, FP32 output


def test_fp16_values_are_fp16_numerics():
    """conv in FP16 = FP16 operands, FP32 accumulation, one RNE rounding of the fused output; the network output is
    that FP16 value widened. Integer-valued data make every FP32 sum exact, so the check is bit for bit."""
    rng = np.random.default_rng(2)
    w = rng.integers(-4, 5, (5, 3, 3, 3)).astype(np.float32) / 4
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 7, 7])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = rng.integers(-600, 600, (2, 3, 7, 7)).astype(np.float32) / 8 + np.float32(2 ** -12)  # not FP16-exact
    eng = build(m, "fp16", tactics={"im2col-gemm"})  # Winograd's transforms round differently
    got = eng.create_execution_context().execute({"x": x})["y"]
    xh = np.pad(x.astype(np.float16).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 5, 7, 7))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,mc->nmhw", xh[:, :, i:i + 7, j:j + 7], w[:, :, i, j].astype(np.float64))
    np.testing.assert_array_equal(got, ref.astype(np.float16).astype(np.float32))
    assert not np.array_equal(got, ref.astype(np.float32))  # the output rounding is visible


def test_bf16_and_tf32():
    eng = build(conv_model(), "bf16")
    assert by_source(eng, "conv")["Precision"] == "bfloat16"
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    r = eng.create_execution_context().execute({"x": x}, taps=["r"])["r"]
    assert r.dtype.name == "bfloat16"
    eng = build(conv_model(), "tf32")
    conv = by_source(eng, "conv")
    assert conv["Precision"] == "float32" and conv["Math"] == "tf32"
    assert by_source(eng, "add")["Math"] is None
    assert not any(l["LayerType"] == "Reformat" for l in layers(eng).values())


def test_plain_build_is_fp32_without_reformats():
    eng = build(conv_model())
    assert {l["Precision"] for l in layers(eng).values()} == {"float32"}
    assert not any(l["LayerType"] == "Reformat" for l in layers(eng).values())
    assert not BuilderConfig().get_flag(BuilderFlag.TF32)


def test_layer_precisions_by_onnx_name_with_wildcards_later_wins():
    eng = build(conv_model(), "fp16", layer_precisions=["*:fp16,re*:fp32", "relu:fp16,conv:fp32"],
                network_hook=None)
    # PREFER is not set: a constraint to a slower precision is ignored (as in TensorRT) ...
    assert by_source(eng, "conv")["Precision"] == "float16"
    net_cfg_flags = ("fp16", "prefer_precision_constraints")
    eng = build(conv_model(), *net_cfg_flags, layer_precisions=["*:fp16,re*:fp32", "relu:fp16,conv:fp32"])
    assert by_source(eng, "conv")["Precision"] == "float32"     # later spec wins
    assert by_source(eng, "relu")["Precision"] == "float16"
    assert by_source(eng, "to_int")["Precision"] == "float32"   # '*:fp16' cannot apply: PREFER warns, keeps FP32


def test_unknown_layer_name_lists_near_matches():
    with pytest.raises(UsageError, match=r"'relu1'.*did you mean 'relu'"):
        build(conv_model(), "fp16", layer_precisions=["relu1:fp32"])
    with pytest.raises(UsageError, match="unknown precision"):
        build(conv_model(), "fp16", layer_precisions=["relu:fp12"])


def test_obey_impossible_precision_is_a_build_error_naming_the_layer():
    with pytest.raises(BuildError, match=r"to_int.*float16"):
        build(conv_model(), "fp16", "obey_precision_constraints", layer_precisions=["to_int:fp16"])
    with pytest.raises(BuildError, match=r"relu.*FP16 \(--fp16\)"):  # FP16 not enabled
        build(conv_model(), "obey_precision_constraints", layer_precisions=["relu:fp16"])


def test_layer_api_constraints_and_output_types():
    def hook(net):
        for layer in net.layers:
            if "relu" in layer.source_nodes:
                layer.precision = DataType.FLOAT
            if "conv" in layer.source_nodes:
                layer.set_output_type(0, DataType.FLOAT)

    eng = build(conv_model(), "fp16", "obey_precision_constraints", network_hook=hook)
    conv = by_source(eng, "conv")
    assert conv["Precision"] == "float16" and conv["OutputTypes"] == ["float32"]  # FP16 compute, FP32 output
    assert by_source(eng, "relu")["Precision"] == "float32"
    # conv writes float32 and relu reads float32: no reformat between them
    relu = by_source(eng, "relu")
    assert not any(l["LayerType"] == "Reformat" and l["Outputs"][0] in relu["Inputs"] for l in layers(eng).values())


def test_network_output_type():
    def hook(net):
        net.outputs[0].dtype = DataType.HALF

    eng = build(conv_model(), "fp16", network_hook=hook)
    x = np.zeros((2, 3, 9, 9), np.float32)
    assert eng.create_execution_context().execute({"x": x})["y"].dtype == np.float16


def test_plan_records_precisions_and_reformats(tmp_path):
    eng = build(conv_model(), "fp16")
    info = json.loads(eng.create_engine_inspector().get_engine_information())
    assert "fp16" in info["BuildConfig"]["flags"]
    kinds = [l["LayerType"] for l in info["Layers"]]
    assert kinds.count("Reformat") == 4
    assert by_source(eng, "conv")["OutputTypes"] == ["float16"]


def test_fp8_conv_with_fp16_companion():
    eng = build(conv_model(), "fp8")
    assert by_source(eng, "conv")["Precision"] == "fp8"
    assert by_source(eng, "relu")["Precision"] in ("float16", "fp8")  # fused into the conv or FP16 on its own
    assert by_source(eng, "add")["Precision"] == "float16"


def test_engine_runner_flags():
    from backends.runners import EngineRunner, OnnxrtRunner
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 9, 9)).astype(np.float32)
    m = conv_model()
    with EngineRunner(m.SerializeToString(), flags=("fp16",)) as r, OnnxrtRunner(m.SerializeToString()) as o:
        got, ref = r.infer({"x": x})["y"], o.infer({"x": x})["y"]
        assert {l["Precision"] for l in r.engine.create_engine_inspector().layers()} >= {"float16"}
    assert got.dtype == np.float32
    err = np.abs(got - ref)
    assert 0 < err.max() < 0.05 * np.abs(ref).max()   # FP16 error: present, small


def test_reformat_rounds_to_nearest_even():
    from native.tactics import Op, tactics_for
    t = tactics_for("Reformat")[0]
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 70000.0], np.float32)
    out = t.run(Op("Reformat", "r", {"from": "float32", "to": "float16"}), [x])[0]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.astype(np.float32), numerics.round_fp16(x))
    assert out.tolist()[:2] == [1.0, 1 + 2 ** -9]


def test_reused_folded_prefix_builds_what_a_full_build_does():
    """Builder.build_graph(prefix_memo=...) (a precision search's probes) runs the passes before fusion once and
    applies each build's precision spec to a copy: the same layers, precisions, tactics and output bits as a full
    build, for every spec, including one naming a layer that constant folding removes."""
    from backends.engine.builder.config import AlgorithmSelector
    from backends.engine.builder.precision_spec import parse_layer_precisions

    class First(AlgorithmSelector):   # a fixed tactic choice: the comparison does not depend on timing
        def select_algorithms(self, context, choices):
            return [0]
    m = conv_model()
    g = m.graph   # a float layer computed from constants only: folded before fusion
    g.node.insert(0, helper.make_node("Mul", ["k", "k"], ["k2"], name="kk"))
    g.node[3].input[1] = "k2"   # 'scale' multiplies by k*k
    net, _ = parse_onnx(m.SerializeToString())
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 9)).astype(np.float32)
    memo = {}
    # how constraints are held (prefer / obey) matters after the prefix only: every build shares one prefix
    for spec, how in (([], None), (["conv:fp32"], BuilderFlag.PREFER_PRECISION_CONSTRAINTS),
                      (["*:fp16,relu:fp32"], None), (["kk:fp32,scale:fp32"], BuilderFlag.OBEY_PRECISION_CONSTRAINTS),
                      (["conv:fp32"], BuilderFlag.PREFER_PRECISION_CONSTRAINTS)):
        built = []
        for use_memo in (False, True):
            cfg = BuilderConfig()
            cfg.set_flag(BuilderFlag.FP16)
            if how is not None:
                cfg.set_flag(how)
            cfg.algorithm_selector = First()
            cfg.layer_precisions = parse_layer_precisions(spec)
            graph = Builder().build_graph(net, cfg, prefix_memo=memo if use_memo else None)
            engine = Runtime().engine_from_graph(graph, cfg)
            y = engine.create_execution_context().execute({"x": x})["y"]
            built.append(([(n.name, n.kind, n.precision, n.tactic_name) for n in graph.nodes], y.tobytes()))
        assert built[0] == built[1], spec
    assert len(memo) == 1
    with pytest.raises(UsageError, match="no layer or ONNX node is named 'nope'"):
        cfg = BuilderConfig()
        cfg.layer_precisions = parse_layer_precisions(["nope:fp32"])
        Builder().build_graph(net, cfg, prefix_memo=memo)
