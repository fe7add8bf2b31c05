"""execute's plain run (executor.run_outputs -> CompiledPlan.run_outputs): feeds taken in the graph's input order,
the context's last plan reused while shapes and dtypes hold, outputs only; a simple tactic's kernel called without
its forwarding frame; If bodies of a context's plan bound once. Results stay bit-identical to the general loop."""
import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.runtime import compiled as compiled_mod
from native.errors import ExecutionError, FeedError, ShapeError


def _engine(model, ranges=None):
    # the heuristic's tactics: what these tests inspect (arena plans, views) must not depend on which tactic won a
    # timing (DEBUGKIT_TEST_RANDOM_TACTIC_TIMES)
    return Runtime().deserialize_engine(build_plan_from_onnx(model.SerializeToString(), ranges=ranges,
                                                             flags=("enable_tactic_heuristic",)))


def _two_input_model():
    """y = Relu(a * w) + b, z = a - b; a and b of shape [n, 4] (n dynamic)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5, -1.5, 2.0, 3.0])
    nodes = [helper.make_node("Mul", ["a", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "b"], ["y"]), helper.make_node("Sub", ["a", "b"], ["z"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("a", "b")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("y", "z")]
    g = helper.make_graph(nodes, "m", io, outs, [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


_RANGES = {"a": ((1, 4), (2, 4), (4, 4)), "b": ((1, 4), (2, 4), (4, 4))}


def _feeds(seed, n):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal((n, 4)).astype(np.float32)}


def test_plain_executes_reuse_the_last_plan_while_shapes_hold_and_switch_when_they_change(monkeypatch):
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    w = np.array([0.5, -1.5, 2.0, 3.0], np.float32)
    signatures = []
    real = type(ctx.arenas).signature

    def spy(self, feeds):
        signatures.append(True)
        return real(self, feeds)
    monkeypatch.setattr(type(ctx.arenas), "signature", spy)
    for seed in range(12):
        n = 2 if seed < 6 or seed % 2 else 3     # six runs at n=2, then n alternating
        f = _feeds(seed, n)
        out = ctx.execute(f)
        ref = engine.executor._run_general(dict(f))
        assert list(out) == ["y", "z"]
        for name in out:
            np.testing.assert_array_equal(out[name], ref[name])
        np.testing.assert_array_equal(out["y"], np.maximum(f["a"] * w, 0) + f["b"])
        if seed == 5:   # the last plan is reused: no signature built for these feeds
            assert ctx.arenas.last is not None
            before = len(signatures)
            ctx.execute(_feeds(99, 2))
            assert len(signatures) == before
    cp, shapes = ctx.arenas.last
    assert shapes[0][0] in ((2, 4), (3, 4)) and cp.fast


def test_outputs_never_point_into_the_arena_across_executes():
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    kept = [ctx.execute(_feeds(s, 2)) for s in range(6)]
    for s, out in enumerate(kept):   # later executes did not overwrite what earlier ones returned
        ref = engine.executor._run_general(_feeds(s, 2))
        for name in out:
            np.testing.assert_array_equal(out[name], ref[name])


def test_run_outputs_copies_what_may_view_the_arena_and_hands_back_owned_arrays_as_they_are():
    """The detach backstop: an output that views the arena buffer is copied out; a host array that owns its memory,
    or views an array that does (not the arena), is returned as it is, without the bounds check."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.arange(16, dtype=np.float32).tolist())
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Concat", ["m", "b"], ["y"], axis=1),
             helper.make_node("Sub", ["a", "b"], ["z"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("a", "b")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])]
    model = helper.make_model(helper.make_graph(nodes, "m", io, outs, [w]), opset_imports=[helper.make_opsetid("", 17)])
    engine = _engine(model, _RANGES)
    ctx = engine.create_execution_context()
    for s in range(5):
        out = ctx.execute(_feeds(s, 2))
    f = _feeds(4, 2)
    np.testing.assert_allclose(out["y"], np.concatenate([f["a"] @ np.arange(16, dtype=np.float32).reshape(4, 4),
                                                         f["b"]], axis=1), rtol=1e-6, atol=1e-5)
    cp = ctx.arenas.last[0]
    assert cp.arena_plan is not None and cp.arena_plan.nbytes >= 32 and cp.output_names == ("y", "z")
    inside = cp.device.view(cp.arena_plan.buffer, 0, (2, 4), np.dtype(np.float32))
    inside[...] = 3.0
    own = np.ones((2, 4), np.float32)
    assert own.base is None
    real = cp.fast_pos
    for y_out, z_out in ((inside, own), (inside.reshape(8)[:4].reshape(1, 4), own.reshape(4, 2)[::2]),
                         (inside.T, own[None])):
        cp.fast_pos = lambda values, env, ws: [y_out, z_out]
        try:
            out = cp.run_outputs(tuple(_feeds(1, 2).values()), None)
        finally:
            cp.fast_pos = real
        # a view of the arena copied out; a view of memory of its own (its base owns it) handed back as is
        assert out["y"] is not y_out and not np.shares_memory(out["y"], inside) and (out["y"] == 3.0).all()
        assert out["z"] is z_out
    assert compiled_mod._apart(own[1:], cp.arena_plan.buffer)
    assert not compiled_mod._apart(inside[1:], cp.arena_plan.buffer)
    assert not compiled_mod._apart(np.frombuffer(bytearray(8), np.float32), cp.arena_plan.buffer)  # a non-array base


