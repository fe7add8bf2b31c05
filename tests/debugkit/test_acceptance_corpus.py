"""Acceptance: a perturbed weight in a real model is named as the first diverging tensor, born at its node.

ONNX Runtime runs the original model and saves every tensor (--mark-all); the engine runs a copy with one weight
changed and is compared against that golden file. Feeds follow tests/corpus/models.json; the exported models come
from DEBUGKIT_CORPUS (the tests skip with the reason without it).
"""
import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.corpus.corpus import entry, model_path


def feed_args(name):
    spec = entry(name)
    shapes, ranges = [], []
    for inp, f in spec["feeds"].items():
        shapes.append(f"{inp}:{json.dumps(f['shape']).replace(' ', '')}")
        lo, hi = (f["value"], f["value"]) if "value" in f else f["range"]
        ranges.append(f"{inp}:[{lo},{hi}]")
    return ["--input-shapes", *shapes, "--val-range", *ranges]


def perturb(name, node_name, tmp_path):
    """Copy the model with the weight (input 1, an initializer) of node `node_name` changed."""
    m = onnx.load(model_path(entry(name)))
    inits = {i.name: i for i in m.graph.initializer}
    node = next(n for n in m.graph.node if n.name == node_name)
    op_type = node.op_type
    w = numpy_helper.to_array(inits[node.input[1]]).copy()
    assert np.abs(w).max() > 0
    w[(0,) if op_type == "Conv" else (slice(None), 0)] += 0.2 * np.abs(w).max()
    inits[node.input[1]].CopyFrom(numpy_helper.from_array(w, node.input[1]))
    path = tmp_path / f"{name}_perturbed.onnx"
    onnx.save(m, path)
    return str(path), node


@pytest.mark.parametrize("name,node_name", [("timm-resnet18", "/m/layer2/layer2.0/conv1/Conv"),
                                            ("bert_mini", "/m/encoder/layer.0/attention/output/dense/MatMul")])
def test_perturbed_weight_is_the_first_divergence(cli, tmp_path, name, node_name):
    original = model_path(entry(name))
    bad, node = perturb(name, node_name, tmp_path)
    golden = tmp_path / "golden.h5"
    code, out, err = cli("run", original, "--onnxrt", "--mark-all", "--save-outputs", golden, *feed_args(name))
    assert code == 0, err
    code, out, err = cli("run", bad, "--engine", "--mark-all", "--load-outputs", golden, *feed_args(name))
    assert code == 1
    assert "MISMATCHED MODEL" in err
    line = next(l for l in out.splitlines() if "first diverging tensor" in l)
    assert "born there" in line
    # the node itself, or the fused layer it belongs to, is named
    assert f"'{node.output[0]}', produced by node '{node.name}'" in line or f"fused region: {node.name}" in line, line


def test_bert_mini_fp16_error_accumulates(cli):
    """Issue 21, acceptance 5: bert_mini's FP16 error grows over the network; no single layer is born bad (keeping the
    final LayerNorm in FP32 fixes nothing), so the headline describes accumulation and points to debug precision."""
    # FP32-grade tolerances (the old rule): FP16's rounding must fail for the analysis to run; without them --fp16
    # judges by the scale-free check, which this engine meets (relative L2 ~9e-4: docs/run.md). Tactics by heuristic:
    # which FP16 GEMM wins the timing moves the node the headline names
    code, out, _ = cli("run", model_path(entry("bert_mini")), "--engine", "--onnxrt", "--fp16", "--mark-all",
                       "--atol", "1e-4", "--rtol", "1e-3", "--tactic-heuristic")
    head = next(l for l in out.splitlines() if l.startswith(">>> "))
    assert code == 1
    assert head.startswith(">>> error accumulates from node ") and "no single layer explains it" in head
    assert "LayerNorm" in head and "debug precision" in head and "born there" not in head
