"""tools/ort_beside_pool.py: times ONNX Runtime beside our rested and our dozing pool worker and says both."""
import re

import numpy as np
import onnx
from onnx import TensorProto, helper

from tools import ort_beside_pool


def test_it_reports_both_onnx_runtime_times(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.eye(8, dtype=np.float32).ravel().tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [x], [y], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert ort_beside_pool.main([str(path), "--rounds", "2", "--calls", "3"]) == 0
    out = capsys.readouterr().out
    got = re.search(r"ONNX Runtime ([\d.]+) ms beside our rested worker, ([\d.]+) ms beside it dozing "
                    r"\(2 rounds of 3 calls", out)
    assert got, out
    assert float(got.group(1)) > 0 and float(got.group(2)) > 0
