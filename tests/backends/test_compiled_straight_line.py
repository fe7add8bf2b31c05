"""The compiled plan's straight-line function (runtime/compiled.py `straight_line`): from a plan's third plain run
on, its layers run as generated straight-line code; the results stay bit-identical to the general loop (arena on,
taps, If bodies reading outer tensors), a failing layer is still named, and a profiled run keeps the loop."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.runtime.profiler import LayerProfiler
from native.errors import ExecutionError
from tests.backends.test_arena import block_model


def _x(seed):
    return np.random.default_rng(seed).standard_normal((2, 32, 16, 16)).astype(np.float32)


def _plans(ctx):
    return list(ctx.arenas.compiled.values())


def test_straight_line_runs_match_the_general_loop_bit_for_bit():
    engine = Runtime().deserialize_engine(build_plan_from_onnx(block_model().SerializeToString()))
    ctx = engine.create_execution_context()
    taps = [n for n in engine.tensor_names() if n != "x"][:3]
    for seed in range(1, 8):
        for keep in ((), taps):
            out = ctx.execute({"x": _x(seed)}, taps=list(keep))
            ref = engine.executor._run_general({"x": _x(seed)}, keep=set(keep))
            for name, value in out.items():
                np.testing.assert_array_equal(value, ref[engine.graph.aliases.get(name, name)])
    assert all(callable(p.fast) for p in _plans(ctx)), "plain runs past the third take the straight line"


def _if_model():
    """y = If(c > 0): then x * w + x (reads the outer x and w) else -x."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5, 1.5, -2.0, 3.0])
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t0"]), helper.make_node("Add", ["t0", "x"], ["t1"])],
        "then", [], [helper.make_tensor_value_info("t1", TensorProto.FLOAT, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"])], "else", [],
                               [helper.make_tensor_value_info("e0", TensorProto.FLOAT, [2, 4])])
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                       helper.make_tensor_value_info("c", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w, zero])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_if_bodies_reading_outer_tensors_take_either_branch():
    engine = Runtime().deserialize_engine(build_plan_from_onnx(_if_model().SerializeToString()))
    ctx = engine.create_execution_context()
    w = np.array([0.5, 1.5, -2.0, 3.0], np.float32)
    for i in range(8):
        x = np.random.default_rng(i).standard_normal((2, 4)).astype(np.float32)
        c = np.float32(1.0 if i % 3 else -1.0)
        y = ctx.execute({"x": x, "c": c})["y"]
        np.testing.assert_array_equal(y, x * w + x if c > 0 else -x)
    assert any(callable(p.fast) for p in _plans(ctx))


def test_a_failing_layer_is_named_and_a_profiled_run_keeps_the_loop():
    data = helper.make_tensor("d", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    g = helper.make_graph([helper.make_node("Gather", ["d", "i"], ["g"], name="pick"),
                           helper.make_node("Relu", ["g"], ["y"], name="relu")], "m",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [data])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    engine = Runtime().deserialize_engine(build_plan_from_onnx(m.SerializeToString()))
    ctx = engine.create_execution_context()
    for _ in range(5):
        np.testing.assert_array_equal(ctx.execute({"i": np.array([2, 0])})["y"], [[5, 6], [1, 2]])
    assert any(callable(p.fast) for p in _plans(ctx))
    with pytest.raises(ExecutionError, match="pick"):
        ctx.execute({"i": np.array([7, 0])})
    ctx.profiler = LayerProfiler()   # the profiler times each layer: the loop runs, not the straight line
    np.testing.assert_array_equal(ctx.execute({"i": np.array([1, 0])})["y"], [[3, 4], [1, 2]])
    assert [r["layer"] for r in ctx.profiler.summary()] == ["pick", "relu"]
