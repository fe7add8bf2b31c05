"""The core pipeline: parse → build → plan → runtime, and every bad input naming the thing that is wrong."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.engine import (AlgorithmSelector, Builder, BuilderConfig, NetworkDefinition, OnnxParser,
                             OptimizationProfile, Runtime, TimingCache, build_plan_from_onnx)
from backends.engine.onnx_backend import Backend
from backends.engine.plan import FORMAT_VERSION
from native.errors import (DebugkitError, FeedError, InputFileError, ModelError, PlanError, ShapeError,
                           UnsupportedOpError)


def mlp_model(dynamic=True):
    """x[N,8] @ W[8,16] + b → Relu → @ W2[16,4]: two matmuls so tactic selection has work to do."""
    rng = np.random.default_rng(0)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [8, 16], rng.standard_normal((8, 16)).astype(np.float32).ravel())
    b1 = helper.make_tensor("b1", TensorProto.FLOAT, [16], rng.standard_normal(16).astype(np.float32))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [16, 4], rng.standard_normal((16, 4)).astype(np.float32).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    n = "N" if dynamic else 2
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 4])], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(model, x):
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def build(model, shape=(2, 8), lo=None, hi=None, config=None):
    network = NetworkDefinition()
    parser = OnnxParser(network)
    assert parser.parse(model.SerializeToString()), parser.errors
    config = config or BuilderConfig()
    profile = OptimizationProfile()
    profile.set_shape("x", lo or shape, shape, hi or shape)
    config.add_optimization_profile(profile)
    return Builder().build_serialized_network(network, config)


def test_plan_round_trip_matches_onnxrt_and_records_provenance():
    model = mlp_model()
    plan = build(model, (4, 8), (1, 8), (16, 8))
    engine = Runtime().deserialize_engine(plan)
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    out = engine.create_execution_context().execute({"x": x})["y"]
    np.testing.assert_allclose(out, reference(model, x), rtol=1e-5, atol=1e-5)
    # any shape inside the profile runs
    x9 = np.ones((9, 8), np.float32)
    np.testing.assert_allclose(engine.create_execution_context().execute({"x": x9})["y"], reference(model, x9),
                               rtol=1e-5, atol=1e-5)
    header = engine.header
    assert header["producer"]["name"] == "debugkit"
    assert header["device"]["device"] == "cpu"
    assert header["build_config"]["profiles"] == [{"x": [[1, 8], [4, 8], [16, 8]]}]
    layers = engine.create_engine_inspector().layers()
    assert all(l["TacticValue"] is not None for l in layers)
    sources = {s for l in layers for s in l["SourceNodes"]}
    assert {"fc1", "fc2"} <= sources


def test_tactic_ids_replay_through_algorithm_selector():
    model = mlp_model(dynamic=False)
    first = Runtime().deserialize_engine(build(model))
    chosen = {n.name: (n.tactic_id, n.tactic_name) for n in first.graph.nodes}

    class Replay(AlgorithmSelector):
        def __init__(self):
            self.reported = None

        def select_algorithms(self, context, choices):
            want = chosen.get(context["name"])
            return [i for i, c in enumerate(choices) if want and c["tactic_id"] == want[0]]

        def report_algorithms(self, contexts, choices):
            self.reported = {c["name"]: ch["tactic_id"] for c, ch in zip(contexts, choices)}

    sel = Replay()
    config = BuilderConfig()
    config.algorithm_selector = sel
    second = Runtime().deserialize_engine(build(model, config=config))
    assert {n.name: n.tactic_id for n in second.graph.nodes} == {k: v[0] for k, v in chosen.items()}
    assert sel.reported == {k: v[0] for k, v in chosen.items()}


def test_timing_cache_serializes_and_is_reused():
    model = mlp_model(dynamic=False)
    config = BuilderConfig()
    cache = config.create_timing_cache()
    config.set_timing_cache(cache)
    build(model, config=config)
    data = cache.serialize()
    again = TimingCache.deserialize(data)
    assert again.entries == cache.entries
    config2 = BuilderConfig()
    config2.set_timing_cache(again)
    build(model, config=config2)
    if again.entries:
        assert again.hits >= 1
    with pytest.raises(PlanError, match="timing cache"):
        TimingCache.deserialize(b"garbage")


def test_several_contexts_share_one_engine():
    model = mlp_model()
    engine = Runtime().deserialize_engine(build(model, (2, 8), (1, 8), (8, 8)))
    a, b = engine.create_execution_context(), engine.create_execution_context()
    xa, xb = np.ones((2, 8), np.float32), np.full((5, 8), 2.0, np.float32)
    assert a.set_input_shape("x", (2, 8)) and b.set_input_shape("x", (5, 8))
    np.testing.assert_allclose(a.execute({"x": xa})["y"], reference(model, xa), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.execute({"x": xb})["y"], reference(model, xb), rtol=1e-5, atol=1e-5)


def test_taps_return_intermediate_tensors_by_onnx_name():
    model = mlp_model(dynamic=False)
    engine = Runtime().deserialize_engine(build(model))
    x = np.ones((2, 8), np.float32)
    out = engine.create_execution_context().execute({"x": x}, taps=["r"])
    assert "r" in out and out["r"].shape == (2, 16)
    assert np.all(out["r"] >= 0)


def test_backend_runs_outputs_in_graph_order():
    model = mlp_model(dynamic=False)
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    out = Backend.prepare(model).run([x])
    assert len(out) == 1
    np.testing.assert_allclose(out[0], reference(model, x), rtol=1e-5, atol=1e-5)


# ---- bad input ----------------------------------------------------------------------------------------

def test_missing_model_file(tmp_path):
    with pytest.raises(InputFileError, match="nope.onnx"):
        build_plan_from_onnx(str(tmp_path / "nope.onnx"))


def test_file_that_is_not_onnx(tmp_path):
    p = tmp_path / "notes.onnx"
    p.write_bytes(b"this is a text file, not a protobuf \xff\xfe")
    with pytest.raises(ModelError, match="notes.onnx"):
        build_plan_from_onnx(str(p))


def test_unknown_op_is_named():
    g = helper.make_graph([helper.make_node("FrobnicateXYZ", ["x"], ["y"], name="weird_node")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    network = NetworkDefinition()
    parser = OnnxParser(network)
    assert not parser.parse(model)
    assert parser.errors[0].node == "weird_node" and parser.errors[0].op_type == "FrobnicateXYZ"
    with pytest.raises(UnsupportedOpError, match="FrobnicateXYZ"):
        build_plan_from_onnx(model)


def test_feed_of_wrong_dtype_is_named():
    ctx = Runtime().deserialize_engine(build(mlp_model(dynamic=False))).create_execution_context()
    with pytest.raises(FeedError, match="'x'.*float32.*float64"):
        ctx.execute({"x": np.ones((2, 8), np.float64)})
    with pytest.raises(FeedError, match="unknown input"):
        ctx.execute({"x": np.ones((2, 8), np.float32), "z": np.ones(1)})


def test_shape_outside_profile_is_named():
    ctx = Runtime().deserialize_engine(build(mlp_model(), (2, 8), (1, 8), (4, 8))).create_execution_context()
    with pytest.raises(ShapeError, match=r"'x'.*\[5, 8\].*min=\[1, 8\] max=\[4, 8\]"):
        ctx.execute({"x": np.ones((5, 8), np.float32)})
    with pytest.raises(ShapeError, match="'x'"):
        ctx.set_input_shape("x", (2, 9))


@pytest.mark.parametrize("damage, message", [
    (lambda p: p[: len(p) // 2], "truncated"),
    (lambda p: p[:40], "truncated"),
    (lambda p: p[:-1] + bytes([p[-1] ^ 0xFF]), "corrupted"),
    (lambda p: p[:60] + bytes([p[60] ^ 0x01]) + p[61:], "corrupted"),
    (lambda p: b"PK\x03\x04" + p[4:], "not a debugkit plan"),
    (lambda p: p[:8] + (FORMAT_VERSION + 7).to_bytes(4, "little") + p[12:], "format version"),
])
def test_damaged_plans_fail_with_the_reason(damage, message):
    plan = build(mlp_model(dynamic=False))
    with pytest.raises(PlanError, match=message):
        Runtime().deserialize_engine(damage(plan))


def test_plan_file_not_found(tmp_path):
    with pytest.raises(InputFileError, match="missing.plan"):
        Runtime().deserialize_engine(str(tmp_path / "missing.plan"))


def test_errors_share_one_root():
    for cls in (InputFileError, ModelError, PlanError, ShapeError, FeedError, UnsupportedOpError):
        assert issubclass(cls, DebugkitError)


def test_profile_naming_unknown_input_fails():
    network = NetworkDefinition()
    OnnxParser(network).parse(mlp_model())
    config = BuilderConfig()
    p = OptimizationProfile()
    p.set_shape("not_an_input", (1, 8), (2, 8), (4, 8))
    config.add_optimization_profile(p)
    from native.errors import BuildError
    with pytest.raises(BuildError, match="not_an_input"):
        Builder().build_serialized_network(network, config)


def test_external_data_and_unused_domains_are_handled(tmp_path):
    """Weights stored beside the model (external data) load; an imported-but-unused domain is tolerated."""
    model = mlp_model(dynamic=False)
    model.opset_import.append(helper.make_opsetid("com.example.unused", 1))
    from onnx import numpy_helper  # external data needs raw_data tensors
    for i, init in enumerate(model.graph.initializer):
        model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init), init.name))
    path = tmp_path / "mlp.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mlp.weights", size_threshold=0)
    assert (tmp_path / "mlp.weights").exists()
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    ctx = Runtime().deserialize_engine(build_plan_from_onnx(str(path))).create_execution_context()
    np.testing.assert_allclose(ctx.execute({"x": x})["y"], reference(onnx.load(str(path)), x), rtol=1e-5, atol=1e-5)


def test_dynamic_dims_keep_their_names_and_profile_ranges_run():
    network = NetworkDefinition()
    assert OnnxParser(network).parse(mlp_model())
    x = network.get_input(0)
    assert x.shape == (-1, 8) and x.get_dimension_name(0) == "N"


def test_weights_that_become_constant_by_folding_are_prepacked():
    """A Conv whose weight arrives through an Identity (as timm exports it) still gets build-time packed weights."""
    rng = np.random.default_rng(7)
    w = numpy_helper_from(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["w_shared"], name="share"),
                           helper.make_node("Conv", ["x", "w_shared"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = Runtime().deserialize_engine(build_plan_from_onnx(model))
    (conv,) = [n for n in engine.graph.nodes if n.kind == "Convolution"]
    assert conv.inputs == ["x"] and not [n for n in engine.graph.nodes if n.kind == "Constant"]
    assert "kernel" not in conv.weights and len(conv.weights) >= 1      # packed form, chosen by the tactic
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    import onnxruntime as ort
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # timing may pick Winograd F(4x4,3x3), whose transforms round ~10x more than a GEMM (tests/native/test_tactic_numerics)
    np.testing.assert_allclose(engine.create_execution_context().execute({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)


def numpy_helper_from(array, name):
    from onnx import numpy_helper
    return numpy_helper.from_array(array, name)


@pytest.mark.parametrize("fp16,device", [(False, "cpu"), (True, "cpu"),
                                         pytest.param(True, "cuda", marks=pytest.mark.cuda)])
def test_engine_from_graph_runs_as_the_plan_does(fp16, device):
    """Runtime.engine_from_graph (a search's probes: no plan bytes) gives the plan's engine bit for bit, with the
    plan's header fields an engine reads (on the GPU too: its plan extras travel in the header)."""
    from backends.engine import BuilderFlag
    from backends.engine.plan import serialize_plan
    model = mlp_model()
    network = NetworkDefinition()
    parser = OnnxParser(network)
    assert parser.parse(model.SerializeToString()), parser.errors
    config = BuilderConfig()
    config.device = device
    if fp16:
        config.set_flag(BuilderFlag.FP16)
    profile = OptimizationProfile()
    profile.set_shape("x", (1, 8), (4, 8), (16, 8))
    config.add_optimization_profile(profile)
    graph = Builder().build_graph(network, config)
    from_plan = Runtime().deserialize_engine(serialize_plan(graph, config))
    direct = Runtime().engine_from_graph(graph, config)
    for shape in ((4, 8), (9, 8)):
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        a = from_plan.create_execution_context().execute({"x": x})["y"]
        b = direct.create_execution_context().execute({"x": x})["y"]
        assert a.dtype == b.dtype
        if device == "cpu":
            assert a.tobytes() == b.tobytes()
        else:   # the same kernels; GPU libraries need not be bitwise reproducible run to run
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
    assert {k: direct.header[k] for k in ("producer", "device", "build_config")} == \
        {k: from_plan.header[k] for k in ("producer", "device", "build_config")}
    assert [p.shapes for p in direct.profiles] == [p.shapes for p in from_plan.profiles]
