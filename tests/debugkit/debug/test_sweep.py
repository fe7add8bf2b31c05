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


def _zoo(tmp_path):
    """Three models: one passes, one fails FP16 (planted), one cannot be parsed; a manifest with relative paths."""
    import os
    from tests.debugkit.debug.test_precision import mlp
    onnx.save(chain_model(), tmp_path / "good.onnx")
    broken = chain_model()
    broken.graph.node[0].op_type = "NoSuchOp"
    onnx.save(broken, tmp_path / "bad.onnx")
    onnx.save(mlp(depth=3), tmp_path / "mlp.onnx")
    os.makedirs(tmp_path / "sub", exist_ok=True)
    onnx.save(chain_model(scale=2.0), tmp_path / "sub" / "good.onnx")   # a second 'good': its own directory
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps([{"path": "good.onnx", "args": ["--input-shapes", "x:[2,4]"]},
                                    {"path": "bad.onnx", "args": ["--input-shapes", "x:[2,4]"]},
                                    {"path": "mlp.onnx"},
                                    {"path": "sub/good.onnx", "args": ["--input-shapes", "x:[2,4]"]}]))
    return manifest


def test_sweep_on_two_workers_gives_the_serial_verdicts_and_resumes(tmp_path, capsys):
    manifest = _zoo(tmp_path)
    argv = ["sweep", "--models-file", str(manifest), "--task-args", "--engine --onnxrt --fp16 --atol 1e-3"]
    rc1 = main([*argv, "-o", str(tmp_path / "serial")])
    rc2 = main([*argv, "-o", str(tmp_path / "two"), "--workers", "2"])
    rows = {}
    for d in ("serial", "two"):
        doc = json.loads((tmp_path / d / "sweep.json").read_text())
        rows[d] = [(r["model"], r["status"], r["rc"]) for r in doc["results"]]
    assert rc1 == rc2 == 1 and rows["serial"] == rows["two"]
    assert [m for m, _, _ in rows["two"]] == ["good", "bad", "mlp", "good_2"]
    assert rows["two"][1][1] == "ERROR" and rows["two"][0][1] == "PASSED"
    html = (tmp_path / "two" / "sweep.html").read_text()
    assert all(f"<td>{m}</td>" in html for m, _, _ in rows["two"])
    # resumable: a second run with --resume does no model again and writes the same table
    capsys.readouterr()
    rc3 = main([*argv, "-o", str(tmp_path / "two"), "--workers", "2", "--resume"])
    assert rc3 == 1 and "4 of 4 model(s) already done" in capsys.readouterr().out
    again = json.loads((tmp_path / "two" / "sweep.json").read_text())
    assert [(r["model"], r["status"], r["rc"]) for r in again["results"]] == rows["two"]


def test_sweep_precision_on_two_workers_runs_both_models(tmp_path):
    """Two `debug precision` jobs at once (each its own probe log, none refused as 'being written')."""
    from tests.debugkit.debug.test_precision import mlp
    onnx.save(mlp(depth=2), tmp_path / "a.onnx")
    onnx.save(mlp(depth=3), tmp_path / "b.onnx")
    rc = main(["sweep", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "--task", "precision", "--workers", "2",
               "--task-args", "--fp16 --atol 1e-2", "-o", str(tmp_path / "sw")])
    rows = json.loads((tmp_path / "sw" / "sweep.json").read_text())["results"]
    assert [r["status"] for r in rows] == ["FOUND", "FOUND"] and rc == 0, rows
    assert all((tmp_path / "sw" / m / "precision_probes.jsonl").exists() for m in ("a", "b"))
