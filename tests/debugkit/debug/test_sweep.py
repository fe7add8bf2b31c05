"""debugkit sweep: one summary table (JSON and HTML) over several models, a failing model marked as such."""
import json

import onnx

from debugkit.cli.main import main
from tests.debugkit.conftest import chain_model


def test_sweep_run_over_models_writes_one_table(tmp_path, capsys):
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(chain_model(), good)
    broken = chain_model()
    broken.graph.node[0].op_type = "NoSuchOp"
    onnx.save(broken, bad)
    listing = tmp_path / "models.txt"
    listing.write_text(f"# models\n{bad}\n")
    rc = main(["sweep", str(good), "--models-file", str(listing), "-o", str(tmp_path / "sw"),
               "--task-args", "--engine --onnxrt --input-shapes x:[2,4]"])
    out = capsys.readouterr().out
    assert rc == 1
    summary = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    by = {r["model"]: r for r in summary["results"]}
    assert by["good"]["status"] == "PASSED" and by["good"]["rc"] == 0 and by["good"]["max_abs"] < 1e-5
    assert by["bad"]["rc"] == 2 and "NoSuchOp" in by["bad"]["error"] and by["bad"]["status"] == "ERROR"
    assert "<td>good</td><td>PASSED</td>" in (tmp_path / "sw" / "sweep.html").read_text()
    assert "good" in out and "PASSED" in out


def test_sweep_without_models_is_a_usage_error(tmp_path, capsys):
    assert main(["sweep", "-o", str(tmp_path / "sw")]) == 2
    assert main(["sweep", str(tmp_path / "missing.onnx")]) == 2
    assert "not found" in capsys.readouterr().err
