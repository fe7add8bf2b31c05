"""The compiled execution plan (runtime/compiled.py): plain, tapped and profiled executes run the pre-bound step
list, give bit-identical results to the general loop, and taps neither copy out of the arena nor change later."""
import numpy as np
import pytest

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.runtime import compiled as compiled_mod
from backends.engine.runtime.profiler import LayerProfiler
from tests.backends.test_arena import block_model


@pytest.fixture(scope="module")
def engine():
    return Runtime().deserialize_engine(build_plan_from_onnx(block_model().SerializeToString()))


def _x(seed):
    return np.random.default_rng(seed).standard_normal((2, 32, 16, 16)).astype(np.float32)


def _general(engine, feeds, keep=()):
    """The general loop's answer (no arena, no compiled plan)."""
    return engine.executor._run_general(dict(feeds), keep=set(keep))


def test_compiled_runs_match_the_general_loop_bit_for_bit(engine):
    ctx = engine.create_execution_context()
    taps = engine.tensor_names()
    for seed in (1, 2, 3):   # learn the arena, then two compiled runs
        out = ctx.execute({"x": _x(seed)}, taps=taps)
        ref = _general(engine, {"x": _x(seed)}, keep=taps)
        assert set(out) >= set(engine.graph.output_names) | set(taps) - {"x"}
        for name, value in out.items():
            np.testing.assert_array_equal(value, ref[engine.graph.aliases.get(name, name)])
    assert ctx.arenas.compiled, "the second execute at a signature runs the compiled plan"


def test_compiled_plan_is_used_for_taps_and_the_profiler(engine, monkeypatch):
    ctx = engine.create_execution_context()
    ctx.execute({"x": _x(1)})   # learns the arena
    calls = []
    real = compiled_mod.CompiledPlan.run

    def spy(self, *a, **k):
        calls.append(True)
        return real(self, *a, **k)
    monkeypatch.setattr(compiled_mod.CompiledPlan, "run", spy)
    ctx.execute({"x": _x(2)})
    ctx.execute({"x": _x(2)}, taps=engine.tensor_names())
    ctx.profiler = LayerProfiler()
    ctx.execute({"x": _x(2)})
    assert len(calls) == 3
    assert [r["layer"] for r in ctx.profiler.summary()] == [n.name for n in engine.graph.nodes]
    assert all(r["median_ms"] > 0 for r in ctx.profiler.summary())


def test_taps_do_not_point_into_the_arena_and_survive_later_runs(engine):
    ctx = engine.create_execution_context()
    taps = [n for n in engine.tensor_names() if n not in ("x", "y", "f")]
    assert len(taps) >= 3
    ctx.execute({"x": _x(1)}, taps=taps)
    first = ctx.execute({"x": _x(1)}, taps=taps)   # compiled, arena planned
    saved = {k: v.copy() for k, v in first.items()}
    plan = next(iter(ctx.arenas.plans.values()))
    for name in taps:
        assert not np.may_share_memory(first[name], plan.buffer), name
    ctx.execute({"x": _x(5)}, taps=taps)
    ctx.execute({"x": _x(6)})
    for k, v in saved.items():
        np.testing.assert_array_equal(first[k], v)


def test_a_missing_feed_falls_back_to_the_general_loop_error(engine):
    from native.errors import ExecutionError
    with pytest.raises(ExecutionError, match="reads tensor 'x'"):
        engine.executor.run({})


def test_swapped_tactics_recompile(engine):
    """A debug tool that replaces the steps list (tools/plant_fault.py does) gets a fresh plan, not a stale one."""
    ctx = engine.create_execution_context()
    ctx.execute({"x": _x(1)})
    good = ctx.execute({"x": _x(1)})["y"].copy()
    ex = engine.executor
    original = ex.steps

    class Plus1:
        name, writes_outputs = "plus1", False

        def __init__(self, t):
            self.t = t

        def run(self, op, inputs):
            return [np.asarray(self.t.run(op, inputs)[0]) + np.float32(1)]

    last = len(original) - 1
    ex.steps = [(n, Plus1(t) if i == last else t, op, s) for i, (n, t, op, s) in enumerate(original)]
    try:
        bad = ctx.execute({"x": _x(1)})["y"]
    finally:
        ex.steps = original
    np.testing.assert_array_equal(bad, good + np.float32(1))
    np.testing.assert_array_equal(ctx.execute({"x": _x(1)})["y"], good)


def test_plain_execute_returns_the_outputs_and_the_enqueue_time(engine):
    """The plain host execute (no taps, profiler or timeline) takes a short path: the same outputs as the general
    loop, a fresh array per call (not the arena), and host_timings recorded."""
    ctx = engine.create_execution_context()
    first = None
    for seed in (1, 2, 2):
        out = ctx.execute({"x": _x(seed)})
        ref = _general(engine, {"x": _x(seed)})
        assert list(out) == engine.graph.output_names
        for name, value in out.items():
            np.testing.assert_array_equal(value, ref[name])
        assert ctx.host_timings["enqueue_ms"] > 0
        first = first or out
    again = ctx.execute({"x": _x(1)})
    for name in first:   # what an earlier call returned is not overwritten by later ones
        np.testing.assert_array_equal(first[name], again[name])


def test_a_plain_execute_finds_its_compiled_plan_in_one_lookup(engine, monkeypatch):
    """execute's plain run (executor.run_outputs): the first runs at a signature go through executor.run (which learns
    the arena and compiles the plan); later ones run that plan directly, bit for bit the general loop's answer; the
    builder's tolerant executor (its fallback runs) always takes executor.run."""
    from backends.engine.runtime import executor as executor_mod
    ctx = engine.create_execution_context()
    general = []
    real = executor_mod.GraphExecutor.run

    def spy(self, *a, **k):
        general.append(True)
        return real(self, *a, **k)
    monkeypatch.setattr(executor_mod.GraphExecutor, "run", spy)
    for seed in range(1, 7):
        out = ctx.execute({"x": _x(seed)})
        ref = _general(engine, {"x": _x(seed)})
        for name in engine.graph.output_names:
            np.testing.assert_array_equal(out[name], ref[name])
    first = len(general)
    assert 1 <= first < 6
    ctx.execute({"x": _x(7)})
    assert len(general) == first
    monkeypatch.setattr(engine.executor, "_fallback", True)
    out = ctx.execute({"x": _x(8)})
    assert len(general) == first + 1
    np.testing.assert_array_equal(out["y"], _general(engine, {"x": _x(8)})["y"])
