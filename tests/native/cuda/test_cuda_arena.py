"""The CUDA engine's activation arena: one device buffer per execution context and shape signature, each GPU layer
writing into its planned view (runtime/arena.py), also under CUDA graphs. Skipped without a GPU."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _net():
    rng = np.random.default_rng(3)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), f"w{len(inits)}")
    inits = []
    for shape in ((16, 3, 3, 3), (16, 16, 3, 3), (16, 16, 3, 3), (16, 10)):
        inits.append(w(*shape))
    names = [t.name for t in inits]
    nodes = [helper.make_node("Conv", ["x", names[0]], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", names[1]], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", names[2]], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c3", "r1"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["g"], name="sig"),
             helper.make_node("GlobalAveragePool", ["g"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", names[3]], ["z"], name="fc"),
             helper.make_node("Softmax", ["z"], ["y"], name="sm", axis=-1)]
    g = helper.make_graph(nodes, "arena", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from backends.runners import EngineRunner
    path = tmp_path_factory.mktemp("arena") / "net.onnx"
    onnx.save(_net(), path)
    with EngineRunner(str(path), device="cuda") as r:
        yield r.engine


def _feeds(seed):
    return {"x": np.random.default_rng(seed).standard_normal((2, 3, 16, 16)).astype(np.float32)}


def test_gpu_layers_write_into_one_arena_and_results_match_allocating_run(engine):
    arena_ctx, plain = engine.create_execution_context(), engine.create_execution_context()
    plain.use_arena = False
    inner = [t for t in engine.tensor_names() if t not in ("x", "y")]
    taps = [inner[0], inner[len(inner) // 2]]     # intermediates the arena holds: each is copied out intact
    for seed in (1, 2, 3):    # the first execution plans the arena, the later ones write into it
        got, want = arena_ctx.execute(_feeds(seed), taps=taps), plain.execute(_feeds(seed), taps=taps)
        for k in ("y", *taps):
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert arena_ctx.arena_bytes > 0 and plain.arena_bytes == 0
    memory = {l["Name"]: l["OutputMemory"] for l in engine.create_engine_inspector().layers()}
    in_arena = [n for n, m in memory.items() if m == "arena"]
    assert len(in_arena) >= 4, memory          # convolutions, pointwise, pooling write into the arena


def test_results_held_by_the_caller_survive_later_executions(engine):
    ctx = engine.create_execution_context()
    tap = [t for t in engine.tensor_names() if t not in ("x", "y")][0]
    first = ctx.execute(_feeds(4), taps=[tap])
    kept = {k: v.copy() for k, v in first.items()}
    ctx.execute(_feeds(5), taps=[tap])
    for k in kept:
        np.testing.assert_array_equal(first[k], kept[k])


def test_cuda_graph_replays_through_the_arena(engine):
    ctx, plain = engine.create_execution_context(), engine.create_execution_context()
    plain.use_arena = False
    ctx.enable_cuda_graph()
    for seed in (6, 7):
        np.testing.assert_array_equal(ctx.execute(_feeds(seed))["y"], plain.execute(_feeds(seed))["y"])
    assert ctx.arena_bytes > 0


def test_gpu_buffers_alias_by_byte_range():
    from native.cuda.array import GpuArray
    from native.device import get_device
    dev = get_device("cuda")
    buf = dev.allocate(4096)
    a, b = dev.view(buf, 0, (256,), np.float32), dev.view(buf, 1024, (256,), np.float32)
    assert dev.may_alias(a, buf) and dev.may_alias(b, buf) and not dev.may_alias(a, b)
    assert dev.may_alias(a.reshape((16, 16)), a)
    c = dev.duplicate(a)
    assert isinstance(c, GpuArray) and not dev.may_alias(c, buf)
