"""The forward LSTM on the GPU (cuBLASLt steps + an NVRTC cell) against the CPU's RNN kernel and ONNX Runtime;
other configurations run as host layers. Skipped without a GPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _lstm(steps=7, batch=3, inp=16, hidden=32, with_state=True):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, inp)) * 0.3).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32), "R")
    b = numpy_helper.from_array((rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32), "B")
    inits = [w, r, b]
    ins = ["x", "W", "R", "B", ""]
    if with_state:
        inits += [numpy_helper.from_array((rng.standard_normal((1, batch, hidden)) * 0.5).astype(np.float32), "h0"),
                  numpy_helper.from_array((rng.standard_normal((1, batch, hidden)) * 0.5).astype(np.float32), "c0")]
        ins += ["h0", "c0"]
    node = helper.make_node("LSTM", ins, ["y", "yh", "yc"], name="lstm", hidden_size=hidden)
    g = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, inp])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "yh", "yc")],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


@pytest.mark.parametrize("with_state", [True, False])
def test_lstm_on_the_gpu_matches_cpu_and_onnxruntime(with_state):
    import onnxruntime as ort

    from backends.runners import EngineRunner
    model = _lstm(with_state=with_state)
    x = np.random.default_rng(1).standard_normal((7, 3, 16)).astype(np.float32)
    with EngineRunner(model, device="cuda") as gpu, EngineRunner(model) as cpu:
        got, want = gpu.infer({"x": x}), cpu.infer({"x": x})
        tactic = next(n.tactic_name for n in gpu.engine.graph.nodes if n.kind == "RNN")
    assert tactic == "cublaslt-steps"
    ref = dict(zip(("y", "yh", "yc"), ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})))
    for k in ("y", "yh", "yc"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)
