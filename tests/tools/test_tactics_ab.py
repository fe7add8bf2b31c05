"""tools/tactics_ab.py: two engines of a model, one without the named tactics, timed in one loop; the row says
what each chose and how far their outputs are apart; a tactic name no layer kind has is a usage error (exit 2)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tools.tactics_ab import compare, line, main  # noqa: E402


def _model(tmp_path):
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 96])], [w])
    path = str(tmp_path / "mm.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_engine_a_does_without_the_excluded_tactics(tmp_path):
    path = _model(tmp_path)
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)}
    row = compare(path, feeds, ["blas"], 3)
    assert "blas" not in row["A"]["tactics"]["MatrixMultiply"]
    layers = [sum(row[k]["tactics"]["MatrixMultiply"].values()) for k in ("A", "B")]
    assert layers == [1, 1]
    assert 0 <= row["max_abs_diff"] < 1e-4
    assert row["A"]["median_ms"] > 0 and row["B"]["median_ms"] > 0
    assert row["B_over_A"] == row["B"]["median_ms"] / row["A"]["median_ms"]
    assert line("mm", row).startswith("mm: A ") and "B / A" in line("mm", row)


def test_an_unknown_tactic_name_is_a_usage_error(tmp_path, capsys):
    assert main([_model(tmp_path), "--exclude", "no-such-tactic", "--iterations", "2"]) == 2
    assert "no-such-tactic" in capsys.readouterr().err
