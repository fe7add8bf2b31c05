"""Shape folding: with fixed profiles, Shape layers and the shape arithmetic behind them become constants; with
ranges, or behind data-dependent shapes (NonZero), they stay and the engine still computes them at run time."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.engine.build import build_plan_from_onnx
from backends.engine.runtime import Runtime


def _reshape_model():
    """y = reshape(x, [shape(x)[0], -1]) + 1 through Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["dims"], axis=0),
        helper.make_node("Reshape", ["x", "dims"], ["r"]),
        helper.make_node("Add", ["r", "one"], ["y"]),
    ]
    inits = [helper.make_tensor("i0", TensorProto.INT64, [], [0]),
             helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
             helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    g = helper.make_graph(nodes, "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _nonzero_model():
    """Shape of NonZero's output (data-dependent) and of x (static), both as outputs."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["nz_shape"]),
             helper.make_node("Shape", ["x"], ["x_shape"])]
    g = helper.make_graph(nodes, "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("nz_shape", TensorProto.INT64, None),
                           helper.make_tensor_value_info("x_shape", TensorProto.INT64, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _engine(model, **kw):
    return Runtime().deserialize_engine(build_plan_from_onnx(model, **kw))


def _kinds(engine):
    return [n.kind for n in engine.graph.nodes]


def test_fixed_profile_folds_shape_chain():
    eng = _engine(_reshape_model(), shapes={"x": (2, 3, 4)})
    kinds = _kinds(eng)
    assert "Shape" not in kinds and "Gather" not in kinds and "Concatenation" not in kinds
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = eng.create_execution_context().execute({"x": x})["y"]
    np.testing.assert_array_equal(y, x.reshape(2, 12) + 1)


def test_range_profile_keeps_shape_layers():
    eng = _engine(_reshape_model(), ranges={"x": ((1, 3, 4), (2, 3, 4), (4, 3, 4))})
    assert "Shape" in _kinds(eng)
    ctx = eng.create_execution_context()
    for n in (1, 3, 4):
        x = np.random.default_rng(n).standard_normal((n, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(ctx.execute({"x": x})["y"], x.reshape(n, 12) + 1, rtol=1e-6)


def test_data_dependent_shape_is_not_folded():
    eng = _engine(_nonzero_model(), shapes={"x": (2, 4)})
    shape_inputs = [n.inputs[0] for n in eng.graph.nodes if n.kind == "Shape"]
    assert shape_inputs == ["nz"]  # Shape(x) folded, Shape(NonZero(x)) kept
    ctx = eng.create_execution_context()
    for count in (0, 3, 8):
        x = np.zeros(8, np.float32)
        x[:count] = 1
        out = ctx.execute({"x": x.reshape(2, 4)})
        np.testing.assert_array_equal(out["nz_shape"], [2, count])
        np.testing.assert_array_equal(out["x_shape"], [2, 4])


def test_shape_static_propagation_rules():
    """Reshape whose dims come from data is not shape-static; one whose dims are constants is."""
    from backends.engine.builder.passes.shape_fold import shape_static_tensors
    from backends.engine.engine_graph import Graph, Node, TensorInfo
    g = Graph(inputs=[TensorInfo("x", "float32", [2, 6]), TensorInfo("d", "int64", [2])])
    g.set_nodes([Node("c", "Constant", [], ["dims"], weights={"value": np.array([3, 4])}),
               Node("r1", "Shuffle", ["x", "dims"], ["a"]),
               Node("r2", "Shuffle", ["x", "d"], ["b"]),
               Node("s", "Shape", ["a"], ["sa"]),
               Node("nz", "NonZero", ["x"], ["z"]),
               Node("add", "ElementWise", ["a", "a"], ["e"], params={"op": "SUM"})])
    static = shape_static_tensors(g, {"x": (2, 6), "d": (2,)})
    assert {"a", "sa", "e"} <= static
    assert "b" not in static and "z" not in static


@pytest.mark.parametrize("flag", ["disable_constant_folding"])
def test_folding_respects_disable_flag(flag):
    eng = _engine(_reshape_model(), shapes={"x": (2, 3, 4)}, flags=[flag])
    assert "Shape" in _kinds(eng)


def _gemm_block_model():
    """Gemm-style block with fixed shapes: reshape [N,4,8] → [-1,8] (dims from Shape), MatMul + bias, reshape back;
    and three projections of x (Q, K, V) summed."""
    rng = np.random.default_rng(0)
    w = {k: rng.standard_normal(s).astype(np.float32) for k, s in
         (("w1", (8, 16)), ("b1", (16,)), ("wq", (8, 6)), ("wk", (8, 6)), ("wv", (8, 6)))}
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i01"], ["lead"], axis=0),
        helper.make_node("Concat", ["lead", "c16"], ["back"], axis=0),
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("MatMul", ["x2", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Reshape", ["hb", "back"], ["y"]),
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Sum", ["q", "k", "v"], ["z"]),
    ]
    inits = [helper.make_tensor("i01", TensorProto.INT64, [2], [0, 1]),
             helper.make_tensor("c16", TensorProto.INT64, [1], [16]),
             helper.make_tensor("flat", TensorProto.INT64, [2], [-1, 8])]
    inits += [onnx.numpy_helper.from_array(v, k) for k, v in w.items()]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), w


def test_fixed_shapes_let_gemm_fusions_apply():
    model, w = _gemm_block_model()
    eng = _engine(model, shapes={"x": (2, 4, 8)})
    kinds = _kinds(eng)
    assert "Shape" not in kinds and "Shuffle" not in kinds      # reshapes around the GEMM removed
    assert kinds.count("MatrixMultiply") == 2                    # Q, K, V share one GEMM
    x = np.random.default_rng(1).standard_normal((2, 4, 8)).astype(np.float32)
    out = eng.create_execution_context().execute({"x": x})
    np.testing.assert_allclose(out["y"], x @ w["w1"] + w["b1"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["z"], x @ w["wq"] + x @ w["wk"] + x @ w["wv"], rtol=1e-5, atol=1e-5)


def test_a_rebuild_of_the_same_network_reuses_the_observed_shapes(monkeypatch):
    """Builds from one NetworkDefinition (a search's probes) run the graph for shape folding once: the second
    build takes the observed shapes from the network's memo and folds exactly as the first; another profile runs
    it again."""
    from backends.engine import BuilderConfig, OptimizationProfile, parse_onnx
    from backends.engine.builder import Builder
    from backends.engine.builder.passes import shape_fold
    runs = []
    real = shape_fold.observed_shapes
    monkeypatch.setattr(shape_fold, "observed_shapes", lambda *a, **k: runs.append(1) or real(*a, **k))
    net, _ = parse_onnx(_reshape_model())

    def build(n):
        cfg = BuilderConfig()
        p = OptimizationProfile()
        p.set_shape("x", (n, 3, 4), (n, 3, 4), (n, 3, 4))
        cfg.add_optimization_profile(p)
        g = Builder().build_graph(net, cfg)
        return [(x.kind, x.inputs, x.outputs) for x in g.nodes]
    first = build(2)
    assert len(runs) == 1 and "Shape" not in [k for k, _, _ in first]
    assert build(2) == first and len(runs) == 1
    build(5)
    assert len(runs) == 2
