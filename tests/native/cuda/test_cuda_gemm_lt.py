"""cuBLASLt GEMMs: every heuristic algorithm against float64 references, fused bias/ReLU/GELU epilogues and the
residual add, FP16/BF16/FP8 operands, and whole engines choosing among cuBLASLt algorithms. Skipped without a GPU."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from native.tactics import TacticRefusal

pytestmark = pytest.mark.cuda


def _dev(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(x)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("sa,sb,ta,tb", [((37, 19), (19, 23), False, False), ((3, 37, 19), (19, 23), False, False),
                                         ((64, 128), (96, 128), False, True), ((4, 19, 37), (4, 23, 19), True, True),
                                         ((2, 5, 8), (2, 8, 6), False, False)])
def test_every_algorithm_fp32_matches_float64(sa, sb, ta, tb):
    from native.cuda.tactics.gemm_lt import ALGOS, gemm
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ref = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b, dtype=np.float64)
    ran = 0
    for i in range(ALGOS):
        try:
            got = gemm(_dev(a), _dev(b), i, ta, tb).get()
        except TacticRefusal:       # cuBLASLt offered fewer algorithms for this problem
            continue
        ran += 1
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=f"algorithm {i}")
    assert ran >= 1


@pytest.mark.parametrize("epi", ["BIAS", "RELU_BIAS", "GELU_BIAS", "RELU"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_epilogues(epi, dtype):
    import ml_dtypes
    from native.cuda.tactics.gemm_lt import gemm
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((3, 40, 64)).astype(dt), (rng.standard_normal((64, 48)) * 0.2).astype(dt)
    bias = rng.standard_normal(48).astype(dt)
    z = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if "BIAS" in epi:
        z = z + bias.astype(np.float64)
    z = np.maximum(z, 0) if "RELU" in epi else (_gelu_tanh(z) if "GELU" in epi else z)
    got = gemm(_dev(a), _dev(b), 0, epilogue=epi, bias=_dev(bias) if "BIAS" in epi else None).get()
    assert got.dtype == dt and got.shape == z.shape
    tol = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 1e-1}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), z, rtol=tol, atol=tol)


def test_residual_add_through_c():
    from native.cuda.tactics.gemm_lt import gemm
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((33, 16)).astype(np.float32), rng.standard_normal((16, 24)).astype(np.float32)
    c, bias = rng.standard_normal((33, 24)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    got = gemm(_dev(a), _dev(b), 0, epilogue="RELU_BIAS", bias=_dev(bias), c=_dev(c)).get()
    np.testing.assert_allclose(got, np.maximum(a.astype(np.float64) @ b + c + bias, 0), rtol=1e-5, atol=1e-5)


def test_fp8_gemm_matches_the_cpu_emulation():
    from native.cuda.tactics.fp8 import to_fp8
    from native.cuda.tactics.gemm_lt import gemm
    from native.numerics import to_storage
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((64, 128)) * 3).astype(np.float16)
    w = (rng.standard_normal((96, 128)) * 0.5).astype(np.float32)      # [N, K]
    a8 = to_fp8(_dev(a))
    np.testing.assert_array_equal(a8.get().astype(np.float32), to_storage(a, "fp8").astype(np.float32))
    got = gemm(a8, _dev(to_storage(w, "fp8")), 0, transpose_b=True).get()
    assert got.dtype == np.float16
    ref = to_storage(a, "fp8").astype(np.float64) @ to_storage(w, "fp8").astype(np.float64).T
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


def _mlp(act="Relu"):
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32) * 0.1, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((128, 32)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
             helper.make_node(act, ["hb"], ["r"], name="act1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16, 32])], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("flags", [(), ("fp16",), ("bf16",), ("fp8",)])
def test_engines_pick_cublaslt_algorithms_by_timing(tmp_path, flags):
    from backends.runners import EngineRunner
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    x = np.random.default_rng(6).standard_normal((4, 16, 64)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", flags=flags) as gpu, EngineRunner(str(path), flags=flags) as cpu:
        y_gpu, y_cpu = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        mm = [n for n in gpu.engine.graph.nodes if n.kind == "MatrixMultiply"]
    cos = float(np.dot(y_gpu.ravel(), y_cpu.ravel()) / (np.linalg.norm(y_gpu) * np.linalg.norm(y_cpu)))
    assert cos > (0.9999 if not flags else 0.999), cos
    if not flags:
        np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-4, atol=1e-4)
    assert all(not n.tactic_name.startswith("host:") for n in mm), [n.tactic_name for n in mm]
    timed = mm[0].meta.get("timings_ms") or {}
    assert any(str(k).startswith("cublaslt-algo-") for k in timed), timed   # the algorithm list was timed


def test_engine_gemm_takes_its_residual_as_c(tmp_path):
    """x @ W + b + x built FP16 on the GPU: the residual add is the GEMM's post-op (no ElementWise layer), run by a
    cuBLASLt algorithm, and the engine matches the CPU engine."""
    from backends.runners import EngineRunner
    rng = np.random.default_rng(31)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) / 8, "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["a"], name="bias_add"),
             helper.make_node("Add", ["a", "x"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32, 64])], [w, b])
    path = tmp_path / "res.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    x = rng.standard_normal((4, 32, 64)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", flags=("fp16",)) as gpu, EngineRunner(str(path)) as cpu:
        y, ref = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        nodes = [(n.kind, n.tactic_name, [s["op"] for s in n.params.get("post_ops") or []])
                 for n in gpu.engine.graph.nodes if n.kind != "Constant"]
    assert [k for k, _, _ in nodes if k not in ("Reformat", "Cast")] == ["MatrixMultiply"], nodes
    mm = next(n for n in nodes if n[0] == "MatrixMultiply")
    assert mm[2] == ["bias", "add"], nodes
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2)
