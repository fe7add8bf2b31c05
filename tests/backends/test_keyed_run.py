"""execute's repeated plain run (compiled.keyed_runner, held in ExecutionContext._quick): the same outputs as
CompiledPlan.run_outputs, feeds checked by name, shape and dtype inline (anything else runs nothing and returns
None, so execute takes its checked path), outputs detached from the arena exactly as run_outputs detaches them."""
import numpy as np
from onnx import TensorProto, helper

from backends.engine.runtime import compiled as compiled_mod
from tests.backends.test_execute_plain_path import _RANGES, _engine, _feeds, _two_input_model


def _warm(ctx, n=2):
    for s in range(compiled_mod.FAST_AFTER + 2):
        ctx.execute(_feeds(s, n))
    assert ctx._quick is not None
    return ctx._quick[2]


def test_the_keyed_run_gives_run_outputs_values_and_runs_nothing_for_other_feeds():
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    run = _warm(ctx)
    cp = ctx.arenas.last[0]
    assert cp.keyed((("a", (2, 4), np.dtype(np.float32)), ("b", (2, 4), np.dtype(np.float32)))) is run   # made once
    f = _feeds(40, 2)
    out = run({"b": f["b"], "a": f["a"]}, ctx.arenas.workspace)      # by name: any order
    ref = cp.run_outputs((f["a"], f["b"]), ctx.arenas.workspace)
    assert list(out) == ["y", "z"] == list(ref)
    for name in out:
        assert out[name].dtype == ref[name].dtype and np.array_equal(out[name], ref[name])
    np.testing.assert_array_equal(out["z"], f["a"] - f["b"])
    for bad in ({"a": f["a"]}, {"a": f["a"], "b": f["b"], "c": f["b"]}, {"a": f["a"], "c": f["b"]},
                {"a": f["a"].astype(np.float64), "b": f["b"]}, {"a": f["a"][:1], "b": f["b"]},
                {"a": f["a"].tolist(), "b": f["b"]}):
        assert run(bad, ctx.arenas.workspace) is None


def test_execute_runs_the_keyed_run_not_run_outputs(monkeypatch):
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    _warm(ctx)
    cp = ctx.arenas.last[0]
    monkeypatch.setattr(type(cp), "run_outputs", lambda *a, **k: (_ for _ in ()).throw(AssertionError("called")))
    for s in range(3):
        f = _feeds(60 + s, 2)
        out = ctx.execute(f)
        ref = engine.executor._run_general(dict(f))
        for name in ("y", "z"):
            np.testing.assert_array_equal(out[name], ref[name])
        assert ctx.host_timings["enqueue_ms"] >= 0


def test_the_keyed_run_detaches_what_may_view_the_arena_as_run_outputs_does():
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.arange(16, dtype=np.float32).tolist())
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Concat", ["m", "b"], ["y"], axis=1),
             helper.make_node("Sub", ["a", "b"], ["z"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("a", "b")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])]
    model = helper.make_model(helper.make_graph(nodes, "m", io, outs, [w]), opset_imports=[helper.make_opsetid("", 17)])
    ctx = _engine(model, _RANGES).create_execution_context()
    _warm(ctx)
    cp = ctx.arenas.last[0]
    assert cp.arena_plan is not None
    inside = cp.device.view(cp.arena_plan.buffer, 0, (2, 4), np.dtype(np.float32))
    inside[...] = 3.0
    own = np.ones((2, 4), np.float32)
    specs = (("a", (2, 4), np.dtype(np.float32)), ("b", (2, 4), np.dtype(np.float32)))
    real = cp.fast_pos
    for y_out, z_out in ((inside, own), (inside.reshape(8)[:4].reshape(1, 4), own.reshape(4, 2)[::2]),
                         (inside.T, own[None]), (inside[0].tolist(), own)):
        cp.fast_pos = lambda values, env, ws: [y_out, z_out]
        try:
            run = compiled_mod.keyed_runner(cp, specs)   # (binds the positional function it finds)
        finally:
            cp.fast_pos = real
        out = run(_feeds(1, 2), None)
        if isinstance(y_out, list):     # not an array: may_alias says no, handed back as it is
            assert out["y"] is y_out
        else:    # a view of the arena copied out; a view of memory of its own handed back as is
            assert out["y"] is not y_out and not np.shares_memory(out["y"], inside) and (out["y"] == 3.0).all()
        assert out["z"] is z_out


def test_no_keyed_run_without_a_straight_line_function_or_for_other_specs():
    engine = _engine(_two_input_model(), _RANGES)
    specs = (("a", (2, 4), np.dtype(np.float32)), ("b", (2, 4), np.dtype(np.float32)))
    fresh = compiled_mod.CompiledPlan(engine.executor, frozenset())
    assert not fresh.fast and compiled_mod.keyed_runner(fresh, specs) is None and fresh.keyed(specs) is None
    ctx = engine.create_execution_context()
    _warm(ctx)
    assert compiled_mod.keyed_runner(ctx.arenas.last[0], specs[:1]) is None     # not every graph input
