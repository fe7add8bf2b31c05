"""`run` tells the whole truth (issue 15): no vacuous pass, one verdict (table, summary, exit code and JSON agree),
honest timing, NaN/Inf traced to the node that made it, plans checked against their model."""
import json

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from debugkit.data_file import escape


def _save(model, path):
    onnx.save(model, path)
    return str(path)


def _model(nodes, inputs, outputs, inits=(), name="g"):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def other(tmp_path):
    """Another model: other input and output names, other shapes."""
    return _save(_model([helper.make_node("Relu", ["image"], ["probs"], name="r")], [("image", [1, 3])],
                        [("probs", [1, 3])], name="other"), tmp_path / "other.onnx")


@pytest.fixture
def lognan(tmp_path):
    """x in [0,1]: Log(x - 0.5) makes the first NaN; the engine fuses it with what follows, so only 'y' shows."""
    nodes = [helper.make_node("Sub", ["x", "half"], ["centered"], name="center"),
             helper.make_node("Relu", ["x"], ["pos"], name="relu"),
             helper.make_node("Add", ["pos", "centered"], ["sum"], name="add"),
             helper.make_node("Log", ["centered"], ["logged"], name="log_of_centered"),
             helper.make_node("Mul", ["logged", "two"], ["scaled"], name="scale"),
             helper.make_node("Add", ["scaled", "sum"], ["y"], name="out")]
    return _save(_model(nodes, [("x", [2, 8])], [("y", [2, 8])], [("half", 0.5), ("two", 2.0)], "lognan"),
                 tmp_path / "lognan.onnx")


def _json(path):
    with open(path) as f:
        return json.load(f)


def _table_rows(out):
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("iter "))
    return [l for l in lines[start + 2:] if l and not l.startswith(("PASSED", "FAILED"))]


# 1. no vacuous pass ---------------------------------------------------------------------------------------------
def test_another_models_golden_fails_and_says_why(cli, chain, other, tmp_path):
    golden, j = tmp_path / "other.h5", tmp_path / "v.json"
    assert cli("run", other, "--onnxrt", "--save-outputs", golden)[0] == 0
    code, out, err = cli("run", chain, "--engine", "--input-shapes", "x:[2,4]", "--load-outputs", golden,
                         "--json", j)
    assert code == 1
    assert "nothing in common" in out and "MISMATCHED INPUTS" in out
    assert out.splitlines()[-1].startswith("FAILED | 0/1 comparisons passed")
    doc = _json(j)
    assert doc["passed"] is False and doc["exit_code"] == 1 and doc["outputs"] == []
    assert any("nothing in common" in r for r in doc["reasons"])


def test_one_runner_alone_compares_nothing_and_says_so(cli, chain):
    code, out, _ = cli("run", chain, "--onnxrt", "--input-shapes", "x:[2,4]")
    assert code == 0 and "nothing compared (one source)" in out


# 2. one verdict: a layerwise-only failure --------------------------------------------------------------------
def test_layerwise_only_failure_shows_a_failed_row_and_exits_1(cli, chain, tmp_path):
    golden, inputs, j = tmp_path / "g.h5", tmp_path / "in.h5", tmp_path / "v.json"
    assert cli("run", chain, "--onnxrt", "--mark-all", "--input-shapes", "x:[2,4]", "--save-outputs", golden,
               "--save-inputs", inputs)[0] == 0
    with h5py.File(golden, "r+") as f:   # corrupt every intermediate tensor of the golden, not the output
        it = f[escape("onnxrt-runner")]["iteration_0"]
        for key in it:
            if it[key].attrs["name"] != "y":
                it[key][...] = it[key][()] + 5.0
    code, out, err = cli("run", chain, "--engine", "--mark-all", "--load-outputs", golden, "--load-inputs", inputs,
                         "--json", j)
    assert code == 1
    rows = _table_rows(out)
    y_row = next(r for r in rows if " y " in r)
    lw_row = next(r for r in rows if "(layerwise:" in r)
    assert "PASSED" in y_row and "FAILED" in lw_row
    assert out.splitlines()[-1].startswith("FAILED | 0/1")
    doc = _json(j)
    assert doc["passed"] is False and doc["exit_code"] == 1
    assert [o["status"] for o in doc["outputs"]] == ["PASSED"]
    lw = doc["layerwise"]
    assert lw["status"] == "FAILED" and lw["differ"] >= 1 and lw["compared"] >= lw["differ"]
    assert lw["first_divergence"]["tensor"] != "y" and isinstance(lw["first_divergence"]["born_here"], bool)


@pytest.mark.parametrize("extra, code", [([], 0), (["--atol", "1e-30", "--rtol", "1e-30", "--fp16"], None)])
def test_json_summary_and_exit_code_agree(cli, chain, tmp_path, extra, code):
    j = tmp_path / "v.json"
    rc, out, _ = cli("run", chain, "--engine", "--onnxrt", "--mark-all", "--input-shapes", "x:[3,4]", "--json", j,
                     *extra)
    doc = _json(j)
    assert doc["exit_code"] == rc and doc["passed"] == (rc == 0)
    assert out.splitlines()[-1].startswith("PASSED" if rc == 0 else "FAILED")
    assert doc["layerwise"] is not None and doc["layerwise"]["compared"] >= 1
    row = next(r for r in _table_rows(out) if "(layerwise:" in r)
    assert ("PASSED" in row) == (doc["layerwise"]["status"] == "PASSED")
    if code is not None:
        assert rc == code
    for o in doc["outputs"]:
        assert set(o) >= {"name", "runner_pair", "status", "max_abs", "max_rel", "min_atol", "min_rtol"}
    assert set(doc["timing"]) == {"engine-runner", "onnxrt-runner"}
    assert doc["provenance"]["model_sha256"] and "versions" in doc["provenance"]


