"""A layer that fails on inputs whose dynamic dims defaulted to 1 says so and points at --input-shapes (issue 25)."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _reshape_model(path):
    """x[N, 4] reshaped to [3, -1]: fine for N = 3, fails for the default N = 1 (4 elements are not 3 rows)."""
    node = h.make_node("Reshape", ["x", "s"], ["y"], name="rows")
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(np.array([3, -1]), "s")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_failure_on_defaulted_dims_points_at_input_shapes(cli, tmp_path):
    path = tmp_path / "m.onnx"
    _reshape_model(path)
    code, _, err = cli("run", path, "--engine")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "layer 'rows'" in line and "were set to 1" in line and "--input-shapes x:[...]" in line, err
    code, _, err = cli("run", path, "--engine", "--input-shapes", "x:[3,4]")
    assert code in (0, 1) and "were set to 1" not in err, err
