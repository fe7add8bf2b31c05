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


# --- the other way: we write Polygraphy's JSON ----------------------------------------------------------------------

def test_polygraphy_generator_reproduces_polygraphys_inputs():
    """--data-generator polygraphy makes the very inputs Polygraphy 0.53.6 generated for the fixture (seed 1)."""
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    from debugkit.data_loader import DataLoader
    dl = DataLoader(1, 1, shapes={"x": (3, 4)}, generator="polygraphy")
    dl.input_metadata = onnx_input_metadata(load_onnx(MODEL))
    [feeds] = list(dl)
    np.testing.assert_array_equal(feeds["x"], open_data_file(INPUTS, "inputs").read(0, "x"))


def test_polygraphy_golden_passes_without_its_inputs_with_polygraphys_generator(cli):
    code, out, err = cli("run", MODEL, "--onnxrt", "--load-outputs", OUTPUTS, "--input-shapes", "x:[3,4]",
                         "--data-generator", "polygraphy")
    assert code == 0 and "PASSED" in out, out + err


def test_save_outputs_json_is_polygraphys_run_results(cli, tmp_path):
    g, gi = tmp_path / "g.json", tmp_path / "gi.json"
    code, out, err = cli("run", MODEL, "--onnxrt", "--engine", "--input-shapes", "x:[3,4]", "--save-outputs", g,
                         "--save-inputs", gi)
    assert code == 0, out + err
    doc, ref = json.loads(g.read_text()), json.load(open(OUTPUTS))
    assert doc["polygraphy_class"] == ref["polygraphy_class"] == "RunResults"
    assert sorted(r for r, _ in doc["lst"]) == ["engine-runner", "onnxrt-runner"]
    [it] = dict(doc["lst"])["onnxrt-runner"]
    [ref_it] = ref["lst"][0][1]
    assert set(it) == set(ref_it) and it["polygraphy_class"] == "IterationResult"
    assert it["outputs"]["y"]["polygraphy_class"] == ref_it["outputs"]["y"]["polygraphy_class"] == "LazyArray"
    # Polygraphy's data loader made these inputs (the JSON default), so its golden and ours agree bit for bit
    np.testing.assert_array_equal(open_data_file(str(g), "outputs").read(0, "y", "onnxrt-runner"),
                                  open_data_file(OUTPUTS, "outputs").read(0, "y", ref["lst"][0][0]))
    assert json.loads(gi.read_text())[0]["x"] == json.load(open(INPUTS))[0]["x"]
    # and we read back what we wrote
    code, out, err = cli("run", MODEL, "--engine", "--load-outputs", g, "--load-inputs", gi)
    assert code == 0, out + err


def test_a_failed_run_leaves_no_json(cli, tmp_path):
    g = tmp_path / "g.json"
    code, _, err = cli("run", MODEL, "--onnxrt", "--input-shapes", "x:[3,4]", "--save-outputs", g,
                       "--load-inputs", tmp_path / "missing.h5")
    assert code == 2 and not g.exists()


def _polygraphy():
    import shutil
    return os.environ.get("DEBUGKIT_POLYGRAPHY") or shutil.which("polygraphy")


@pytest.mark.skipif(not _polygraphy(), reason="polygraphy is not installed (set DEBUGKIT_POLYGRAPHY=path/to/polygraphy)")
def test_polygraphy_reads_what_we_write(cli, tmp_path):
    import subprocess
    g = tmp_path / "g.json"
    code, out, err = cli("run", MODEL, "--onnxrt", "--input-shapes", "x:[3,4]", "--save-outputs", g)
    assert code == 0, out + err
    p = subprocess.run([_polygraphy(), "run", MODEL, "--onnxrt", "--input-shapes", "x:[3,4]", "--load-outputs",
                        str(g)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "PASSED" in p.stdout + p.stderr, p.stdout + p.stderr