def test_feeds_in_any_order_are_taken_in_the_graph_order_and_names_are_still_checked():
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    f = _feeds(1, 2)
    assert list(ctx._check_feeds({"b": f["b"], "a": f["a"]})) == ["a", "b"]
    for _ in range(5):
        out = ctx.execute({"b": f["b"], "a": f["a"]})
        np.testing.assert_array_equal(out["z"], f["a"] - f["b"])
    with pytest.raises(FeedError, match=r"unknown input name\(s\) \['c'\]"):
        ctx.execute({"a": f["a"], "c": f["b"]})
    with pytest.raises(FeedError, match=r"missing feed\(s\) for input\(s\) \['b'\]"):
        ctx.execute({"a": f["a"]})
    with pytest.raises(FeedError, match="expects dtype float32"):
        ctx.execute({"a": f["a"], "b": f["b"].astype(np.float64)})


def test_a_simple_tactics_kernel_is_called_without_its_forwarding_frame_unless_wrapped():
    def kernel(op, inputs):
        return [inputs[0] + 1]

    class T:
        def run(self, op, inputs):
            return kernel(op, inputs)
        run._kernel = (run, kernel)
    assert compiled_mod._kernel_of(T().run) is kernel

    class Guarded(T):   # a tactics module's guard copies run's attributes (functools.wraps): it keeps its frame
        @functools.wraps(T.run)
        def run(self, *a, **k):
            return T.run(self, *a, **k)
    g = Guarded().run
    assert compiled_mod._kernel_of(g) is g
    plain = object()
    assert compiled_mod._kernel_of(plain) is plain


