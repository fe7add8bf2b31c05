"""If / Loop bodies are optimised like the main graph: an If whose condition folds to a constant runs its taken
branch inline (passes/inline_if.py), bodies see the enclosing graph's constants and the types ONNX shape inference
gives their tensors, so folding and the fusions work inside them (passes/fold.py constants_into_bodies)."""
import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.build import build_plan_from_onnx
from backends.engine.builder import Builder
from backends.engine.plan import _BlobWriter
from backends.engine.runtime import Runtime

RNG = np.random.default_rng(0)
OPSET = [h.make_opsetid("", 17)]


def _rank_branch_model():
    """y = (rank-3 test: dim 0 of x == 2) ? Unsqueeze(x, 0) * 2 : Unsqueeze(x, 0) * 3, exported the way PyTorch
    writes shape checks: Shape -> Gather -> Equal -> If; the then-branch holds a nested If on a constant."""
    inner_then = h.make_graph([h.make_node("Mul", ["u", "two"], ["it_y"])], "inner_then", [],
                              [h.make_tensor_value_info("it_y", T.FLOAT, None)])
    inner_else = h.make_graph([h.make_node("Mul", ["u", "three"], ["ie_y"])], "inner_else", [],
                              [h.make_tensor_value_info("ie_y", T.FLOAT, None)])
    then = h.make_graph([h.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
                         h.make_node("If", ["flag"], ["t_y"], then_branch=inner_then, else_branch=inner_else)],
                        "then", [], [h.make_tensor_value_info("t_y", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Unsqueeze", ["x", "ax0"], ["e_u"]), h.make_node("Mul", ["e_u", "three"],
                                                                                         ["e_y"])],
                         "else", [], [h.make_tensor_value_info("e_y", T.FLOAT, None)])
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             h.make_node("Equal", ["d0", "two_i"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    inits = [nh.from_array(np.array(0, np.int64), "i0"), nh.from_array(np.array(2, np.int64), "two_i"),
             nh.from_array(np.array([0], np.int64), "ax0"), nh.from_array(np.array(True), "flag"),
             nh.from_array(np.array(2, np.float32), "two"), nh.from_array(np.array(3, np.float32), "three")]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=OPSET).SerializeToString()


def _kinds(graph):
    return [n.kind for n in graph.nodes]


def test_if_on_a_folded_shape_runs_its_branch_inline():
    eng = Runtime().deserialize_engine(build_plan_from_onnx(_rank_branch_model(), shapes={"x": (2, 4)}))
    assert "If" not in _kinds(eng.graph)                        # both Ifs: the outer by shape, the inner by constant
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(eng.create_execution_context().execute({"x": x})["y"], x[None] * 2)
    eng3 = Runtime().deserialize_engine(build_plan_from_onnx(_rank_branch_model(), shapes={"x": (3, 4)}))
    assert "If" not in _kinds(eng3.graph)                       # the else branch, inline
    x3 = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(eng3.create_execution_context().execute({"x": x3})["y"], x3[None] * 3)


def test_if_with_shape_ranges_stays_and_decides_per_run():
    eng = Runtime().deserialize_engine(build_plan_from_onnx(
        _rank_branch_model(), ranges={"x": ((1, 4), (2, 4), (3, 4))}))
    (outer,) = [n for n in eng.graph.nodes if n.kind == "If"]
    # the nested If's condition is an initializer: folded away inside the branch even though shapes vary
    assert "If" not in _kinds(outer.subgraphs["then"])
    ctx = eng.create_execution_context()
    for n, k in ((2, 2), (3, 3), (1, 3)):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(ctx.execute({"x": x})["y"], x[None] * k)


def _layernorm_branch_model():
    """y = (c) ? relu(LayerNorm(x) * gamma + beta) : x, LayerNorm written out as ReduceMean / Sub / Pow / ... and
    gamma / beta initializers of the main graph (as openWakeWord's verifier branch reads them)."""
    nodes = [h.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), h.make_node("Sub", ["x", "m"], ["d"]),
             h.make_node("Pow", ["d", "p2"], ["d2"]), h.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             h.make_node("Add", ["v", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["sd"]),
             h.make_node("Div", ["d", "sd"], ["n"]), h.make_node("Mul", ["n", "gamma"], ["g"]),
             h.make_node("Add", ["g", "beta"], ["b"]), h.make_node("Relu", ["b"], ["t_y"])]
    then = h.make_graph(nodes, "then", [], [h.make_tensor_value_info("t_y", T.FLOAT, None)],
                        [nh.from_array(np.array(2, np.float32), "p2"), nh.from_array(np.array(1e-5, np.float32), "eps")])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e_y"])], "else", [],
                         [h.make_tensor_value_info("e_y", T.FLOAT, None)])
    gamma = RNG.standard_normal(16).astype(np.float32)
    beta = RNG.standard_normal(16).astype(np.float32)
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "m",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 16]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(gamma, "gamma"), nh.from_array(beta, "beta")])
    return h.make_model(g, opset_imports=OPSET), gamma, beta


