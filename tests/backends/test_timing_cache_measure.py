"""The timing cache answers what it holds: a rebuild times nothing, a candidate the cache lacks is timed alone, and
cached timings come back with the new ones (tactic_selection.measure)."""
import numpy as np
import onnx
from onnx import TensorProto, helper

from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx
from backends.engine.builder import Builder, TimingCache, tactic_selection
from backends.engine.engine_graph import node_op
from native.tactics import LayerContext, accepting, tactics_for


def _matmul_node(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    w = onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    graph = Builder().build_graph(net, BuilderConfig(), timing_feeds={"x": np.ones((2, 8), np.float32)})
    return next(n for n in graph.nodes if n.kind == "MatrixMultiply")


def test_measure_times_only_what_the_cache_lacks(tmp_path, monkeypatch):
    node = _matmul_node(tmp_path)
    cands = [t for t in tactics_for(node.kind, "cpu")
             if accepting([t], node_op(node), LayerContext([[2, 8]], ["float32"]))[0]][:3]
    assert len(cands) >= 2, [t.name for t in tactics_for(node.kind, "cpu")]
    asked = []

    def fake(node_, todo, inputs, *a, **k):
        asked.append([t.name for t in todo])
        return {t.id: 1.0 + i for i, t in enumerate(todo)}
    monkeypatch.setattr(tactic_selection, "time_candidates", fake)
    x = [np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)]
    cache, config = TimingCache(), BuilderConfig()
    first = tactic_selection.measure(node, cands[:1], x, config, "cpu", cache)
    assert asked == [[cands[0].name]] and first == {cands[0].id: 1.0}
    both = tactic_selection.measure(node, cands, x, config, "cpu", cache)   # one new candidate: timed alone
    assert asked[1] == [t.name for t in cands[1:]]
    assert both[cands[0].id] == 1.0 and set(both) == {t.id for t in cands}
    again = tactic_selection.measure(node, cands, x, config, "cpu", cache)  # everything cached: nothing timed
    assert len(asked) == 2 and again == both


def test_a_tactic_the_device_withdraws_while_timed_is_not_chosen(tmp_path, monkeypatch):
    """A cuDNN compile class that turns slow in the middle of a build withholds the plans it built, the one timed
    fastest too (cudnn_conv.slow_compiles): the build chooses among what is still offered after timing, so a
    rebuild with its timing cache, which offers the same, makes the same choice and times nothing."""
    withdrawn, asked = set(), []
    real = tactic_selection.enumerate_candidates

    def offered(*a, **k):
        found = real(*a, **k)
        found.ok = [t for t in found.ok if t.name not in withdrawn]
        return found

    def fake(node_, todo, inputs, *a, **k):
        asked.append([t.name for t in todo])
        withdrawn.add(todo[0].name)          # the fastest stops being offered once timed
        return {t.id: 1.0 + i for i, t in enumerate(todo)}
    monkeypatch.setattr(tactic_selection, "enumerate_candidates", offered)
    monkeypatch.setattr(tactic_selection, "time_candidates", fake)
    cache = TimingCache()
    chosen = []
    for _ in range(2):
        config = BuilderConfig()
        config.timing_cache = cache
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
        w = onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
        net, _ = parse_onnx(str(tmp_path / "m.onnx"))
        graph = Builder().build_graph(net, config, timing_feeds={"x": np.ones((2, 8), np.float32)})
        chosen.append(next(n for n in graph.nodes if n.kind == "MatrixMultiply").tactic_name)
    assert len(asked) == 1 and len(asked[0]) >= 2, asked     # timed once, in the first build
    assert chosen[0] == chosen[1] == asked[0][1], (chosen, asked)
