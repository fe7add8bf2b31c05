"""debug tactics --resume: any changed option (tolerance, data, build flag, tactic sources, tactics module content)
is refused with exit 2 naming it and both values; an interrupted log resumes to the uninterrupted answer."""
import json
import os
import shutil

import pytest

from debugkit.cli.main import main
from native.tactic_modules import unload_tactics_module
from tests.tactics.models import conv_chain, save

FAULTY = os.path.join(os.path.dirname(__file__), "faulty_tactics.py")


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=32")
    module = str(tmp_path / "faulty.py")
    shutil.copy(FAULTY, module)
    yield save(conv_chain(), tmp_path), module
    unload_tactics_module(module)


def _tactics(model, module, *extra):
    return main(["debug", "tactics", model, "--tactics-module", module, "--tactic-sources", "faulty-conv",
                 "--report", "R.json", "-q", *extra])


CHANGES = [(["--atol", "0.5"], "--atol"), (["--rtol", "0.5"], "--rtol"), (["--seed", "3"], "--seed"),
           (["--val-range", "[-1,1]"], "--val-range"), (["--iterations", "2"], "--iterations"),
           (["--fp16"], "--fp16"), (["--disable-fusion"], "--disable-fusion"),
           (["--check-error-stat", "median"], "--check-error-stat"),
           (["--layer-precisions", "conv1:fp16"], "--layer-precisions")]


def test_each_changed_option_is_refused(model, capsys):
    path, module = model
    assert _tactics(path, module) == 0
    first = json.load(open("R.json"))
    log = open("debug_tactics_log.jsonl").read()
    capsys.readouterr()
    for extra, option in CHANGES:
        assert _tactics(path, module, "--resume", *extra) == 2, extra
        err = capsys.readouterr().err
        assert f"{option}:" in err and "belongs to another search" in err, (extra, err)
        assert open("debug_tactics_log.jsonl").read() == log
    # tactic sources: both full values, not cut to 24 characters
    assert main(["debug", "tactics", path, "--tactics-module", module, "--tactic-sources",
                 "faulty-conv,faulty-matmul", "--resume", "-q"]) == 2
    err = capsys.readouterr().err
    assert '"faulty-conv"' in err and '"faulty-conv,faulty-matmul"' in err
    # the tactics module edited in place (same path): its content hash differs
    with open(module, "a") as f:
        f.write("\n# edited\n")
    unload_tactics_module(module)
    assert _tactics(path, module, "--resume") == 2
    assert "--tactics-module (content sha256):" in capsys.readouterr().err
    assert first["guilty"][0]["layer"] == "conv3 + relu3"


def test_a_torn_log_resumes_to_the_same_answer(model, capsys):
    path, module = model
    assert _tactics(path, module) == 0
    first = json.load(open("R.json"))
    lines = open("debug_tactics_log.jsonl").read().splitlines()
    with open("debug_tactics_log.jsonl", "w") as f:
        f.write("\n".join(lines[:3]) + "\n" + lines[3][:15])
    capsys.readouterr()
    assert main(["debug", "tactics", path, "--tactics-module", module, "--tactic-sources", "faulty-conv",
                 "--report", "R.json", "--resume"]) == 0
    assert "last line (line 4) is torn" in capsys.readouterr().err
    again = json.load(open("R.json"))
    assert [g["layer"] for g in again["guilty"]] == [g["layer"] for g in first["guilty"]]
    assert len(open("debug_tactics_log.jsonl").read().splitlines()) == len(lines)
