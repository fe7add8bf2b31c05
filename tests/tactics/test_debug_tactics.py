"""debug tactics finds faulty tactics; debug build sorts good and bad builds; inspect diff-tactics names the layer."""
import json
import math
import os

import pytest

from debugkit.cli.main import main
from native.tactic_modules import unload_tactics_module
from tests.tactics.models import conv_chain, save

FAULTY = os.path.join(os.path.dirname(__file__), "faulty_tactics.py")


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # loaded afresh by each test: flaky-conv's offers come from a random stream seeded at import
    # (DEBUGKIT_FAULTY_SEED), which a test that loaded the module before in this process would have moved on
    unload_tactics_module(FAULTY)
    yield save(conv_chain(), tmp_path)
    unload_tactics_module(FAULTY)


def _debug_tactics(model, sources, *extra):
    """The failing build picks its tactics by the heuristic, not by timing: which layers differ from the reference
    build (and so the probe budget) would otherwise depend on which tactic won a timing race on a loaded machine."""
    return main(["debug", "tactics", model, "--tactics-module", FAULTY, "--tactic-sources", sources,
                 "--tactic-heuristic", "--json", "R.json", "-q", *extra])


def test_one_faulty_tactic_is_found_within_budget(model, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=32")
    assert _debug_tactics(model, "faulty-conv") == 0
    r = json.load(open("R.json"))
    assert [(g["layer"], g["tactic"], g["onnx_nodes"]) for g in r["guilty"]] == \
        [("conv3 + relu3", "faulty-conv", ["conv3", "relu3"])]
    # the 7 convolutions differ; other layers may too, as timing picks their fastest tactic (no timing luck here)
    assert r["differing_layers"] >= 7 and r["probes"] <= 2 * math.log2(r["differing_layers"]) + 4
    assert r["fixed_replay_passes"]
    assert r["verdict"]["status"] == "PASSED" and r["verdict"]["exit_code"] == 0   # the one verdict model
    assert r["verdict"]["details"]["answer"] == "1 guilty layer(s)"
    fixed = json.load(open("fixed_tactics.json"))
    assert fixed["layers"]["conv3 + relu3"]["tactic"] == "im2col-gemm"
    assert fixed["layers"]["conv1 + relu1"]["tactic"] == "faulty-conv"   # the harmless ones stay
    # the replay it wrote builds an engine that passes; the bad one fails
    assert main(["run", model, "--engine", "--onnxrt", "--tactics-module", FAULTY, "--load-tactics",
                 "fixed_tactics.json", "-q"]) == 0
    # every probe is in the log, and --resume answers them from it without building mixed engines again
    log = [json.loads(line) for line in open("debug_tactics_log.jsonl")]
    assert len(log) == 1 + 2 + r["probes"] + r["end_point_checks"]   # meta, the two end points' tactics, probes
    assert _debug_tactics(model, "faulty-conv", "--resume") == 0
    assert len(open("debug_tactics_log.jsonl").readlines()) == len(log)


def test_two_faulty_tactics_on_different_layers(model, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=16;faulty-matmul:k=64")
    assert _debug_tactics(model, "faulty-conv,faulty-matmul") == 0
    r = json.load(open("R.json"))
    assert sorted((g["layer"], g["tactic"]) for g in r["guilty"]) == \
        [("conv1 + relu1", "faulty-conv"), ("fc", "faulty-matmul")]
    assert r["fixed_replay_passes"] and r["probes"] <= 2 * math.log2(r["differing_layers"]) + 4


def test_given_replay_files_and_bad_inputs(model, monkeypatch, capsys):
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=40")
    assert main(["convert", model, "-o", "bad.plan", "--tactics-module", FAULTY, "--tactic-sources", "faulty-conv",
                 "--save-tactics", "B.json"]) == 0
    assert main(["debug", "tactics", model, "--tactics-module", FAULTY, "--bad-tactics", "B.json",
                 "--report", "R.json", "-q"]) == 0
    assert [g["layer"] for g in json.load(open("R.json"))["guilty"]] == ["conv4 + relu4"]
    # a passing "bad" build is a clear error, exit 2; so is a replay for another model
    monkeypatch.delenv("DEBUGKIT_FAULTY")
    unload_tactics_module(FAULTY)
    assert main(["debug", "tactics", model, "--report", "R2.json", "-q"]) == 2
    assert "failing build passes the check" in capsys.readouterr().err
    other = save(conv_chain([3, 8, 8]), __import__("pathlib").Path("."), "other.onnx")
    assert main(["convert", other, "-o", "o.plan", "--save-tactics", "O.json"]) == 0
    assert main(["debug", "tactics", model, "--bad-tactics", "O.json", "-q"]) == 2
    assert "recorded for another model" in capsys.readouterr().err


@pytest.mark.timing   # debug build finds a tactic that timing picks when it is offered (faulty_tactics.py)
def test_debug_build_until_bad_and_diff_tactics(model, monkeypatch, capsys):
    monkeypatch.setenv("DEBUGKIT_FAULTY", "flaky-conv:cin=24")
    monkeypatch.setenv("DEBUGKIT_FAULTY_SEED", "5")
    # it stops at the first bad build, and a bad build is a failing verdict: exit 1 (docs/run.md, "Exit codes")
    assert main(["debug", "build", model, "--tactics-module", FAULTY, "--until", "bad", "--artifacts-dir", "A",
                 "--timing-cache", "tc.json", "-q"]) == 1
    good, bad = sorted(os.listdir("A/good")), sorted(os.listdir("A/bad"))
    assert len(bad) == 1 and good, (good, bad)
    assert json.load(open(f"A/bad/{bad[0]}"))["layers"]["conv2 + relu2"]["tactic"] == "flaky-conv"
    capsys.readouterr()
    assert main(["inspect", "diff-tactics", "--good", "A/good", "--bad", "A/bad"]) == 0
    out = capsys.readouterr().out
    first = out.split("----\n", 1)[1].splitlines()[0].strip()
    assert first == "conv2 + relu2" and "flaky-conv (in 1/1 bad builds)" in out


def test_two_faulty_tactics_of_one_kind_each_keep_to_their_layer(model, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=16;faulty-conv-rows:cin=40")
    assert _debug_tactics(model, "faulty-conv,faulty-conv-rows") == 0
    r = json.load(open("R.json"))
    assert sorted((g["layer"], g["tactic"]) for g in r["guilty"]) == \
        [("conv1 + relu1", "faulty-conv"), ("conv4 + relu4", "faulty-conv-rows")]
    assert r["probes"] <= 2 * math.log2(r["differing_layers"]) + 4 and r["fixed_replay_passes"]


def test_debug_build_in_fp16_judges_by_the_reduced_precision_default(model, capsys):
    """--fp16 without comparison options: the scale-free default (relative L2 / cosine) judges the build, named in the
    first line, so a healthy FP16 build is good; run's FP32-grade atol would have called it bad."""
    assert main(["debug", "build", model, "--fp16", "--until", "1", "--artifacts-dir", "A", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("check: every output's relative L2 error <= 0.01")
    assert "1 good, 0 bad" in out
    assert main(["debug", "build", model, "--fp16", "--until", "1", "--artifacts-dir", "B", "--atol", "1e-7",
                 "--rtol", "0", "-q"]) == 1   # issue 21's exit rule: 0 only when every build passed
    assert "0 good, 1 bad" in capsys.readouterr().out


def test_debug_build_on_workers_files_what_the_serial_loop_files(model, monkeypatch, capsys):
    """--workers 2: the builds run two at a time on worker processes, each built and checked there; the search
    process files them in order and stops where the serial loop stops, so the build that ran beside the first bad
    one is not filed; plans and --timing-cache timings come back from the workers."""
    monkeypatch.setenv("DEBUGKIT_FAULTY", "faulty-conv:cin=24")
    common = ["debug", "build", model, "--tactics-module", FAULTY, "--tactic-sources", "faulty-conv",
              "--tactic-heuristic", "-q"]
    assert main(common + ["--until", "bad", "--artifacts-dir", "S"]) == 1
    assert main(common + ["--until", "bad", "--artifacts-dir", "W", "--workers", "2"]) == 1
    for d in ("S", "W"):
        assert os.listdir(f"{d}/good") == [] and os.listdir(f"{d}/bad") == ["iter000_tactics.json"]
        assert json.load(open(f"{d}/bad/iter000_tactics.json"))["layers"]["conv2 + relu2"]["tactic"] == "faulty-conv"
    # every build bad, --until good: the loop gives up after --max-iterations, batch by batch
    assert main(common + ["--until", "good", "--max-iterations", "3", "--artifacts-dir", "M", "--workers", "2"]) == 1
    assert sorted(os.listdir("M/bad")) == [f"iter00{i}_tactics.json" for i in range(3)]
    assert "3 build(s): 0 good, 3 bad" in capsys.readouterr().out
    monkeypatch.delenv("DEBUGKIT_FAULTY")
    assert main(["debug", "build", model, "--until", "3", "--workers", "2", "--save-plans", "--artifacts-dir", "P",
                 "--timing-cache", "tc.json", "-q"]) == 0
    assert sorted(os.listdir("P/good")) == sorted([f"iter00{i}_tactics.json" for i in range(3)] +
                                                  [f"iter00{i}.plan" for i in range(3)])
    from backends.engine.plan import deserialize_plan
    graph = deserialize_plan(open("P/good/iter001.plan", "rb").read())[1]
    assert [n.name for n in graph.nodes] and os.listdir("P/bad") == []
    assert json.load(open("tc.json"))   # the workers' timings, merged and saved here


def test_debug_build_on_workers_with_a_check_command(model, capsys):
    """--check CMD on workers: each worker writes its build's plan and replay to a scratch directory of its own and
    runs the command on them there; its exit status sorts the build."""
    import sys
    probe = "import json, os, sys; sys.exit(0 if os.path.getsize(sys.argv[1]) > 0 and json.load(open(sys.argv[2]))['layers'] else 1)"
    assert main(["debug", "build", model, "--until", "2", "--workers", "2", "--artifacts-dir", "C", "-q",
                 "--check", f"{sys.executable} -c \"{probe}\" {{plan}} {{tactics}}"]) == 0
    assert sorted(os.listdir("C/good")) == ["iter000_tactics.json", "iter001_tactics.json"]
    assert "2 build(s): 2 good, 0 bad" in capsys.readouterr().out
