"""INT8 on the GPU: explicit Q/DQ models whose convolutions and GEMMs fuse into INT8 layers run on cuBLASLt's
integer tensor cores with the CPU INT8 kernels' numerics (same int32 accumulators, same float32 rescale), so the
CUDA and CPU engines agree bit for bit. Skipped without a GPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _model(relu_between=True, out_qdq=True):
    """x -> Q/DQ -> conv 3x3 (16->32, bias) [-> relu] -> Q/DQ -> conv 1x1 (32->16) -> Q/DQ -> flatten -> Q/DQ ->
    MatMul (DQ'd int8 weight [16*8*8, 24]) + bias -> y."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qdq(x, scale, tag):
        s, z = const(f"{tag}_s", np.float32(scale)), const(f"{tag}_z", np.int8(0))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, z], [f"{tag}_dq"], name=f"{tag}_DQ"))
        return f"{tag}_dq"

    def weight(shape, tag, axis):
        wq = rng.integers(-127, 128, shape).astype(np.int8)
        s = rng.uniform(0.002, 0.01, shape[axis]).astype(np.float32)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_wq", wq), const(f"{tag}_ws", s)],
                                      [f"{tag}_w"], name=f"{tag}_wDQ", axis=axis))
        return f"{tag}_w"

    x = qdq("x", 0.03, "in")
    nodes.append(helper.make_node("Conv", [x, weight((32, 16, 3, 3), "c1", 0),
                                           const("b1", rng.standard_normal(32).astype(np.float32))],
                                  ["c1"], name="conv1", pads=[1, 1, 1, 1]))
    h = "c1"
    if relu_between:
        nodes.append(helper.make_node("Relu", ["c1"], ["r1"], name="relu1"))
        h = "r1"
    h = qdq(h, 0.05, "c1o")
    nodes.append(helper.make_node("Conv", [h, weight((16, 32, 1, 1), "c2", 0)], ["c2"], name="conv2"))
    h = qdq("c2", 0.08, "c2o")
    nodes.append(helper.make_node("Flatten", [h], ["f"], name="flat"))
    nodes.append(helper.make_node("MatMul", ["f", weight((16 * 8 * 8, 24), "fc", 1)], ["m"], name="fc"))
    nodes.append(helper.make_node("Add", ["m", const("bfc", rng.standard_normal(24).astype(np.float32))], ["y0"],
                                  name="fc_bias"))
    y = qdq("y0", 0.1, "yo") if out_qdq else "y0"
    g = helper.make_graph(nodes, "int8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 8, 8])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("relu_between,out_qdq", [(True, True), (False, False)])
def test_int8_engine_on_gpu_matches_cpu_int8_engine_bit_for_bit(relu_between, out_qdq):
    from backends.runners import EngineRunner
    model = _model(relu_between, out_qdq)
    x = np.random.default_rng(1).standard_normal((2, 16, 8, 8)).astype(np.float32) * 1.5
    with EngineRunner(model, flags=("int8",), device="cuda") as gpu, EngineRunner(model, flags=("int8",)) as cpu:
        out = gpu.engine.graph.output_names[0]
        got, want = gpu.infer({"x": x})[out], cpu.infer({"x": x})[out]
        int8 = {n.name: n.tactic_name for n in gpu.engine.graph.nodes if n.precision == "int8"}
    assert len(int8) >= 3, int8
    assert all(t in ("im2col-cublaslt-int8", "cublaslt-int8") for t in int8.values()), int8
    np.testing.assert_array_equal(got, want)


def test_int8_quantize_kernel_rounds_like_the_cpu():
    from native import numerics
    from native.cuda.array import GpuArray
    from native.cuda.tactics.int8 import quantize
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 200.0, -200.0, np.nan, 0.3, -127.6], np.float32) * np.float32(0.1)
    for mode, name in ((0, "half_even"), (1, "half_up"), (2, "half_away")):
        got = quantize(GpuArray.from_host(x), 0.1, mode).get()
        np.testing.assert_array_equal(got, numerics.quantize(x, np.float32(0.1), rounding=name).astype(np.int8))


