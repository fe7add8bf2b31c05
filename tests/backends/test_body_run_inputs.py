"""Bodies called by position (executor.run_list -> CompiledPlan.run_inputs, then its positional function): once a
body's plan has its straight-line function, an If branch or a Loop step runs it without the feeds / outputs dicts.
Results stay bit-identical to the general loop's, outer tensors are read from the enclosing scope, and a body that
cannot take that way (an outer tensor missing) still falls back to the path that names what is missing."""
import numpy as np
from onnx import TensorProto, helper

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.runtime import compiled as compiled_mod
from native.errors import ExecutionError
from tests.backends.test_compiled_straight_line import _if_model


def _loop_model():
    """A Loop of `n` steps: s <- s * w + x (x and w read from outside the body), scanning s at every step."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [0.5, -1.25, 0.75])
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "w"], ["sw"]), helper.make_node("Add", ["sw", "x"], ["s_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["s_out"], ["scan"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [3])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "s0"], ["s_final", "scans"], body=body)], "m",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("s0", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("s_final", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, [None, 3])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(n, s0, x):
    w = np.array([0.5, -1.25, 0.75], np.float32)
    s, scans = s0, []
    for _ in range(n):
        s = s * w + x
        scans.append(s)
    return s, np.stack(scans)


def test_loop_steps_run_by_position_bit_for_bit(monkeypatch):
    calls = []
    real = compiled_mod.straight_line

    def spy(cp, positional=False):   # count the steps the body's positional function runs
        fn = real(cp, positional)
        if not positional or not fn:
            return fn

        def counted(inputs, env, workspace):
            out = fn(inputs, env, workspace)
            calls.append(out is not None)
            return out
        return counted
    monkeypatch.setattr(compiled_mod, "straight_line", spy)
    engine = Runtime().deserialize_engine(build_plan_from_onnx(_loop_model().SerializeToString()))
    ctx = engine.create_execution_context()
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 12):
        s0, x = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
        out = ctx.execute({"n": np.array(n, np.int64), "s0": s0, "x": x})
        s, scans = _reference(n, s0, x)
        np.testing.assert_array_equal(out["s_final"], s)
        np.testing.assert_array_equal(out["scans"], scans)
    assert calls.count(True) >= 15, "steps past the body's third run go by position"


def test_if_branches_by_position_match_and_read_the_current_outer_tensors():
    engine = Runtime().deserialize_engine(build_plan_from_onnx(_if_model().SerializeToString()))
    ctx = engine.create_execution_context()
    w = np.array([0.5, 1.5, -2.0, 3.0], np.float32)
    for i in range(12):
        x = np.random.default_rng(i).standard_normal((2, 4)).astype(np.float32)
        y = ctx.execute({"x": x, "c": np.float32(1.0)})["y"]
        np.testing.assert_array_equal(y, x * w + x)
    then_body = next(s for _, _, _, subs in engine.executor.steps for k, s in subs.items() if k == "then")
    cp = then_body.compiled(frozenset())
    assert callable(cp.fast)
    x = np.ones((2, 4), np.float32)
    assert [a.tolist() for a in cp.run_inputs([], {"x": x})] == [(x * w + x).tolist()]


def test_run_inputs_declines_where_the_named_run_must_report():
    engine = Runtime().deserialize_engine(build_plan_from_onnx(_if_model().SerializeToString()))
    ctx = engine.create_execution_context()
    for i in range(5):
        ctx.execute({"x": np.full((2, 4), float(i), np.float32), "c": np.float32(1.0)})
    then_body = next(s for _, _, _, subs in engine.executor.steps for k, s in subs.items() if k == "then")
    cp = then_body.compiled(frozenset())
    assert cp.run_inputs([], {}) is None            # outer x missing
    assert cp.run_inputs([], None) is None          # no enclosing scope
    assert cp.run_inputs([np.ones(1)], {"x": np.ones((2, 4), np.float32)}) is None   # more inputs than the body has
    try:
        then_body.run_list([], parent_env={})
    except ExecutionError as e:
        assert "'x'" in str(e)
    else:
        raise AssertionError("a missing outer tensor must be reported")
