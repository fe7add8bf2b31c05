"""`inspect capability --dla` and the DLA flags of `run`."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture
def dla_model(tmp_path):
    """x[1,3,8,8] -> Conv 'c1' -> Relu 'r1' -> Exp 'odd' -> Conv 'c2' -> Softmax(axis 1) 'sm' -> y."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["t1"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t1"], ["t2"], name="r1"),
             helper.make_node("Exp", ["t2"], ["t3"], name="odd"),
             helper.make_node("Conv", ["t3", "w2"], ["t4"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["t4"], ["y"], name="sm", axis=1)]
    g = helper.make_graph(nodes, "dla", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 8, 8])],
                          [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * .2, "w1"),
                           numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * .1, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "dla.onnx"
    onnx.save(m, path)
    return str(path)


def test_capability_json_table_and_subgraph_files(cli, dla_model, tmp_path):
    out_json, sub = tmp_path / "cap.json", tmp_path / "sub"
    code, out, err = cli("inspect", "capability", dla_model, "--dla", "--json", out_json, "-o", sub,
                         "--input-shapes", "x:[1,3,8,8]")
    assert code == 0, err
    rep = json.loads(out_json.read_text())
    by = {e["onnx_nodes"][0]: e for e in rep["layers"]}
    assert set(by) == {"c1", "odd", "c2", "sm"}                          # Relu fused into c1: one engine layer
    assert by["c1"]["onnx_nodes"] == ["c1", "r1"] and by["c1"]["dla"] and by["c2"]["dla"] and by["sm"]["dla"]
    assert not by["odd"]["dla"] and by["odd"]["reason"].startswith("[unary.op] unary EXP")
    assert rep["loadables"] == 2 and rep["fallback_reasons"] == {"unary.op": 1}
    assert rep["layers_on_dla"] == 3 and rep["layers_total"] == 4
    assert "3 of 4 engine layers on DLA, 2 loadable(s)" in out
    names = sorted(p.split("/")[-1] for p in rep["subgraph_files"])
    assert names == ["supported_0.onnx", "supported_1.onnx", "unsupported_0.onnx"]
    unsup = onnx.load(str(sub / "unsupported_0.onnx"))
    assert [n.name for n in unsup.graph.node] == ["odd"]
    code, out, err = cli("inspect", "capability", dla_model, "--dla", "--profile", "xavier", "--json", out_json,
                         "--input-shapes", "x:[1,3,8,8]")
    rep = json.loads(out_json.read_text())
    assert code == 0 and rep["fallback_reasons"] == {"unary.op": 1, "softmax.profile": 1}


def test_run_dla_without_fallback_fails_naming_the_layer(cli, dla_model):
    code, out, err = cli("run", dla_model, "--engine", "--fp16", "--use-dla-core", "0", "--input-shapes",
                         "x:[1,3,8,8]")
    assert code == 2 and "layer 'odd'" in err and "[unary.op]" in err and "--allow-gpu-fallback" in err
    code, out, err = cli("run", dla_model, "--engine", "--use-dla-core", "0", "--input-shapes", "x:[1,3,8,8]")
    assert code == 2 and "the DLA runs FP16 and INT8 only and neither is enabled: add --fp16 or --int8" in err


def test_run_dla_with_fallback_compares_with_onnxrt(cli, dla_model):
    code, out, err = cli("run", dla_model, "--engine", "--onnxrt", "--fp16", "--use-dla-core", "0",
                         "--allow-gpu-fallback", "--input-shapes", "x:[1,3,8,8]", "--atol", "1e-2", "--rtol", "1e-2",
                         "--compare", "cosine", "--cosine-threshold", "0.999")
    assert code == 0, out + err
    code, out, err = cli("run", dla_model, "--engine", "--fp16", "--use-dla-core", "0", "--layer-device-types",
                         "odd:gpu", "--input-shapes", "x:[1,3,8,8]")
    assert code == 0, err
    code, out, err = cli("run", dla_model, "--engine", "--fp16", "--use-dla-core", "5", "--input-shapes",
                         "x:[1,3,8,8]")
    assert code == 2 and "DLA core 5 does not exist" in err
