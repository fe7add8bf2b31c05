import os

import numpy as np

from debugkit.data_file import DataFile, DataWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")


def test_example_agrees(cli):
    code, out, _ = cli("run", EXAMPLE, "--engine", "--onnxrt")
    assert code == 0
    assert "PASSED | 1/1 comparisons passed (100.0%)" in out


def test_save_and_reload_outputs(cli, chain, tmp_path):
    outs, ins = tmp_path / "o.h5", tmp_path / "i.h5"
    code, _, _ = cli("run", chain, "--engine", "--onnxrt", "--input-shapes", "x:[3,4]", "--save-outputs", outs,
                     "--save-inputs", ins, "--iterations", 2)
    assert code == 0
    with DataFile(str(outs), "outputs") as f:
        assert sorted(f.runners()) == ["engine-runner", "onnxrt-runner"]
        assert f.iterations("engine-runner") == [0, 1] and f.read(0, "y", "engine-runner").shape == (3, 4)
        assert "build_config" in f.runner_attrs("engine-runner")
    code, out, err = cli("run", chain, "--engine", "--load-outputs", outs, "--load-inputs", ins)
    assert code == 0 and "MISMATCHED" not in err
    code, out, _ = cli("inspect", "data", outs)
    assert code == 0 and "runner engine-runner" in out and "y [dtype=float32, shape=[3, 4]]" in out


def test_reload_with_other_inputs_fails_unless_allowed(cli, chain, tmp_path):
    outs = tmp_path / "o.h5"
    assert cli("run", chain, "--onnxrt", "--save-outputs", outs, "--val-range", "[0,0]")[0] == 0
    code, out, err = cli("run", chain, "--engine", "--load-outputs", outs, "--seed", 7, "--val-range", "[0,0.5]")
    assert code == 1 and out.count("produced from different inputs") == 1   # said once, not twice
    assert out.splitlines()[-1].startswith("FAILED") and "MISMATCHED INPUTS" in out.splitlines()[-1]
    code, out, err = cli("run", chain, "--engine", "--load-outputs", outs, "--seed", 7, "--val-range", "[0,0.5]",
                         "--allow-mismatched-inputs")
    assert "MISMATCHED INPUTS" in err and "allowed" in err   # allowed: a warning; the values decide the verdict
    assert "MISMATCHED" not in out.splitlines()[-1]


def test_mark_all_names_first_diverging_tensor(cli, chain, chain_bad, tmp_path):
    golden = tmp_path / "golden.h5"
    assert cli("run", chain, "--onnxrt", "--mark-all", "--save-outputs", golden)[0] == 0
    code, out, err = cli("run", chain_bad, "--engine", "--mark-all", "--load-outputs", golden)
    assert code == 1
    assert "MISMATCHED MODEL" in err
    line = next(l for l in out.splitlines() if "first diverging tensor" in l)
    assert "born there" in line
    assert "node 'mm'" in line or "fused region: mm," in line


def test_tolerances_and_min_tolerance(cli, chain_bad, chain, tmp_path):
    golden = tmp_path / "g.h5"
    cli("run", chain, "--onnxrt", "--save-outputs", golden)
    code, out, _ = cli("run", chain_bad, "--engine", "--load-outputs", golden)
    assert code == 1 and "minimum tolerance that would pass" in out
    code, _, _ = cli("run", chain_bad, "--engine", "--load-outputs", golden, "--atol", "y:1e9")
    assert code == 0


def test_bad_input_exits_2_with_one_line(cli, chain, tmp_path):
    cases = [
        (["run", tmp_path / "missing.onnx", "--engine"], "model file not found"),
        (["run", chain, "--engine", "--atol", "nope:1e-3"], "unknown output"),
        (["run", chain, "--engine", "--input-shapes", "nope:[1,4]"], "unknown input"),
        (["run", chain, "--engine", "--input-shapes", "x:[1,5]"], "fixes it at 4"),
        (["run", chain, "--engine", "--val-range", "nope:[0,1]"], "unknown input"),
    ]
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage" * 10)
    cases.append((["run", corrupt, "--engine"], "corrupt.onnx"))
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"junk")
    cases.append((["run", chain, "--engine", "--load-outputs", junk], "not a debugkit HDF5"))
    inputs = tmp_path / "in.h5"
    with DataWriter(str(inputs), "inputs") as w:
        w.write_inputs(0, {"x": np.zeros((1, 4), np.float32)})
    cases.append((["run", chain, "--engine", "--load-outputs", inputs], "holds inputs, not outputs"))
    wrong = tmp_path / "wrong.h5"
    with DataWriter(str(wrong), "inputs") as w:
        w.write_inputs(0, {"z": np.zeros((1, 4), np.float32)})
    cases.append((["run", chain, "--engine", "--load-inputs", wrong], "unknown input name"))
    for argv, needle in cases:
        code, out, err = cli(*argv)
        assert code == 2, (argv, out, err)
        assert needle in err, (argv, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_validate_flags_nan(cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"], name="log")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "log.onnx"
    onnx.save(m, p)
    code, out, _ = cli("run", p, "--engine", "--onnxrt", "--val-range", "[-1,-0.5]")
    assert code == 1 and "NaN(s) on both sides" in out
    # NaN == NaN everywhere: allowed, but nothing finite was compared, so the run cannot pass (debugkit/verdict.py)
    code, out, _ = cli("run", p, "--engine", "--onnxrt", "--val-range", "[-1,-0.5]", "--allow-nan")
    assert code == 1 and "nothing compared: none of the 1 comparison(s) saw a finite pair" in out
    assert cli("run", p, "--engine", "--onnxrt", "--val-range", "[-1,1]", "--allow-nan")[0] == 0
    code, out, _ = cli("run", p, "--onnxrt", "--val-range", "[-1,-0.5]", "--validate")
    assert code == 1 and "VALIDATION FAILED" in out


def test_convert_and_inspect_plan(cli, chain, tmp_path):
    plan = tmp_path / "chain.plan"
    assert cli("convert", chain, "-o", plan, "--input-shapes", "x:[2,4]")[0] == 0
    code, out, _ = cli("inspect", "model", plan)
    assert code == 0 and "tactic=" in out and "Layer 0" in out
    assert cli("run", plan, "--engine")[0] == 0
    code, out, _ = cli("inspect", "model", chain, "--show", "layers")
    assert code == 0 and "mm [MatMul]" in out
