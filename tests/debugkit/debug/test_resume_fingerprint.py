"""debug precision --resume: a log recorded with any other option (or model, or loader script content) is refused
with exit 2 naming the option and both full values; an interrupted log (torn last line) resumes to the same answer
as an uninterrupted search."""
import json

import onnx
import pytest

from debugkit.cli.main import main
from tests.debugkit.debug.test_precision import mlp, planted  # noqa: F401  (fixture)

pytest.importorskip("backends.engine.builder.precision_spec")

BASE = ["--atol", "1e-2"]


def _search(tmp_path, model, *extra):
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", model, "--fp16", "-o", str(out), "--log", str(tmp_path / "log.jsonl"),
               *BASE, *extra])
    return rc, (json.loads(out.read_text()) if out.exists() and rc == 0 else None)


CHANGES = [
    (["--atol", "2e-2"], "--atol"),   # given last: argparse keeps the later --atol
    (["--rtol", "1e-2"], "--rtol"),
    (["--check-error-stat", "mean"], "--check-error-stat"),
    (["--compare", "cosine"], "--compare"),
    (["--seed", "2"], "--seed"),
    (["--val-range", "[0,2]"], "--val-range"),
    (["--iterations", "2"], "--iterations"),
    (["--input-shapes", "x:[4,16]"], "--input-shapes"),
    (["--mode", "bisect"], "--mode"),
    (["--higher", "fp16"], None),      # refused earlier (fp16 with --fp16 keeps nothing higher)
    (["--reduced-probability-outputs"], "--reduced-probability-outputs"),
    (["--reference", "fp64"], "--reference"),
    (["--device", "dla"], "--device"),
]


@pytest.fixture
def logged(tmp_path, planted):  # noqa: F811
    model, must = planted
    rc, res = _search(tmp_path, model)
    assert rc == 0 and sorted(res["layer_precisions"]) == must
    return model, must, res, (tmp_path / "log.jsonl").read_text()


def test_each_changed_option_is_refused_naming_it_and_both_values(tmp_path, logged, capsys):
    model, must, res, log = logged
    capsys.readouterr()
    for extra, option in CHANGES:
        rc, _ = _search(tmp_path, model, "--resume", *extra)
        err = capsys.readouterr().err
        assert rc == 2, (extra, err)
        if option is not None:
            assert f"{option}:" in err and "belongs to another search" in err, (extra, err)
        assert (tmp_path / "log.jsonl").read_text() == log   # nothing appended to the refused log
    # the full values, not cut: two tolerances that differ only in their 25th character
    long_a, long_b = "0.0100000000000000000000001", "0.0100000000000000000000002"
    rc, _ = _search(tmp_path, model, "--atol", long_a)
    rc, _ = _search(tmp_path, model, "--resume", "--atol", long_b)
    err = capsys.readouterr().err
    assert rc == 2 and long_a in err and long_b in err


def test_another_model_is_refused_naming_its_hash(tmp_path, logged, capsys):
    model, must, res, log = logged
    other = tmp_path / "other.onnx"
    onnx.save(mlp(depth=3), other)
    rc, _ = _search(tmp_path, str(other), "--resume")
    err = capsys.readouterr().err
    assert rc == 2 and "model (sha256):" in err and res["model_sha256"] in err


def test_a_changed_loader_script_is_refused_even_under_the_same_path(tmp_path, planted, capsys):  # noqa: F811
    model, must = planted
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\n"
                      "def load_data():\n"
                      "    return {'x': np.random.default_rng(1).random((4, 16), dtype=np.float32)}\n")
    rc, res = _search(tmp_path, model, "--data-loader-script", str(script))
    assert rc == 0 and sorted(res["layer_precisions"]) == must
    script.write_text(script.read_text().replace("default_rng(1)", "default_rng(2)"))
    capsys.readouterr()
    rc, _ = _search(tmp_path, model, "--resume", "--data-loader-script", str(script))
    err = capsys.readouterr().err
    assert rc == 2 and "--data-loader-script (content sha256):" in err
    assert "feeds (sha256 of the input arrays)" in err


def test_unchanged_resume_of_a_torn_log_gives_the_uninterrupted_answer(tmp_path, logged, capsys):
    model, must, res, log = logged
    lines = log.splitlines()
    assert len(lines) > 6
    assert json.loads(lines[3])["artifact"] == {"ranking": "layer sensitivity"}   # the ranking, after 2 probes
    torn = "\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2]   # killed while writing probe 4
    (tmp_path / "log.jsonl").write_text(torn)
    capsys.readouterr()
    rc, again = _search(tmp_path, model, "--resume")
    err = capsys.readouterr().err
    assert rc == 0 and "torn" in err
    assert again["layer_precisions"] == res["layer_precisions"]
    assert again["replayed"] >= 3 and again["probes"] + 3 <= res["probes"] + again["replayed"]
    # the repaired log is whole again: every line parses, and resuming once more builds nothing
    assert all(json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines())
    rc, third = _search(tmp_path, model, "--resume")
    assert rc == 0 and third["probes"] == 0 and third["layer_precisions"] == res["layer_precisions"]


def test_a_damaged_line_before_the_end_is_an_error(tmp_path, logged, capsys):
    model, must, res, log = logged
    lines = log.splitlines()
    lines[2] = lines[2][:10]
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")
    rc, _ = _search(tmp_path, model, "--resume")
    assert rc == 2 and "line 3 is not JSON" in capsys.readouterr().err
