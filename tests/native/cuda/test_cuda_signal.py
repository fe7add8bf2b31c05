"""The STFT plugin on the GPU (frames + one GEMM with a windowed DFT basis) against the CPU plugin (float64 FFT)
and ONNX Runtime. Skipped without a GPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _stft(frame_len=64, step=16, onesided=1, window=True, real_2d=False):
    inits = [numpy_helper.from_array(np.int64(step), "step"),
             numpy_helper.from_array(np.int64(frame_len), "flen")]
    ins = ["x", "step"]
    if window:
        inits.append(numpy_helper.from_array(np.hanning(frame_len).astype(np.float32), "win"))
        ins += ["win", "flen"]
    else:
        ins += ["", "flen"]
    shape = [2, 400] if real_2d else [2, 400, 1]
    g = helper.make_graph([helper.make_node("STFT", ins, ["y"], name="stft", onesided=onesided)], "stft",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), shape


@pytest.mark.parametrize("window,onesided,real_2d", [(True, 1, False), (False, 1, False), (True, 0, False),
                                                     (True, 1, True)])
def test_stft_on_the_gpu_matches_the_cpu_plugin(window, onesided, real_2d):
    from backends.runners import EngineRunner
    model, shape = _stft(onesided=onesided, window=window, real_2d=real_2d)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    with EngineRunner(model, device="cuda") as gpu, EngineRunner(model) as cpu:
        got, want = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        tactic = next(n.tactic_name for n in gpu.engine.graph.nodes if n.kind == "Plugin")
    assert tactic == "dft-gemm"
    assert got.shape == want.shape == (2, 1 + (400 - 64) // 16, 33 if onesided else 64, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