def _if_model():
    """y = If(c > 0): then Gather(d, i) * x (reads the outer d, i and x) else -x."""
    d = helper.make_tensor("d", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    then_g = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["t0"], name="pick"), helper.make_node("Mul", ["t0", "x"], ["t1"])],
        "then", [], [helper.make_tensor_value_info("t1", TensorProto.FLOAT, [2, 2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"])], "else", [],
                               [helper.make_tensor_value_info("e0", TensorProto.FLOAT, [2, 2])])
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
                                       helper.make_tensor_value_info("c", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [d, zero])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _body_envs(ctx):
    """The per-layer outer-tensor dicts of the context's straight-line functions."""
    return [v for cp in ctx.arenas.compiled.values() if cp.fast
            for k, v in cp.fast.__globals__.items() if k.startswith("E") and isinstance(v, dict)]


@pytest.mark.parametrize("use_arena", [True, False])
def test_if_bodies_bound_once_read_this_runs_outer_tensors_and_keep_none_after(use_arena):
    engine = _engine(_if_model())
    ctx = engine.create_execution_context()
    ctx.use_arena = use_arena
    d = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    for k in range(10):
        x = np.random.default_rng(k).standard_normal((2, 2)).astype(np.float32)
        i = np.array([k % 3, (k + 1) % 3])
        c = np.float32(1.0 if k % 4 else -1.0)
        y = ctx.execute({"x": x, "i": i, "c": c})["y"]
        np.testing.assert_array_equal(y, d[i] * x if c > 0 else -x)
    envs = _body_envs(ctx)
    if use_arena:   # the context's own plan binds its If once, through one dict emptied after each run
        assert envs and all(e == {} for e in envs)
    else:           # a plan shared by contexts (no arena) binds per run
        assert envs == [] and not any(cp.owned for cp in engine.executor.__dict__.get("_compiled", {}).values())
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ExecutionError, match="pick"):   # a body layer failing leaves nothing bound either
        ctx.execute({"x": x, "i": np.array([7, 0]), "c": np.float32(1)})
    assert all(e == {} for e in _body_envs(ctx))
    y = ctx.execute({"x": x, "i": np.array([2, 0]), "c": np.float32(1)})["y"]
    np.testing.assert_array_equal(y, d[[2, 0]] * x)


def test_a_compiled_plan_tests_the_empty_batch_inline_and_calls_the_convolution_direct(monkeypatch):
    """A Convolution's empty-batch guard (empty_batch.py) is written out in the straight-line function: a batch of
    samples calls the tactic it guards directly (no guard frame), a batch of 0 still gets the guard's empty output."""
    from backends.engine.runtime import empty_batch
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 2, 3], rng.standard_normal(24).astype(np.float32).tolist())
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 6])], [w])
    engine = _engine(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                     {"x": ((0, 2, 6), (2, 2, 6), (4, 2, 6))})
    ctx = engine.create_execution_context()
    guard_calls = []
    real = empty_batch._one_sample
    monkeypatch.setattr(empty_batch, "_one_sample", lambda *a: guard_calls.append(1) or real(*a))
    for seed in range(compiled_mod.FAST_AFTER + 3):
        x = rng.standard_normal((2, 2, 6)).astype(np.float32)
        out = ctx.execute({"x": x})["y"]
        np.testing.assert_array_equal(out, engine.executor._run_general({"x": x})["y"])
    cp = ctx.arenas.last[0]
    assert cp.fast and cp.fast_pos and "u0" in cp.fast_pos.__globals__   # the guarded call, bound on its own
    assert not guard_calls
    runs = compiled_mod.FAST_AFTER + 3
    for _ in range(runs):   # the plan at a batch of 0 gets its straight-line function too: the guard runs inline
        empty = ctx.execute({"x": np.zeros((0, 2, 6), np.float32)})["y"]
        assert empty.shape == (0, 4, 6) and empty.dtype == np.float32
    assert len(guard_calls) == runs
    assert ctx.arenas.last[0] is not cp and "u0" in ctx.arenas.last[0].fast_pos.__globals__
    x = rng.standard_normal((2, 2, 6)).astype(np.float32)
    np.testing.assert_array_equal(ctx.execute({"x": x})["y"], engine.executor._run_general({"x": x})["y"])


