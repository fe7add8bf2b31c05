"""--load-outputs / --load-inputs read Polygraphy's JSON data files (fixtures written by Polygraphy 0.53.6 itself,
see data/polygraphy/README.md), so users can bring the goldens they already have."""
import base64
import io
import json
import os

import numpy as np
import pytest

from debugkit.data_file import PolygraphyJsonFile, open_data_file
from native.errors import DataFileError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "polygraphy")
MODEL, OUTPUTS, INPUTS = (os.path.join(DATA, f) for f in ("chain.onnx", "outputs.json", "inputs.json"))


def test_reads_polygraphy_run_results_and_inputs():
    out = open_data_file(OUTPUTS, "outputs")
    assert isinstance(out, PolygraphyJsonFile) and out.kind == "outputs"
    [runner] = out.runners()
    assert runner.startswith("onnxrt-runner")
    assert out.iterations(runner) == [0]
    assert set(out.tensor_names(0, runner)) == {"t_mm", "t_add", "t_relu", "y"}
    y = out.read(0, "y", runner)
    assert y.dtype == np.float32 and y.shape == (3, 4)
    x = open_data_file(INPUTS, "inputs").read_iteration(0)["x"]
    assert x.shape == (3, 4) and x.dtype == np.float32
    import onnxruntime as ort   # the golden really is ONNX Runtime on these inputs
    ref = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(ref, y)


def test_polygraphy_golden_loads_and_compares(cli, tmp_path):
    j = tmp_path / "v.json"
    code, out, err = cli("run", MODEL, "--engine", "--load-outputs", OUTPUTS, "--load-inputs", INPUTS, "--mark-all",
                         "--json", j)
    assert code == 0, out + err
    doc = json.loads(j.read_text())
    assert [(o["name"], o["status"]) for o in doc["outputs"]] == [("y", "PASSED")]
    assert doc["outputs"][0]["runner_pair"].startswith("engine-runner vs onnxrt-runner-N0")
    assert doc["layerwise"]["compared"] >= 2 and doc["layerwise"]["differ"] == 0
    assert doc["provenance"]["loaded_outputs"][0]["format"] == "polygraphy-json"


def _encode(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}


def test_a_wrong_polygraphy_golden_fails(cli, tmp_path):
    doc = json.load(open(OUTPUTS))
    it = doc["lst"][0][1][0]["outputs"]
    it["y"] = {"values": _encode(np.zeros((3, 4), np.float32) + 9), "polygraphy_class": "LazyArray"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    code, out, _ = cli("run", MODEL, "--engine", "--load-outputs", bad, "--load-inputs", INPUTS)
    assert code == 1 and "FAILED | y" in out


def test_polygraphy_golden_without_its_inputs_warns(cli):
    code, out, err = cli("run", MODEL, "--engine", "--load-outputs", OUTPUTS, "--input-shapes", "x:[3,4]")
    assert "does not record its inputs" in err and code == 1


@pytest.mark.parametrize("text, msg", [("{\"polygraphy_class\": \"RunResults\"}", "without its 'lst'"),
                                       ("{\"a\": 1}", "neither Polygraphy RunResults"),
                                       ("{not json", "neither a debugkit HDF5 data file nor")])
def test_bad_json_files_exit_2_naming_the_problem(cli, tmp_path, text, msg):
    p = tmp_path / "x.json"
    p.write_text(text)
    code, _, err = cli("run", MODEL, "--engine", "--load-outputs", p)
    assert code == 2 and msg in err


def test_inputs_file_given_as_outputs_is_refused():
    with pytest.raises(DataFileError, match="holds inputs, not outputs"):
        open_data_file(INPUTS, "outputs")


def test_older_npz_and_latin1_arrays_decode(tmp_path):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = io.BytesIO()
    np.savez(buf, arr)
    npz = {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}
    buf = io.BytesIO()
    np.save(buf, arr)
    latin = {"array": buf.getvalue().decode("latin-1"), "polygraphy_class": "ndarray"}
    p = tmp_path / "in.json"
    p.write_text(json.dumps([{"a": npz, "b": latin}]))
    f = open_data_file(str(p), "inputs")
    np.testing.assert_array_equal(f.read(0, "a"), arr)
    np.testing.assert_array_equal(f.read(0, "b"), arr)