def _float_convnet(shape=(2, 8, 12, 12)):
    rng = np.random.default_rng(4)
    w1 = numpy_helper.from_array((rng.standard_normal((32, 8, 3, 3)) * 0.2).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 32, 3, 3)) * 0.1).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2])]
    g = helper.make_graph(nodes, "calib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("shape", [(2, 8, 12, 12), (1, 8, 11, 11)])
def test_calibrated_int8_engine_on_gpu_matches_cpu_int8_engine_bit_for_bit(tmp_path, shape):
    """(2, 8, 12, 12): both convolutions batched into one GEMM; (1, 8, 11, 11): conv1's 121 pixels are no multiple
    of 4 (cuBLASLt's INT8 alignment), image by image."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    model = _float_convnet(shape)
    rng = np.random.default_rng(2)
    batches = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    x = rng.standard_normal(shape).astype(np.float32)
    cache = tmp_path / "calib.cache"   # one set of scales for both devices (entropy thresholds move with the
    #                                     FP32 engine's last bits, which differ between cuDNN and the CPU)
    # INT8 is a permission: a GPU build times each INT8 layer against FP32 and may run it in FP32 (TensorRT's
    # rule); ENABLE_TACTIC_HEURISTIC times nothing, so every layer with scales runs INT8 on both devices
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu, \
            EngineRunner(model, flags=("int8", "enable_tactic_heuristic"), device="cuda",
                         calibrator=Calibrator(batches, cache=cache)) as gpu:
        got, want = gpu.infer({"x": x}, taps=["r1"]), cpu.infer({"x": x}, taps=["r1"])
        int8 = {n.name: n.tactic_name for n in gpu.engine.graph.nodes if n.precision == "int8"}
    assert len(int8) == 2 and set(int8.values()) == {"im2col-cublaslt-int8"}, int8
    assert "r1" in got and "r1" in want, (sorted(got), sorted(want))
    np.testing.assert_array_equal(got["r1"], want["r1"])
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("form", ["gemm", "matmul_add"])
def test_qdq_linear_with_bias_on_gpu_matches_cpu_bit_for_bit(form):
    """A Q/DQ nn.Linear with a bias is one INT8 layer on both devices (cuBLASLt IMMA on the GPU), equal bit for bit."""
    from backends.runners import EngineRunner
    from tests.backends.test_int8_qdq import _qdq_linear
    model, shape = _qdq_linear(form)
    x = (np.random.default_rng(12).standard_normal(shape) * 1.5).astype(np.float32)
    with EngineRunner(model, flags=("int8",), device="cuda") as gpu, EngineRunner(model, flags=("int8",)) as cpu:
        got, want = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        fc = [(n.precision, n.tactic_name) for n in gpu.engine.graph.nodes if n.kind == "MatrixMultiply"]
    assert fc == [("int8", "cublaslt-int8")], fc
    np.testing.assert_array_equal(got, want)


def test_int8_residual_block_on_gpu_matches_cpu_bit_for_bit(tmp_path):
    """conv1 + ReLU -> conv2 + residual(r1) + ReLU (requantized INT8 output: the fused finish kernel's residual
    mode) -> conv3 -> y: the GPU equals the CPU bit for bit, taps included."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    rng = np.random.default_rng(5)
    w = {f"w{i}": (rng.standard_normal(s) * 0.15).astype(np.float32)
         for i, s in ((1, (16, 8, 3, 3)), (2, (16, 16, 3, 3)), (3, (8, 16, 1, 1)))}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a2"], name="add2"),
             helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    batches = [{"x": rng.standard_normal((2, 8, 10, 10)).astype(np.float32)} for _ in range(3)]
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    cache = tmp_path / "calib.cache"
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu, \
            EngineRunner(model, flags=("int8", "enable_tactic_heuristic"), device="cuda",
                         calibrator=Calibrator(batches, cache=cache)) as gpu:
        got, want = gpu.infer({"x": x}, taps=["r1", "r2"]), cpu.infer({"x": x}, taps=["r1", "r2"])
        conv2 = next(n for n in gpu.engine.graph.nodes if "conv2" in n.name)
    assert conv2.precision == "int8" and [s["op"] for s in conv2.params["post_ops"]] == ["add", "activation"]
    assert conv2.params["int8"]["output_scale"] is not None
    for name in ("r1", "r2", "y"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
