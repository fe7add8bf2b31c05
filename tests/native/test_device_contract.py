"""The device contract (docs/architecture.md, "Device"): a Device resolved once and declaring its capabilities,
Precision as one enum, one refusal protocol (supports() at build, TacticRefusal for the rare run-time-only case,
which a built engine reports as an engine bug), and no TypeError used as control flow in the CUDA tactics."""
import ast
import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from native.device import Device, get_device
from native.errors import ExecutionError, UsageError
from native.precision import LADDER, Precision, enabled_by_flags
from native.tactics import LayerContext, Op, Tactic, TacticRefusal, unsupported_reason

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FloatOnly(Tactic):
    kind, name, device = "ElementWise", "float-only", "cuda"
    precisions = ("float32", "float16")
    input_dtypes = frozenset({"float32", "float16"})

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        raise TacticRefusal("these operands only exist at run time")


def test_supports_sees_dtypes_and_refuses_at_build():
    op = Op("ElementWise", "add", {"op": "SUM"})
    ints = LayerContext([[2, 3], [2, 3]], ["int64", "int64"])
    assert unsupported_reason(FloatOnly(), op, ints) == "reads int64 at input 0; its kernels take float16/float32"
    assert unsupported_reason(FloatOnly(), op, LayerContext([[2, 3], [2, 3]], ["float16", "float16"])) is None
    assert unsupported_reason(FloatOnly(), op, [[2, 3], [2, 3]]) is None      # shapes alone: nothing to refuse
    ctx = LayerContext.of([np.zeros((2, 3), np.int32), None])
    assert ctx == [[2, 3], None] and ctx.dtypes == ["int32", None]


def test_a_run_time_refusal_in_a_built_cuda_engine_is_an_engine_bug_naming_layer_and_tactic():
    run, _ = get_device("cuda").bind(FloatOnly())     # binding needs no GPU
    with pytest.raises(ExecutionError, match=r"layer 'add': tactic float-only refused its inputs at run time "
                                             r"\(these operands only exist at run time\).*engine bug"):
        run(Op("ElementWise", "add", {"op": "SUM"}), [])


def test_cuda_tactics_use_no_type_error_as_control_flow():
    raised = []
    for base, _, files in os.walk(os.path.join(ROOT, "native", "cuda")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(base, f)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
                    if isinstance(node, ast.Raise) and node.exc is not None and "TypeError" in ast.unparse(node.exc):
                        raised.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert raised == []


def test_every_tactic_under_native_cuda_registers_for_the_cuda_device():
    """A GPU tactic that forgets `device = "cuda"` is registered as a CPU tactic, and the CUDA device then sees only
    its host twin (`host:<name>`): ResNet-50's INT8 Reformat layers ran as host layers, timed 1.2 s each in the
    build, and the engine could not be captured in a CUDA graph. Checked without a GPU: the modules import."""
    import importlib
    import pkgutil

    import native.cuda.tactics as package
    from native.tactics import _REGISTRY
    for m in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"native.cuda.tactics.{m.name}")
    cuda = [t for (dev, _), ts in _REGISTRY.items() for t in ts if type(t).__module__.startswith("native.cuda.")]
    wrong = [f"{type(t).__module__}.{type(t).__name__} ({t.kind} '{t.name}') on {t.device}" for t in
             [t for (dev, _), ts in _REGISTRY.items() for t in ts if dev != "cuda"
              and type(t).__module__.startswith("native.cuda.")]]
    assert len(cuda) > 40 and wrong == []
    assert any(t.name == "int8-kernel" for t in _REGISTRY[("cuda", "Reformat")])


def test_devices_declare_capabilities_and_print_as_their_name():
    cpu, cuda, dla = get_device("cpu"), get_device("cuda"), get_device("dla")
    assert get_device(cpu) is cpu and str(cuda) == "cuda" and f"{dla}" == "dla"
    assert (cpu.supports_graphs, cpu.has_timeline, cpu.host_memory, cpu.chooses_by_timing) == (False, False, True,
                                                                                               False)
    assert (cuda.supports_graphs, cuda.has_timeline, cuda.host_memory, cuda.chooses_by_timing) == (True, True, False,
                                                                                                   True)
    assert (dla.int8_rounding, dla.calibrates_on) == ("half_away", "cpu")
    assert cpu.choose_precision("Convolution", {"float32", "float16"}, {"float16"}) is Precision.FP16
    with pytest.raises(UsageError, match="device 'tpu' is not available"):
        get_device("tpu")


def test_precision_is_one_enum_with_every_spelling():
    for text in ("fp16", "FP16", "half", "float16", "DataType.HALF"):
        assert Precision.parse(text) is Precision.FP16
    assert Precision.parse("e4m3") is Precision.FP8 and Precision.parse("float8_e4m3fn") is Precision.FP8
    assert Precision.FP16 == "float16" and json.dumps([Precision.BF16]) == '["bfloat16"]' and f"{Precision.FP32}" == \
        "float32"
    assert {"float16": 1}[Precision.FP16] == 1        # a plan's strings and the enum are the same keys
    assert LADDER[0] is Precision.INT8 and LADDER[-1] is Precision.FP32
    assert enabled_by_flags({"fp8", "int8"}) == {Precision.FP8, Precision.FP16, Precision.INT8}
    with pytest.raises(UsageError, match="--layer-precisions: unknown precision 'fp12'"):
        Precision.parse("fp12", "--layer-precisions")


def _model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_build_plan_from_onnx_keeps_the_callers_config_device():
    from backends.engine import BuilderConfig
    from backends.engine.build import build_plan_from_onnx
    from backends.engine.runtime import Runtime
    config = BuilderConfig()
    config.device = "dla"
    assert isinstance(config.device, Device) and config.device.name == "dla"
    engine = Runtime().deserialize_engine(build_plan_from_onnx(_model(), device="cpu", config=config))
    assert config.device is get_device("dla")
    assert engine.device is get_device("cpu") and engine.header["device"]["device"] == "cpu"
    assert config.to_json()["device"] == "dla"


def test_cudnn_diagnostics_are_captured_and_summarised_in_one_line(capfd):
    from native.cuda.diagnostics import captured_stderr, summary
    lines = []
    with captured_stderr(lines):
        os.write(2, b"Warning: CUDNN_STATUS_NOT_SUPPORTED; Reason: no engine\n{\"engineId\": 3}\n"
                    b"Warning: CUDNN_STATUS_NOT_SUPPORTED\n")
    assert capfd.readouterr().err == ""          # nothing reached the terminal
    assert summary(lines) == "3 diagnostic line(s) (2 x CUDNN_STATUS_NOT_SUPPORTED)"


def test_cli_device_is_resolved_once_and_an_unknown_one_is_a_usage_error(capsys):
    from debugkit.cli.main import main
    model = os.path.join(ROOT, "examples", "example.onnx")
    with pytest.raises(SystemExit) as e:
        main(["run", model, "--engine", "--device", "tpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --device: device 'tpu' is not available" in err and "cpu, cuda, dla" in err
    assert "Traceback" not in err
