"""Precision on the command line: the bundled example's FP16 overflow, found and fixed with our own tools."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")


def test_example_overflows_in_fp16(cli):
    code, out, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16")
    assert code == 1
    assert "y [float32 [1, 1]] | rel_l2+cosine | 1 NaN/Inf value(s) on one side only" in out
    assert "check: --fp16 default: relative L2" in out.strip().splitlines()[-1]


def test_mark_all_names_the_overflowing_node(cli):
    code, out, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--mark-all")
    assert code == 1
    assert "first diverging tensor 'y', produced by node 'reduce' (ReduceSum)" in out
    assert "squared (agrees)" in out


def test_layer_precision_fp32_on_that_node_fixes_it(cli, tmp_path):
    code, out, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--layer-precisions", "reduce:fp32")
    assert code == 0, out
    assert "PASSED | 1/1 comparisons passed" in out
    spec = tmp_path / "precisions.json"  # what `debug precision` writes
    spec.write_text(json.dumps({"layer_precisions": {"reduce": "fp32"}}))
    code, out, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--layer-precisions", spec)
    assert code == 0, out
    # a constraint on another layer does not help
    code, _, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--layer-precisions", "square:fp32")
    assert code == 1


def test_unknown_layer_name_is_exit_2_with_near_matches(cli):
    code, out, err = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--layer-precisions", "reduse:fp32")
    assert code == 2
    assert "no layer or ONNX node is named 'reduse'; did you mean 'reduce'" in out + err


def test_obey_impossible_is_exit_2_naming_the_layer(cli, tmp_path):
    code, out, err = cli("convert", EXAMPLE, "-o", tmp_path / "e.plan", "--layer-precisions", "reduce:fp16",
                         "--precision-constraints", "obey")
    assert code == 2
    assert "layer 'reduce" in out + err and "FP16 (--fp16)" in out + err
    assert not (tmp_path / "e.plan").exists()


def test_convert_fp16_and_inspect_shows_precisions_and_reformats(cli, tmp_path):
    plan = tmp_path / "e.plan"
    code, _, _ = cli("convert", EXAMPLE, "-o", plan, "--fp16", "--layer-output-types", "reduce:fp32")
    assert code == 0
    code, out, _ = cli("inspect", "model", plan, "--show", "layers")
    assert code == 0
    lines = [l for l in out.splitlines() if "Layer " in l]
    assert any("[Reformat]" in l and "float32->float16" in l for l in lines)   # the input into FP16
    reduce = next(l for l in lines if "reduce" in l and "[Reformat]" not in l)
    assert "precision=float16 out=float32" in reduce                        # FP16 compute, FP32 output type
    assert not any("[Reformat]" in l and "float16->float32" in l for l in lines)  # so no output reformat
