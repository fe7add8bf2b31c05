"""If / Loop bodies' layers get their tactics by timing, like the top-level ones (the timing run records each body's
tensors: GraphExecutor(record_bodies=True).body_envs()); a branch the timing run did not take keeps default choices."""
import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from backends.engine import BuilderConfig, parse_onnx
from backends.engine.builder import Builder
from backends.engine.runtime.executor import GraphExecutor

RNG = np.random.default_rng(0)


def _conv_branch(name, w):
    conv = h.make_node("Conv", ["x", f"{name}_w"], [f"{name}_y"], kernel_shape=[3], pads=[1, 1])
    return h.make_graph([conv], name, [], [h.make_tensor_value_info(f"{name}_y", T.FLOAT, None)],
                        [nh.from_array(w, f"{name}_w")])


def _model():
    w = RNG.standard_normal((8, 4, 3)).astype(np.float32)
    node = h.make_node("If", ["c"], ["y"], then_branch=_conv_branch("then", w), else_branch=_conv_branch("else", -w))
    g = h.make_graph([node], "m", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16]),
                                   h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), w


def _conv1d(x, w):
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1)])
    return np.stack([np.einsum("nck,mck->nm", xp[:, :, i:i + 3], w) for i in range(x.shape[2])], axis=-1)


def test_taken_branch_is_timed_other_keeps_defaults():
    model, w = _model()
    net, _ = parse_onnx(model.SerializeToString())
    feeds = {"x": RNG.standard_normal((1, 4, 16)).astype(np.float32), "c": np.array(True)}
    graph = Builder().build_graph(net, BuilderConfig(), timing_feeds=feeds)
    (if_node,) = [n for n in graph.nodes if n.kind == "If"]
    then_conv = [n for n in if_node.subgraphs["then"].nodes if n.kind == "Convolution"][0]
    else_conv = [n for n in if_node.subgraphs["else"].nodes if n.kind == "Convolution"][0]
    timed = then_conv.meta.get("timings_ms") or {}
    assert {"im2col-gemm", "conv1d-gemm"} <= set(timed), timed   # both 1-D tactics timed on the branch's values
    assert then_conv.tactic_name in timed
    assert "timings_ms" not in else_conv.meta and else_conv.tactic_id is not None   # not run: the default
    ex = GraphExecutor(graph)
    for cond, sign in ((True, 1), (False, -1)):
        out = ex.run({"x": feeds["x"], "c": np.array(cond)})["y"]
        np.testing.assert_allclose(out, _conv1d(feeds["x"], sign * w), rtol=1e-5, atol=1e-5)


def test_body_envs_hold_the_taken_branch_tensors():
    model, _ = _model()
    net, _ = parse_onnx(model.SerializeToString())
    from backends.engine.builder.lower import lower
    graph = lower(net)
    ex = GraphExecutor(graph, keep_all=True, record_bodies=True)
    x = RNG.standard_normal((1, 4, 16)).astype(np.float32)
    ex.run({"x": x, "c": np.array(False)})
    envs = ex.body_envs()
    (if_node,) = [n for n in graph.nodes if n.kind == "If"]
    assert set(envs) == {id(if_node.subgraphs["else"])}
    body = envs[id(if_node.subgraphs["else"])]
    assert body["x"] is x and body["else_y"].shape == (1, 8, 16)   # outer-scope reads included
    assert GraphExecutor(graph, keep_all=True).body_envs() == {}   # off unless asked


def test_loop_body_is_timed_on_its_last_iteration():
    """A Loop body's layers are timed too (on its last iteration's tensors), and the loop computes x @ W^n."""
    w = (RNG.standard_normal((8, 8)) / 4).astype(np.float32)
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("MatMul", ["x_in", "W"], ["x_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("x_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, None)],
        [nh.from_array(w, "W")])
    loop = h.make_node("Loop", ["n", "c", "x"], ["y"], body=body)
    g = h.make_graph([loop], "m", [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.array(5, np.int64), "n"), nh.from_array(np.array(True), "c")])
    net, _ = parse_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    graph = Builder().build_graph(net, BuilderConfig(), timing_feeds={"x": x})
    (lp,) = [n for n in graph.nodes if n.kind == "Loop"]
    (mm,) = [n for n in lp.subgraphs["body"].nodes if n.kind == "MatrixMultiply"]
    assert len(mm.meta.get("timings_ms") or {}) > 1 and mm.tactic_name in mm.meta["timings_ms"]
    y = GraphExecutor(graph).run({"x": x})["y"]
    np.testing.assert_allclose(y, x @ np.linalg.matrix_power(w.astype(np.float64), 5), rtol=1e-4, atol=1e-5)
