"""CUDA graphs are a CUDA-device option: asking for them on a CPU engine is a UsageError that says what to do."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def test_cuda_graph_refused_on_cpu_engine(tmp_path):
    from backends.runners import EngineRunner
    from native.errors import UsageError
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    with EngineRunner(str(path)) as r:
        with pytest.raises(UsageError, match="cuda device"):
            r.context.enable_cuda_graph()
        y = r.infer({"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)})["y"]
        assert r.context.timings is None      # host memory: no copy/compute split to report
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])


def test_device_cuda_without_a_gpu_is_a_usage_error(tmp_path, capsys):
    """No cuda-python or no GPU: exit 2 with what is missing, not an internal error."""
    from native.cuda import available
    if available():
        pytest.skip("this machine has a usable GPU")
    from debugkit.cli.main import main
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    assert main(["run", str(path), "--engine", "--device", "cuda"]) == 2
    out = capsys.readouterr()
    assert "--device cuda cannot run here" in out.out + out.err
