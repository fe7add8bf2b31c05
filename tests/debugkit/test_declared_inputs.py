"""Inputs are what the model declares: sub-byte/float8/complex inputs are generated in their own dtype and fed as
such, or refused (exit 2) naming the input and its type (ONNX Runtime cannot take int4), never fed as float32; a loaded plan's device must match
--device; a golden file of strings is bad input (exit 2), not a disagreement."""
import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from debugkit.cli.main import main
from debugkit.data_loader import DataLoader
from backends.runners.base import TensorMeta
from tests.tactics.models import conv_chain, save


def _cast_model(path, elem, to=TensorProto.FLOAT):
    x = helper.make_tensor_value_info("x", elem, [2, 3])
    y = helper.make_tensor_value_info("y", to, [2, 3])
    m = helper.make_model(helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to)], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, path)
    return str(path)


@pytest.mark.parametrize("dtype,lo,hi", [(ml_dtypes.int4, -8, 7), (ml_dtypes.uint4, 0, 15),
                                         (ml_dtypes.float4_e2m1fn, -6, 6), (ml_dtypes.float8_e4m3fn, -448, 448),
                                         (ml_dtypes.float8_e5m2, -57344, 57344), (ml_dtypes.bfloat16, -1e9, 1e9)])
def test_generated_values_have_the_declared_dtype_and_fit_it(dtype, lo, hi):
    v = DataLoader(1, 1, {"": (0.0, 20.0)}).generate(TensorMeta("x", np.dtype(dtype), (64,)), 0)
    assert v.dtype == np.dtype(dtype)
    f = v.astype(np.float64)
    assert np.all(np.isfinite(f)) and f.min() >= max(lo, 0) and f.max() <= min(hi, 20)
    assert len(np.unique(f)) > 1


def test_complex_inputs_are_generated_complex():
    v = DataLoader(1, 1).generate(TensorMeta("x", np.dtype(np.complex64), (8,)), 0)
    assert v.dtype == np.complex64 and np.all(v.imag != 0)


@pytest.mark.parametrize("elem,dtype", [(TensorProto.INT4, ml_dtypes.int4), (TensorProto.UINT4, ml_dtypes.uint4),
                                        (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn)])
def test_sub_byte_inputs_reach_the_engine_in_their_own_type(tmp_path, elem, dtype):
    """The engine declares the model's type for inputs it has no DataType for, so the data loader generates values of
    that type (an int4 input gets integers in [-8, 7], not 16.8) and the Cast computes on exactly them."""
    from backends.runners import EngineRunner
    model = _cast_model(tmp_path / "m.onnx", elem)
    with EngineRunner(model) as r:
        meta = r.input_metadata()
        assert meta["x"].dtype == np.dtype(dtype)
        dl = DataLoader(1, 1, {"": (0.0, 20.0)})
        dl.input_metadata = meta
        feeds = next(iter(dl))
        assert feeds["x"].dtype == np.dtype(dtype)
        y = r.infer(feeds)["y"]
    assert np.array_equal(y, feeds["x"].astype(np.float32))


def test_int4_cannot_be_fed_to_onnxruntime_and_says_so(tmp_path, capsys):
    model = _cast_model(tmp_path / "m.onnx", TensorProto.INT4)
    rc = main(["run", model, "--engine", "--onnxrt", "--val-range", "[0,20]"])
    err = capsys.readouterr().err
    assert rc == 2 and "input 'x' is int4" in err, err


@pytest.mark.parametrize("elem", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
def test_bfloat16_and_float8_inputs_are_fed_in_their_own_type(tmp_path, capsys, elem):
    """Both runners get the same bfloat16/float8 values (ONNX Runtime through an OrtValue of that type), so the
    Cast to float32 agrees exactly; fed as float32 the values would not even be representable."""
    model = _cast_model(tmp_path / "m.onnx", elem)
    out = tmp_path / "o.h5"
    rc = main(["run", model, "--engine", "--onnxrt", "--val-range", "[0,20]", "--atol", "0", "--rtol", "0",
               "--save-inputs", str(tmp_path / "i.h5"), "--save-outputs", str(out)])
    assert rc == 0, capsys.readouterr()
    from debugkit.data_file import open_data_file
    with open_data_file(str(tmp_path / "i.h5")) as f:
        x = f.read_iteration(0)["x"]
    assert x.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def test_a_plan_for_another_device_is_an_error_naming_both(tmp_path, capsys):
    model = save(conv_chain([3, 8, 8], hw=6), tmp_path)
    plan = str(tmp_path / "m.plan")
    assert main(["convert", model, "-o", plan]) == 0
    assert main(["run", model, "--engine", "--load-engine", plan, "--onnxrt"]) == 0
    assert main(["run", model, "--engine", "--load-engine", plan, "--onnxrt", "--device", "cpu"]) == 0
    capsys.readouterr()
    for device in ("cuda", "dla"):
        rc = main(["run", model, "--engine", "--load-engine", plan, "--onnxrt", "--device", device])
        err = capsys.readouterr().err
        assert rc == 2 and f"built for device 'cpu', but device '{device}' was asked for" in err, err


def test_a_golden_of_strings_is_bad_input(tmp_path, capsys):
    model = save(conv_chain([3, 8, 8], hw=6), tmp_path)
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"polygraphy_class": "RunResults", "lst": [["trt-runner-N0", [
        {"polygraphy_class": "IterationResult", "outputs": {"y": [["a"] * 10]}, "runtime": 0.1,
         "runner_name": "trt-runner-N0"}]]]}))
    rc = main(["run", model, "--engine", "--load-outputs", str(golden)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{golden}: output 'y' holds" in err and "(text)" in err, err