def test_json_to_stdout_is_pure_json(cli, chain):
    rc, out, err = cli("run", chain, "--engine", "--onnxrt", "--input-shapes", "x:[3,4]", "--json", "-")
    assert rc == 0 and json.loads(out)["passed"] is True and "PASSED |" in err


def test_json_on_bad_input_says_exit_2(cli, chain, tmp_path):
    j = tmp_path / "v.json"
    rc, _, _ = cli("run", chain, "--engine", "--input-shapes", "nope:[3,4]", "--json", j)
    doc = _json(j)
    assert rc == 2 and doc["exit_code"] == 2 and doc["passed"] is False and "nope" in doc["error"]


# 3. honest timing ---------------------------------------------------------------------------------------------
def test_one_iteration_timing_is_warm(cli, chain, tmp_path, monkeypatch):
    from backends.runners.engine import EngineRunner
    calls = []
    real = EngineRunner._infer
    monkeypatch.setattr(EngineRunner, "_infer", lambda self, feeds, taps: calls.append(1) or real(self, feeds, taps))
    j = tmp_path / "v.json"
    rc, out, _ = cli("run", chain, "--engine", "--input-shapes", "x:[3,4]", "--json", j)
    line = next(l for l in out.splitlines() if l.startswith("engine-runner"))
    assert "1 inference(s)" in line and "after 1 warm-up" in line
    assert len(calls) == 2                      # one warm-up, one timed
    t = _json(j)["timing"]["engine-runner"]
    assert t["warm_up"] == 1 and t["inferences"] == 1 and t["cold"] is False and t["build_s"] > 0


def test_no_warm_up_is_labelled_cold(cli, chain):
    rc, out, _ = cli("run", chain, "--engine", "--input-shapes", "x:[3,4]", "--warm-up", "0")
    line = next(l for l in out.splitlines() if l.startswith("engine-runner"))
    assert "cold" in line


# 4. NaN/Inf: the node that made it; numpy's warnings once, in our words --------------------------------------------
def test_validate_mark_all_names_the_log_node(cli, lognan, tmp_path):
    j = tmp_path / "v.json"
    rc, out, err = cli("run", lognan, "--engine", "--validate", "--mark-all", "--json", j)
    assert rc == 1
    line = next(l for l in out.splitlines() if "first NaN/Inf" in l)
    assert "tensor 'logged'" in line and "node 'log_of_centered' (Log)" in line
    nf = _json(j)["nonfinite"][0]
    assert nf["node"] == "log_of_centered" and nf["tensor"] == "logged"


def test_numpy_warnings_reported_once_in_our_words(cli, tmp_path):
    m = _model([helper.make_node("Div", ["x", "zero"], ["y"], name="div")], [("x", [4])], [("y", [4])],
               [("zero", np.zeros(4))])
    path = _save(m, tmp_path / "div.onnx")
    rc, out, err = cli("run", path, "--engine", "--iterations", "3")
    assert "RuntimeWarning" not in err and "encountered" not in err
    assert err.count("numpy reported floating-point problems") == 1 and "divisions by zero" in err


# 5. plans beside their model -------------------------------------------------------------------------------------
def test_saved_plan_against_onnxrt_on_its_model(cli, chain, other, tmp_path):
    plan = tmp_path / "chain.plan"
    assert cli("convert", chain, "-o", plan, "--input-shapes", "x:[3,4]")[0] == 0
    rc, out, _ = cli("run", chain, "--engine", "--load-engine", plan, "--onnxrt", "--mark-all")
    assert rc == 0 and "engine-runner vs onnxrt-runner" in out and "(layerwise:" in out
    rc, _, err = cli("run", other, "--engine", "--load-engine", plan, "--onnxrt")
    assert rc == 2 and "was built from another model" in err


def test_relative_error_where_reference_is_zero_is_na(cli, tmp_path):
    from debugkit.compare.funcs import compare_simple
    from debugkit.report import render
    from debugkit.compare.comparator import PairResult, RunSummary
    r = compare_simple("y", np.array([1e-6, 1.0], np.float32), np.array([0.0, 1.0], np.float32))
    assert r.passed and r.zero_ref == 1 and r.max_rel == 0.0 and r.min_rtol == float("inf")
    s = RunSummary(pairs=[PairResult("a", "b", 0, outputs={"y": r})], iterations=1)
    row = next(l for l in render(s).splitlines() if l.startswith("0 "))
    assert "n/a (ref 0)" in row and "inf" not in row


def test_build_line_on_a_terminal(cli, chain, monkeypatch):
    import re

    import native.progress
    monkeypatch.setattr(native.progress, "enabled", lambda: True)     # as if stderr were a terminal
    rc, out, err = cli("run", chain, "--engine", "--input-shapes", "x:[3,4]")
    assert rc == 0 and re.search(r"building engine-runner … done \(\d+ layers, \d+\.\d\d s\)", err), err
    monkeypatch.setattr(native.progress, "enabled", lambda: False)    # a pipe: nothing
    rc, out, err = cli("run", chain, "--engine", "--input-shapes", "x:[3,4]")
    assert "building" not in err