def test_body_sees_outer_constants_and_inferred_types_so_layernorm_fuses():
    model, gamma, beta = _layernorm_branch_model()
    net, _ = parse_onnx(model.SerializeToString())
    (layer,) = [l for l in net.layers if l.kind == "If"]
    d = layer.subgraphs["then"].tensors["d"]       # a body tensor: typed by ONNX shape inference
    assert d.dtype.value == "float32" and list(d.shape) == [2, 16]
    feeds = {"x": RNG.standard_normal((2, 16)).astype(np.float32), "c": np.array(True)}
    config = BuilderConfig()
    config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
    graph = Builder().build_graph(net, config, timing_feeds=feeds)
    (if_node,) = [n for n in graph.nodes if n.kind == "If"]
    body = if_node.subgraphs["then"]
    (norm,) = [n for n in body.nodes if n.kind != "Constant"]   # the Relu too: fusion_epilogue.fuse_norm_activation
    assert norm.kind == "Normalization" and [s["type"] for s in norm.params["post_ops"]] == ["RELU"]
    assert not [n for n in graph.nodes if n.kind == "Constant"]   # gamma / beta live in the body now
    assert not body.outer_references() - {"x"}
    ctx = Runtime().engine_from_graph(graph, config).create_execution_context()
    x = feeds["x"]
    mu = x.mean(-1, keepdims=True)
    ref = np.maximum((x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * gamma + beta, 0)
    np.testing.assert_allclose(ctx.execute({"x": x, "c": np.array(True)})["y"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ctx.execute({"x": x, "c": np.array(False)})["y"], x)


def test_plan_stores_a_shared_array_once():
    blob = _BlobWriter()
    w = np.arange(1000, dtype=np.float32)
    a, b = blob.add(w), blob.add(w)
    assert a == b and blob.size == w.nbytes
    # equal bytes in another array (the same initializer parsed twice: which happens depends on the onnx/numpy
    # releases; onnx 1.21 + numpy 2.0 gave the two bodies of the test below two arrays): stored once too
    assert blob.add(w.copy()) == a and blob.size == w.nbytes
    c = blob.add(w + 1)                             # other values: stored again
    assert c["offset"] >= w.nbytes and blob.size > 2 * w.nbytes - 64
    assert blob.add(w.reshape(10, 100))["offset"] not in (a["offset"], c["offset"])   # another shape: its own
    d = blob.add(w.view(np.int32))                  # the same bytes as another dtype: its own entry
    assert d["dtype"] == "int32" and d["offset"] not in (a["offset"], c["offset"])


def test_loop_body_gets_the_constants_it_reads_and_the_plan_stores_them_once():
    """A Loop body and both If branches reading one initializer each get a Constant of their own, all holding the
    same array, which the plan file stores once; the loop still computes x @ W^n."""
    w = (RNG.standard_normal((256, 256)) / 32).astype(np.float32)
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("MatMul", ["x_in", "W"], ["x_mm"]),
         h.make_node("Add", ["x_mm", "bias"], ["x_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("x_in", T.FLOAT, [4, 256])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [4, 256])])
    then = h.make_graph([h.make_node("MatMul", ["y", "W"], ["t_y"])], "then", [],
                        [h.make_tensor_value_info("t_y", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Sub", ["y", "bias"], ["e_y"])], "else", [],
                         [h.make_tensor_value_info("e_y", T.FLOAT, None)])
    g = h.make_graph([h.make_node("Loop", ["n", "", "x"], ["y"], body=body),
                      h.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)], "m",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 256]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("z", T.FLOAT, None)],
                     [nh.from_array(w, "W"), nh.from_array(np.array(3, np.int64), "n"),
                      nh.from_array(np.full(256, 0.5, np.float32), "bias")])
    model = h.make_model(g, opset_imports=OPSET).SerializeToString()
    # tactics without timing: a timed build may give the two MatMuls tactics that keep W in different layouts
    # (then the plan rightly holds two arrays; seen on a fresh venv without numba)
    plan = build_plan_from_onnx(model, shapes={"x": (4, 256), "c": ()}, flags=("enable_tactic_heuristic",))
    eng = Runtime().deserialize_engine(plan)
    loop, cond = [n for n in eng.graph.nodes if n.kind in ("Loop", "If")]
    assert not loop.subgraphs["body"].outer_references() & {"W", "bias"}   # its own constants (or absorbed)
    assert not cond.subgraphs["then"].outer_references() & {"W"}
    assert not cond.subgraphs["else"].outer_references() & {"bias"}
    assert not [n for n in eng.graph.nodes if n.kind == "Constant" and n.outputs[0] in ("W", "bias")]
    assert len(plan) < 1.5 * w.nbytes   # W once, though two bodies hold it
    ctx = eng.create_execution_context()
    x = RNG.standard_normal((4, 256)).astype(np.float32)
    y = x
    for _ in range(3):
        y = y @ w + np.float32(0.5)
    for c in (True, False):
        out = ctx.execute({"x": x, "c": np.array(c)})["z"]
        np.testing.assert_allclose(out, y @ w if c else y - np.float32(0.5), rtol=1e-5, atol=1e-5)