def test_view_layers_are_written_out_inline_with_the_kernels_call_for_other_shapes():
    """Shuffle, Slice and constant-index Gather layers whose kernels hold their recipe (native/cpu/kernels/tensor.py
    `_view`) are written out in the straight-line function as the same numpy view calls; an input of another shape
    (a plan shared by every shape: no arena) takes the kernel's call. Outputs equal the general loop's throughout."""
    nodes = [helper.make_node("Unsqueeze", ["a", "ax"], ["u"]), helper.make_node("Relu", ["u"], ["r"]),
             helper.make_node("Slice", ["r", "st", "en", "sax"], ["s"]), helper.make_node("Squeeze", ["s", "ax"], ["q"]),
             helper.make_node("Transpose", ["q"], ["y"], perm=[1, 0]),
             helper.make_node("Gather", ["y", "one"], ["row"], axis=0), helper.make_node("Exp", ["row"], ["e"])]
    inits = [helper.make_tensor("ax", TensorProto.INT64, [1], [1]), helper.make_tensor("st", TensorProto.INT64, [1], [1]),
             helper.make_tensor("en", TensorProto.INT64, [1], [3]), helper.make_tensor("sax", TensorProto.INT64, [1], [2]),
             helper.make_tensor("one", TensorProto.INT64, [], [1])]
    g = helper.make_graph(nodes, "v", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"]),
                           helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n"])], inits)
    engine = _engine(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                     {"a": ((1, 4), (2, 4), (4, 4))})
    ex = engine.executor
    rng = np.random.default_rng(1)
    for n in [2] * (compiled_mod.FAST_AFTER + 2) + [3, 1, 2]:
        a = rng.standard_normal((n, 4)).astype(np.float32)
        got = ex.run({"a": a})                         # no arena: one plan for every shape
        ref = ex._run_general({"a": a})
        np.testing.assert_array_equal(got["y"], np.maximum(a, 0)[:, 1:3].T)
        for name in ("y", "e"):
            np.testing.assert_array_equal(got[name], ref[name])
    cp = ex.compiled(frozenset())
    views = [k for k in cp.fast.__globals__ if k.startswith("S")]
    kinds = [cp.steps[int(k[1:])][10].kind for k in views]
    assert len(views) >= 3 and set(kinds) <= {"Shuffle", "Slice", "Gather"} and {"Slice", "Gather"} <= set(kinds)


def test_a_repeated_execute_skips_the_feed_checks_it_already_made_and_keeps_every_error(monkeypatch):
    """After a plain run, an execute with feeds of the same names, shapes and dtypes at the same profile runs the
    last plan straight away (no _check_feeds pass); anything else (another dtype, shape, name set, profile, taps)
    takes the checked path, with its errors. Outputs equal the general loop's throughout."""
    from backends.engine.runtime import runtime as runtime_mod
    engine = _engine(_two_input_model(), _RANGES)
    ctx = engine.create_execution_context()
    checks = []
    real = runtime_mod.ExecutionContext._check_feeds
    monkeypatch.setattr(runtime_mod.ExecutionContext, "_check_feeds",
                        lambda self, feeds: checks.append(1) or real(self, feeds))
    for seed in range(compiled_mod.FAST_AFTER + 4):
        f = _feeds(seed, 2)
        out = ctx.execute(f)
        ref = engine.executor._run_general(dict(f))
        assert set(out) == {"y", "z"}
        for name in out:
            np.testing.assert_array_equal(out[name], ref[name])
    assert ctx._quick is not None
    before = len(checks)
    f = _feeds(50, 2)
    out = ctx.execute({"b": f["b"], "a": f["a"]})          # any order of the same names
    np.testing.assert_array_equal(out["z"], f["a"] - f["b"])
    assert len(checks) == before and ctx.host_timings["enqueue_ms"] >= 0
    with pytest.raises(FeedError, match="dtype"):
        ctx.execute({"a": f["a"].astype(np.float64), "b": f["b"]})
    with pytest.raises(FeedError, match="missing"):
        ctx.execute({"a": f["a"]})
    with pytest.raises(FeedError, match="unknown"):
        ctx.execute({"a": f["a"], "b": f["b"], "c": f["b"]})
    with pytest.raises(ShapeError):
        ctx.execute({"a": np.zeros((9, 4), np.float32), "b": np.zeros((9, 4), np.float32)})   # outside the profile
    f3 = _feeds(51, 3)
    out = ctx.execute(f3)
    np.testing.assert_array_equal(out["z"], f3["a"] - f3["b"])
    tapped = ctx.execute(f, taps=["z"])
    np.testing.assert_array_equal(tapped["z"], f["a"] - f["b"])
    ctx.execute(f)
    n = len(checks)
    ctx.execute(f)
    assert len(checks) == n
    monkeypatch.setattr(engine, "profiles", engine.profiles * 2)
    ctx.active_profile = 1                                   # another profile: its shape checks again
    ctx.execute(f)
    assert len(checks) == n + 1
