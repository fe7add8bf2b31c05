"""CLI INT8: convert/run --int8 calibrate from the data loader, write the cache, and reuse it without calibrating."""
import numpy as np
import onnx
import pytest

from backends.engine.calibration import read_cache
from tests.backends.test_int8_calibration import conv_model


def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(body)
    return str(p)


GOOD = """import numpy as np
def load_data():
    rng = np.random.default_rng(3)
    for _ in range(3):
        yield {"x": rng.standard_normal((2, 3, 7, 9)).astype(np.float32)}
"""
BROKEN = """def load_data():
    raise RuntimeError("the calibration data was read although the cache exists")
"""


def test_convert_int8_calibrates_then_reuses_the_cache(cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(conv_model()[0], model)
    cache = tmp_path / "m.cache"
    code, out, err = cli("convert", model, "-o", tmp_path / "a.plan", "--int8", "--calibration-cache", cache,
                         "--data-loader-script", _script(tmp_path, "good.py", GOOD),
                         "--calibration-algorithm", "minmax")
    assert code == 0, err
    algo, scales = read_cache(cache.read_bytes())
    assert algo == "MinMaxCalibration" and "x" in scales
    first = cache.read_bytes()
    code, out, err = cli("convert", model, "-o", tmp_path / "b.plan", "--int8", "--calibration-cache", cache,
                         "--data-loader-script", _script(tmp_path, "broken.py", BROKEN),
                         "--calibration-algorithm", "minmax")
    assert code == 0, err
    assert cache.read_bytes() == first
    assert (tmp_path / "a.plan").read_bytes()[64:] != b"" and (tmp_path / "b.plan").exists()


def test_run_int8_against_onnxruntime_with_a_corrupt_cache_is_exit_2(cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(conv_model()[0], model)
    cache = tmp_path / "bad.cache"
    cache.write_text("TRT-8601-EntropyCalibration2\nx: zz\n")
    code, out, err = cli("run", model, "--engine", "--onnxrt", "--int8", "--calibration-cache", cache)
    assert code == 2
    assert "line 2" in err and "x: zz" in err


def test_run_int8_calibrates_on_the_run_data_and_compares(cli, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(conv_model()[0], model)
    cache = tmp_path / "run.cache"
    code, out, err = cli("run", model, "--engine", "--onnxrt", "--int8", "--calibration-cache", cache,
                         "--val-range", "[-2,2]", "--iterations", "2", "--check-error-stat", "median",
                         "--atol", "0.5", "--rtol", "0.5")
    assert code in (0, 1), err
    _, scales = read_cache(cache.read_bytes())
    # seeded random [-2, 2] data: the input's calibrated range is close to 2
    assert 1.9 / 127 < scales["x"] <= np.float32(2.0) / np.float32(127)


def test_convert_qdq_emulation_onnxruntime_x86_keeps_fp32_groups_and_bad_value_is_exit_2(cli, tmp_path, capsys):
    from backends.engine.plan import deserialize_plan
    from tests.backends.test_int8_qdq import fan_out_model
    model = tmp_path / "q.onnx"
    onnx.save(fan_out_model(), model)
    code, out, err = cli("convert", model, "-o", tmp_path / "q.plan", "--int8", "--qdq-emulation", "onnxruntime-x86")
    assert code == 0, err
    convs = [n for n in deserialize_plan((tmp_path / "q.plan").read_bytes())[1].nodes if n.kind == "Convolution"]
    assert [(n.precision, n.tactic_name) for n in convs][0] == ("float32", "mlas-order")
    assert convs[1].precision == "int8"
    with pytest.raises(SystemExit) as e:   # argparse: exit code 2, naming the choices
        cli("convert", model, "-o", tmp_path / "r.plan", "--int8", "--qdq-emulation", "onnxruntime-arm")
    assert e.value.code == 2 and "onnxruntime-x86" in capsys.readouterr().err


def test_inspect_says_how_each_layer_runs_int8(cli, tmp_path):
    """`inspect --show layers` on an INT8 plan: which layers run INT8 with INT8 or FP32 outputs, and for a layer
    that does not, why (here a precision constraint)."""
    model = tmp_path / "m.onnx"
    onnx.save(conv_model()[0], model)
    code, out, err = cli("convert", model, "-o", tmp_path / "a.plan", "--int8", "--data-loader-script",
                         _script(tmp_path, "good.py", GOOD))
    assert code == 0, err
    code, out, err = cli("inspect", "model", tmp_path / "a.plan", "--show", "layers")
    assert code == 0, err
    lines = [l for l in out.splitlines() if "[Convolution" in l]
    assert "precision=int8" in lines[0] and "(INT8 in, INT8 out)" in lines[0]
    assert "precision=int8" in lines[1] and "(INT8 in, FP32 out)" in lines[1]     # before the FP32 output
    code, out, err = cli("convert", model, "-o", tmp_path / "b.plan", "--int8", "--data-loader-script",
                         _script(tmp_path, "good.py", GOOD), "--layer-precisions", "conv2:fp32",
                         "--precision-constraints", "obey", "-v")
    assert code == 0, err
    assert "INT8: 1 of 2 convolution/GEMM layers run INT8; 1 does not: 'conv2' runs float32 (precision " \
        "constraint float32)" in out + err
    code, out, err = cli("inspect", "model", tmp_path / "b.plan", "--show", "layers")
    line = next(l for l in out.splitlines() if "conv2" in l and "[Convolution" in l)
    assert "precision=float32" in line and "(not INT8: precision constraint float32)" in line
