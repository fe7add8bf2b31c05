"""The memory plan's arena at run time (runtime/arena.py): one arena per execution context and shape signature,
layers whose tactics write into given buffers write into its planned views, and nothing handed back to the caller
changes when the context runs again."""
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine import Runtime, build_plan_from_onnx
from native.cpu.kernels.conv.pointwise_1x1 import PointwiseGemm
from native.cpu.kernels.matmul import BlasMatMul, PackedGemm

RNG = np.random.default_rng(0)


def _w(name, shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def block_model(batch=2, dynamic=False):
    """1x1 convs, pointwise ops and a GEMM: every big intermediate is written by a tactic that writes into given
    buffers; Flatten's output (a graph output) is a view of one of them."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Tanh", ["c2"], ["t2"]),
             helper.make_node("Add", ["t2", "r1"], ["a2"]),
             helper.make_node("Flatten", ["a2"], ["f"]),
             helper.make_node("MatMul", ["f", "wf"], ["y0"]),
             helper.make_node("Exp", ["y0"], ["y"])]
    shape = ["N" if dynamic else batch, 32, 16, 16]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
                              [_w("w1", [32, 32, 1, 1]), _w("w2", [32, 32, 1, 1]), _w("wf", [32 * 16 * 16, 10])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _engine():
    """Fixed tactics (--tactic-sources), not timing: the spies below watch named tactic classes, and a timing race
    on a loaded machine can pick another MatMul tactic."""
    from backends.engine import BuilderConfig
    config = BuilderConfig()
    config.tactic_sources = {"1x1-gemm", "blas"}
    return Runtime().deserialize_engine(build_plan_from_onnx(block_model().SerializeToString(), config=config))


@pytest.fixture(scope="module")
def engine():
    return _engine()


def _x(seed, batch=2):
    return np.random.default_rng(seed).standard_normal((batch, 32, 16, 16)).astype(np.float32)


def test_results_and_taps_survive_later_executions(engine):
    ctx = engine.create_execution_context()
    first = ctx.execute({"x": _x(1)}, taps=["r1"])
    saved = {k: v.copy() for k, v in first.items()}
    ctx.execute({"x": _x(2)}, taps=["r1"])            # plans the arena (second run at this signature uses it)
    second = ctx.execute({"x": _x(2)}, taps=["r1"])
    third = ctx.execute({"x": _x(3)}, taps=["r1"])
    assert ctx.arena_bytes > 0
    for k in saved:                                  # nothing the caller holds changed
        np.testing.assert_array_equal(first[k], saved[k])
        assert not np.array_equal(second[k], third[k])
    plain = engine.create_execution_context()
    plain.use_arena = False
    for feeds, got in (({"x": _x(2)}, second), ({"x": _x(3)}, third)):
        want = plain.execute(feeds, taps=["r1"])
        for k in want:                               # the arena changes where values live, never what they are
            np.testing.assert_array_equal(got[k], want[k])
        for k in got:
            for other in ctx.arenas.plans.values():
                assert not np.shares_memory(got[k], other.buffer), k


def test_tactics_that_write_outputs_write_into_the_arena(monkeypatch):
    engine = _engine()     # its interpreter binds tactics on the first execution, after the spies are in
    seen = []

    def spy(cls):
        real = cls.run

        def run(self, op, inputs, outputs=None, workspace=None, stream=None):
            result = real(self, op, inputs, outputs, workspace, stream)
            seen.append((op.name, outputs is not None and result[0] is outputs[0], result[0]))
            return result
        run._contract = True
        monkeypatch.setattr(cls, "run", run)

    for cls in (PointwiseGemm, BlasMatMul, PackedGemm):
        spy(cls)
    ctx = engine.create_execution_context()
    ctx.execute({"x": _x(1)})
    assert seen and not any(into for _, into, _ in seen)      # first run at a signature: learn, allocate
    seen.clear()
    ctx.execute({"x": _x(1)})
    (plan,) = ctx.arenas.plans.values()
    producer = {o: n for n, _, _, _ in engine.executor.steps for o in n.outputs}
    into_arena = {name for name, into, value in seen if into and np.shares_memory(value, plan.buffer)}
    assert into_arena == {producer[t].name for t in plan.offsets}
    assert {producer["r1"].name, producer["y0"].name} <= into_arena
    # the graph output 'f' is a view of 'a2': a2 keeps its own allocation, so 'f' is handed back without a copy
    assert producer["a2"].name not in into_arena and "a2" not in plan.offsets
    layers = {l["LayerType"]: l["OutputMemory"] for l in engine.create_engine_inspector().layers()}
    assert layers["Convolution"] == "arena"
    assert layers["Shuffle"].startswith("allocated: ")


def test_peak_allocation_during_execute_is_about_the_arena(engine):
    """Once planned, an execution allocates little beyond the graph outputs: the intermediates live in the arena
    allocated once. Without the arena every intermediate is a new allocation."""
    feeds = {"x": _x(1)}

    def peak(ctx):
        ctx.execute(feeds)
        tracemalloc.start()
        try:
            ctx.execute(feeds)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    with_arena = engine.create_execution_context()
    without = engine.create_execution_context()
    without.use_arena = False
    arena_peak, plain_peak = peak(with_arena), peak(without)
    arena = with_arena.arena_bytes
    out_bytes = 2 * 32 * 16 * 16 * 4                  # 'a2', which the graph output 'f' is a view of
    assert arena >= out_bytes                         # r1 (and the GEMM's small output)
    assert plain_peak >= out_bytes + arena            # without it the same tensors are allocated per execution
    assert arena_peak < out_bytes + 16384, (arena_peak, plain_peak, arena)


def test_a_new_input_shape_gets_its_own_arena():
    # the heuristic's tactics (each writes into the arena): timed picks may allocate their own outputs, leaving
    # a signature with nothing to place (its plan None)
    plan = build_plan_from_onnx(block_model(dynamic=True).SerializeToString(),
                                ranges={"x": [(1, 32, 16, 16), (2, 32, 16, 16), (4, 32, 16, 16)]},
                                flags=("enable_tactic_heuristic",))
    engine = Runtime().deserialize_engine(plan)
    ctx, plain = engine.create_execution_context(), engine.create_execution_context()
    plain.use_arena = False
    for batch in (2, 2, 4, 4, 1, 2):
        x = _x(batch * 7, batch)
        got, want = ctx.execute({"x": x}), plain.execute({"x": x})
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    assert len(ctx.arenas.plans) == 3
    sizes = sorted(p.nbytes for p in ctx.arenas.plans.values())
    assert sizes[0] * 4 == sizes[2]                   # planned per signature: batch 1 and 4


def view_model():
    """'a' is read only through its view 'v' after its own last reader (Flatten): 'b', planned later, must not be
    placed over it."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Flatten", ["a"], ["v"]),
             helper.make_node("Flatten", ["x"], ["xf"]),
             helper.make_node("Exp", ["xf"], ["b"]),
             helper.make_node("Add", ["v", "b"], ["y"])]
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_view_keeps_the_memory_it_views_alive():
    engine = Runtime().deserialize_engine(build_plan_from_onnx(view_model().SerializeToString(),
                                                               flags=["disable_fusion"]))
    ctx = engine.create_execution_context()
    x = np.random.default_rng(5).standard_normal((2, 8, 4, 4)).astype(np.float32)
    want = (np.maximum(x, 0) + np.exp(x)).reshape(2, -1)
    for _ in range(3):
        np.testing.assert_allclose(ctx.execute({"x": x})["y"], want, rtol=1e-6)
    (plan,) = ctx.arenas.plans.values()
    assert {"a", "b"} <= set(plan.offsets)           # both placed, in memory that does not overlap
    lo, hi = sorted([("a", plan.offsets["a"]), ("b", plan.offsets["b"])], key=lambda t: t[1])
    assert hi[1] - lo[1] >= x.nbytes


def test_concatenation_writes_into_the_arena():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b", "x"], ["c"], axis=1), helper.make_node("Tanh", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    engine = Runtime().deserialize_engine(build_plan_from_onnx(model.SerializeToString(), flags=["disable_fusion"]))
    ctx = engine.create_execution_context()
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(ctx.execute({"x": x})["y"],
                                   np.tanh(np.concatenate([np.maximum(x, 0), np.exp(x), x], axis=1)), rtol=1e-6)
    (plan,) = ctx.arenas.plans.values()
    assert "c" in plan.offsets
    kinds = {l["LayerType"]: l["OutputMemory"] for l in engine.create_engine_inspector().layers()}
    assert kinds["Concatenation"] == "arena"
