"""Pooling and reductions at rank 3 (a transformer's pooled tokens, a 1-D CNN) and rank 5 (3-D volumes) on the GPU
tactics, against the CPU tactic on the same op and inputs; and a rank-3 model built for the GPU whose pooling runs
on a GPU kernel (not a host layer). Skipped without a GPU (`cuda` marker)."""
import numpy as np
import pytest

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(3)


def _op(kind, precision="float32", **params):
    from native.tactics import Op
    return Op(kind, "t", params, {}, precision=precision)


def _same(kind, op, x, rtol=1e-6):
    from native.cuda.array import GpuArray
    from native.tactics import LayerContext, tactics_for, unsupported_reason
    ctx = LayerContext.of([x])
    gpu = next(t for t in tactics_for(kind, "cuda") if not t.host_layer)
    assert unsupported_reason(gpu, op, ctx) is None
    cpu = next(t for t in tactics_for(kind, "cpu") if unsupported_reason(t, op, ctx) is None)
    got = gpu.run(op, [GpuArray.from_host(x)])[0].get()
    ref = np.asarray(cpu.run(op, [x])[0])
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("kind", ["MAX", "AVERAGE"])
@pytest.mark.parametrize("shape", [(2, 5, 17), (1, 3, 4, 6, 7)], ids=["rank3", "rank5"])
def test_global_pooling(kind, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    _same("Pooling", _op("Pooling", type=kind, **{"global": True}), x)


@pytest.mark.parametrize("kind,exclude", [("MAX", True), ("AVERAGE", True), ("AVERAGE", False)])
def test_1d_window_pooling(kind, exclude):
    x = RNG.standard_normal((2, 4, 23)).astype(np.float32)
    _same("Pooling", _op("Pooling", type=kind, window=[3], strides=[2], pre_padding=[1], post_padding=[1],
                         average_count_excludes_padding=exclude), x)


@pytest.mark.parametrize("kind,exclude", [("MAX", True), ("AVERAGE", True), ("AVERAGE", False)])
def test_3d_window_pooling(kind, exclude):
    x = RNG.standard_normal((2, 3, 6, 7, 9)).astype(np.float32)
    _same("Pooling", _op("Pooling", type=kind, window=[2, 3, 3], strides=[2, 2, 1], pre_padding=[1, 1, 0],
                         post_padding=[0, 1, 1], average_count_excludes_padding=exclude), x, rtol=1e-5)


def test_fp16_rank3_pooling():
    x = RNG.standard_normal((2, 4, 19)).astype(np.float16)
    _same("Pooling", _op("Pooling", "float16", type="AVERAGE", window=[4], strides=[3]), x, rtol=2e-3)


@pytest.mark.parametrize("shape,axes", [((2, 5, 17), [2]), ((2, 5, 17), [1, 2]), ((1, 3, 4, 6, 7), [2, 3, 4])])
@pytest.mark.parametrize("op", ["SUM", "AVG", "MAX", "MIN"])
def test_reductions(shape, axes, op):
    x = RNG.standard_normal(shape).astype(np.float32)
    _same("Reduce", _op("Reduce", op=op, axes=axes, keep_dims=True), x, rtol=1e-5)


def test_rank3_global_pool_model_runs_on_a_gpu_kernel():
    """GlobalAveragePool and MaxPool over (N, C, L) in a model built for the GPU: GPU kernels, values as ONNX
    Runtime's (this crashed with 'not enough values to unpack (expected 4, got 3)')."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from backends.runners import EngineRunner
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3], strides=[2], pads=[1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 33])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = RNG.standard_normal((2, 8, 33)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with EngineRunner(model, device="cuda") as r:
        got = r.infer({"x": x})["y"]
        pools = [n for n in r.engine.graph.nodes if n.kind.startswith("Pooling")]
        assert pools and all(not n.tactic_name.startswith("host:") for n in pools), \
            [(n.name, n.tactic_name) for n in pools]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
