"""inspect: dtype names for inputs and outputs alike, --json for ONNX models, quiet exit on a closed pipe."""
import json
import os
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mixed(tmp_path):
    """Inputs and outputs of several dtypes and a dynamic dim."""
    nodes = [helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT16, name="cast"),
             helper.make_node("Identity", ["x"], ["y"], name="id"),
             helper.make_node("Shape", ["x"], ["shape"], name="shape_of")]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
                                           helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
                           helper.make_tensor_value_info("ids_f", TensorProto.FLOAT16, [4]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "mixed.onnx"
    onnx.save(m, path)
    return path


def test_dtype_names_for_inputs_and_outputs(cli, tmp_path):
    code, out, _ = cli("inspect", "model", _mixed(tmp_path))
    assert code == 0
    assert "x [dtype=float32, shape=[batch, 3]]" in out and "ids [dtype=int64, shape=[4]]" in out
    assert "y [dtype=float32, shape=[batch, 3]]" in out and "ids_f [dtype=float16, shape=[4]]" in out
    assert "shape [dtype=int64, shape=[2]]" in out and "elem_type" not in out


def test_json_for_onnx_models(cli, tmp_path):
    code, out, _ = cli("inspect", "model", _mixed(tmp_path), "--json", "--show", "layers")
    doc = json.loads(out)
    assert doc["format"] == "onnx" and doc["opset"] == 17 and doc["nodes"] == 3
    assert doc["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 3]},
                             {"name": "ids", "dtype": "int64", "shape": [4]}]
    assert [o["dtype"] for o in doc["outputs"]] == ["float32", "float16", "int64"]
    assert [n["op_type"] for n in doc["node_list"]] == ["Cast", "Identity", "Shape"]


def test_closed_pipe_exits_quietly(tmp_path):
    n = 3000   # enough output to outrun the pipe's buffer after the reader has gone
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu_{i}") for i in range(n)]
    g = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1])])
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-m", "debugkit", "inspect", "model", str(path), "--show", "layers"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    first = p.stdout.readline()
    p.stdout.close()                     # what `| head -1` does
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0, err
    assert first.startswith(b"==== ONNX Model") and err == ""


def test_inspect_data_reads_polygraphy_json(cli):
    path = os.path.join(ROOT, "tests", "debugkit", "data", "polygraphy", "outputs.json")
    code, out, _ = cli("inspect", "data", path)
    assert code == 0 and "y [dtype=float32, shape=[3, 4]]" in out and "(not recorded)" in out


def test_inspect_data_labels_0d_tensors_as_scalars(cli, tmp_path):
    import numpy as np
    from debugkit.data_file import DataWriter
    path = tmp_path / "d.h5"
    with DataWriter(str(path), "outputs") as w:
        w.write_many("r", 0, {"loss": np.float32(2.5), "v": np.zeros(3, np.float32), "seq": [np.zeros(1)]})
    code, out, _ = cli("inspect", "data", path)
    assert code == 0
    assert "loss [dtype=float32, scalar] | mean=2.5" in out and "seq [sequence]" in out, out
