"""tools/benchmark.py times saved plans (alone, or beside the ONNX model they came from, against ONNX Runtime)."""
import json

import pytest

from onnx import helper

import tools.benchmark as bench
from tests.debugkit.test_run_truth import _model, _save


@pytest.fixture
def model_and_plan(tmp_path):
    from debugkit.cli.main import main as cli
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", ["N", 8])], [("y", ["N", 8])], name="relu")
    path = _save(m, tmp_path / "m.onnx")
    plan = tmp_path / "m.plan"
    assert cli(["convert", path, "-o", str(plan), "--input-shapes", "x:2x8"]) == 0
    return path, str(plan)


def test_plan_alone_and_beside_its_model(model_and_plan, tmp_path, capsys):
    path, plan = model_and_plan
    j = tmp_path / "b.json"
    assert bench.main([plan, "--iterations", "3", "--warmup", "1", "--json", str(j)]) == 0
    out = capsys.readouterr().out
    assert "is `debugkit bench" in out and "loaded plan, 1 layers" in out   # one benchmark: debugkit bench
    doc = json.loads(j.read_text())
    assert doc["build_seconds"] is None and doc["inferences"] == 3
    assert bench.main([path, "--load-engine", plan, "--compare-onnxrt", "--iterations", "3", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "loaded plan" in out and "engine/onnxrt median latency" in out and "onnxrt settings:" in out


def test_plan_of_another_model_and_bad_options(model_and_plan, tmp_path, capsys):
    path, plan = model_and_plan
    other = _save(_model([helper.make_node("Sigmoid", ["x"], ["y"], name="s")], [("x", [2, 8])], [("y", [2, 8])]),
                  tmp_path / "o.onnx")
    assert bench.main([other, "--load-engine", plan]) == 2
    assert "was built from another model" in capsys.readouterr().err
    assert bench.main([plan, "--compare-onnxrt"]) == 2
    assert "--compare onnxrt needs the ONNX model" in capsys.readouterr().err
    assert bench.main([plan, "--shapes", "X:2x8"]) == 2
    assert "unknown input(s) ['X']" in capsys.readouterr().err
