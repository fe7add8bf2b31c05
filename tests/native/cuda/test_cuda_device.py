"""The CUDA device on a real GPU: memory and copies, NVRTC kernels and cuBLAS against numpy, whole engines against
the CPU engine and ONNX Runtime, and `run --device cuda`. Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _op(kind, **params):
    from native.tactics import Op
    return Op(kind, "t", params)


def _tactic(kind, name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if t.name == name)


def test_gpu_array_round_trip_and_views():
    from native.cuda.array import GpuArray
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    g = GpuArray.from_host(x)
    assert g.shape == (3, 5, 7) and g.dtype == np.float32 and g.nbytes == x.nbytes
    np.testing.assert_array_equal(g.get(), x)
    np.testing.assert_array_equal(g.reshape((15, 7)).get(), x.reshape(15, 7))
    assert GpuArray.from_host(np.arange(5, dtype=np.int64)).get().tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("op,fn", [("SUM", np.add), ("SUB", np.subtract), ("PROD", np.multiply),
                                   ("DIV", np.divide), ("MAX", np.maximum), ("MIN", np.minimum)])
def test_elementwise_broadcasting_bit_exact(op, fn):
    from native.cuda.array import GpuArray
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 1, 5)).astype(np.float32)
    b = rng.standard_normal((4, 1)).astype(np.float32)
    b[0, 0] = np.nan
    y = _tactic("ElementWise", "nvrtc-pointwise").run(_op("ElementWise", op=op),
                                                      [GpuArray.from_host(a), GpuArray.from_host(b)])[0]
    np.testing.assert_array_equal(y.get(), fn(a, b))


@pytest.mark.parametrize("kind,name,params", [
    ("Activation", "RELU", {}), ("Activation", "SIGMOID", {}), ("Activation", "TANH", {}),
    ("Activation", "LEAKY_RELU", {"alpha": 0.1}), ("Activation", "CLIP", {"alpha": -0.5, "beta": 0.7}),
    ("Activation", "GELU_ERF", {}), ("Activation", "SILU", {}), ("Unary", "EXP", {}), ("Unary", "SQRT", {}),
    ("Unary", "ERF", {}), ("Unary", "NEG", {})])
def test_pointwise_kernels_match_cpu_kernels(kind, name, params):
    from native.cuda.array import GpuArray
    from native.tactics import tactics_for
    key = "type" if kind == "Activation" else "op"
    x = np.random.default_rng(2).standard_normal((7, 33)).astype(np.float32) * 3
    if name == "SQRT":
        x = np.abs(x)
    op = _op(kind, **{key: name}, **params)
    ref = tactics_for(kind, "cpu")[0].run(op, [x])[0]
    got = _tactic(kind, "nvrtc-pointwise").run(op, [GpuArray.from_host(x)])[0].get()
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)


def test_softmax_rows_match_numpy():
    from native.cuda.array import GpuArray
    x = np.random.default_rng(3).standard_normal((4, 3, 1000)).astype(np.float32) * 10
    y = _tactic("Softmax", "nvrtc-rows").run(_op("Softmax", axis=-1), [GpuArray.from_host(x)])[0].get()
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("sa,sb,ta,tb", [((37, 19), (19, 23), False, False), ((3, 37, 19), (19, 23), False, False),
                                         ((2, 3, 19, 37), (2, 3, 23, 19), True, True), ((1, 5, 8), (4, 8, 6), False, False)])
def test_cublas_matmul_fp32_matches_float64(sa, sb, ta, tb):
    from native.cuda.array import GpuArray
    from native.cuda.tactics.gemm import matmul
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ref = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b,
                    dtype=np.float64)
    got = matmul(GpuArray.from_host(a), GpuArray.from_host(b), ta, tb).get()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    tf32 = matmul(GpuArray.from_host(a), GpuArray.from_host(b), ta, tb, tf32=True).get()
    np.testing.assert_allclose(tf32, ref, rtol=5e-2, atol=5e-2)


def test_cublas_tf32_rounds_operands_on_tensor_core_shapes():
    from native.cuda.array import GpuArray
    from native.cuda.tactics.gemm import matmul
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal((512, 256)).astype(np.float32)
    fp32 = matmul(GpuArray.from_host(a), GpuArray.from_host(b)).get()
    tf32 = matmul(GpuArray.from_host(a), GpuArray.from_host(b), tf32=True).get()
    ref = a.astype(np.float64) @ b
    err32, errtf = np.abs(fp32 - ref).max(), np.abs(tf32 - ref).max()
    assert errtf > 10 * err32, (errtf, err32)      # 10 mantissa bits instead of 23


def _mlp_model():
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32) * 0.1, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((128, 10)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
             helper.make_node("Softmax", ["z"], ["y"], name="sm", axis=-1),
             helper.make_node("Transpose", ["y"], ["yt"], name="tr", perm=[1, 0])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("yt", TensorProto.FLOAT, [10, 8])], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_engine_on_cuda_matches_cpu_and_reports_host_layers(tmp_path):
    from backends.runners import EngineRunner
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp_model(), path)
    x = np.random.default_rng(6).standard_normal((8, 64)).astype(np.float32)
    with EngineRunner(str(path), device="cuda") as gpu, EngineRunner(str(path)) as cpu:
        y_gpu, y_cpu = gpu.infer({"x": x})["yt"], cpu.infer({"x": x})["yt"]
        layers = gpu.engine.graph.nodes
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-5, atol=1e-6)
    tactics = {n.kind: n.tactic_name for n in layers}
    assert tactics.get("MatrixMultiply", "").startswith("cublaslt-algo-") or tactics.get("MatrixMultiply") in (
        "cublas", "host:blas", "host:packed-gemm", "host:packed-gemm-t",
                                             "host:split-k")
    assert tactics.get("Shuffle") == "strided-copy"                 # the Transpose runs on the GPU too
    assert not any(t.startswith("host:") for t in tactics.values()), tactics
    assert all(n.tactic_name for n in layers)


def test_cli_run_device_cuda_mark_all(tmp_path):
    from debugkit.cli.main import main
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp_model(), path)
    assert main(["run", str(path), "--engine", "--onnxrt", "--device", "cuda", "--mark-all"]) == 0


def _conv_model(groups, stride, dil, pads):
    rng = np.random.default_rng(8)
    c, m = 12, 24
    oh = (17 + pads[0] + pads[2] - dil * 2 - 1) // stride + 1
    ow = (13 + pads[1] + pads[3] - dil * 2 - 1) // stride + 1
    w = numpy_helper.from_array(rng.standard_normal((m, c // groups, 3, 3)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    w2 = numpy_helper.from_array(rng.standard_normal((m, m, 1, 1)).astype(np.float32) * 0.2, "w2")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], name="conv1", group=groups, strides=[stride] * 2,
                              dilations=[dil] * 2, pads=pads),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 17, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, m, oh, ow])], [w, b, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("source", ["im2col-cublas", "cudnn-plan-0"])
@pytest.mark.parametrize("groups,stride,dil,pads", [(1, 1, 1, [1, 1, 1, 1]), (3, 2, 1, [0, 1, 2, 0]),
                                                    (12, 1, 2, [2, 2, 2, 2])])
def test_gpu_convolution_with_fused_epilogue_matches_cpu(tmp_path, groups, stride, dil, pads, source):
    """Both NCHW FP32 tactics (TF32 off) match the CPU engine to FP32 rounding. The build decides: a layer whose
    fused graph cuDNN declines (the frontend may refuse conv + residual add + sigmoid in NCHW) is given the other
    tactic at build time, never a plan that refuses at run time."""
    from backends.runners import EngineRunner
    from backends.engine.builder import BuilderConfig
    path = tmp_path / "conv.onnx"
    onnx.save(_conv_model(groups, stride, dil, pads), path)
    x = np.random.default_rng(9).standard_normal((2, 12, 17, 13)).astype(np.float32)
    config = BuilderConfig()
    # the tactic under test first, im2col-cublas for what it refuses; untimed: the first that supports the layer
    config.tactic_sources = [source, "im2col-cublas"]
    config.set_flag("enable_tactic_heuristic")
    config.prefer_nhwc = False       # the NCHW Convolution layers these tactics run
    with EngineRunner(str(path), device="cuda", config=config) as gpu, EngineRunner(str(path)) as cpu:
        y_gpu, y_cpu = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        convs = [n for n in gpu.engine.graph.nodes if n.kind == "Convolution"]
    # only where the tactic under test said no at build time does the other run (the plan ran: no refusal)
    assert all(n.tactic_name in (source, "im2col-cublas") for n in convs), [n.tactic_name for n in convs]
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-5, atol=1e-5)
    assert convs and convs[0].tactic_name == source, [n.tactic_name for n in convs]   # conv + bias + ReLU
