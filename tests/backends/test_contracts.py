"""Issue 14's promises, one test each: what the engine reports is what runs, the tactic/device contracts, flags
that are not implemented raise, plans check the device fingerprint, loading leaves process state alone."""
import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from backends.engine import BuilderConfig, BuilderFlag, Runtime
from backends.engine.build import parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import ProfilingVerbosity
from backends.engine.dtypes import DataType
from backends.engine.plan import serialize_plan
from native.errors import BuildError, PlanError, UsageError
from native.logger import G_LOGGER
from native.tactics import Op, Tactic, tactics_for, unsupported_reason
from tests.backends.test_engine_core import mlp_model


@pytest.fixture
def log():
    stream = io.StringIO()
    old = G_LOGGER.stream, G_LOGGER.min_severity
    G_LOGGER.stream, G_LOGGER.min_severity = stream, G_LOGGER.VERBOSE
    yield stream
    G_LOGGER.stream, G_LOGGER.min_severity = old


def _network(fc1_precision=None):
    net, _ = parse_onnx(mlp_model(dynamic=False).SerializeToString())
    if fc1_precision is not None:
        layer = next(l for l in net.layers if "fc1" in l.source_nodes and l.kind == "MatrixMultiply")
        layer.precision = fc1_precision
    return net


def _engine(net, config=None):
    config = config or BuilderConfig()
    graph = Builder().build_graph(net, config)
    return Runtime().deserialize_engine(serialize_plan(graph, config))


def _fc1(engine):
    return next(l for l in engine.create_engine_inspector().layers() if "fc1" in l["SourceNodes"])


X = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)


# honest capabilities -------------------------------------------------------------------------------------------

def _heuristic():
    """A fixed tactic choice (the heuristic, not timing), so two builds run the same tactics."""
    config = BuilderConfig()
    config.set_flag("enable_tactic_heuristic")
    return config


def test_half_precision_without_fp16_tactic_warns_and_reports_fp32(log):
    engine = _engine(_network(DataType.HALF), _heuristic())
    layer = _fc1(engine)
    assert layer["Precision"] == "float32"
    text = log.getvalue()
    assert "[W]" in text and f"'{layer['Name']}'" in text and "float16" in text and "runs in float32" in text
    # and it really is FP32: same result as an engine without the constraint, bit for bit
    plain = _engine(_network(), _heuristic())
    a = engine.create_execution_context().execute({"x": X})["y"]
    b = plain.create_execution_context().execute({"x": X})["y"]
    assert np.array_equal(a, b)


def test_half_precision_under_obey_is_an_error_naming_the_layer():
    config = BuilderConfig()
    config.set_flag(BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    with pytest.raises(BuildError, match=r"fc1.*float16.*OBEY_PRECISION_CONSTRAINTS"):
        Builder().build_graph(_network(DataType.HALF), config)


def test_inspector_reports_the_tactic_format_and_precision_that_run():
    engine = _engine(_network())
    by_name = {n.name: (t, op) for n, t, op, _ in engine.executor.steps}
    for layer in engine.create_engine_inspector().layers():
        if layer["Name"] not in by_name:        # Constant layers are bound, not run
            continue
        tactic, op = by_name[layer["Name"]]
        assert (layer["TacticName"], layer["TacticValue"]) == (tactic.name, tactic.id)
        assert layer["Precision"] == op.precision and layer["Precision"] in tactic.precisions
        assert layer["Format"] == op.format and layer["Format"] in tactic.formats


def test_inspector_reports_the_channel_last_format_of_layout_converted_layers():
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3], rng.standard_normal(288).astype(np.float32))
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    net, _ = parse_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    config = BuilderConfig()
    config.prefer_nhwc = True
    engine = _engine(net, config)
    by_name = {n.name: t for n, t, _, _ in engine.executor.steps}
    layers = engine.create_engine_inspector().layers()
    conv = next(l for l in layers if l["LayerType"] == "ConvolutionNHWC")
    assert conv["Format"] == "nhwc" and "nhwc" in by_name[conv["Name"]].formats
    assert {l["Format"] for l in layers if l["LayerType"] == "Shuffle"} == {"linear"}


def test_fused_params_only_go_to_tactics_that_honour_them():
    class Plain(Tactic):
        kind, name = "MatrixMultiply", "plain"

    op = Op("MatrixMultiply", "m", {"post_ops": [{"op": "activation", "type": "RELU"}]}, {"b": np.ones((2, 2))})
    assert "post_ops" in unsupported_reason(Plain(), op, [[2, 2]])
    blas = next(t for t in tactics_for("MatrixMultiply") if t.name == "blas")
    assert unsupported_reason(blas, op, [[2, 2]]) is None
    op.precision = "int8"   # blas has no INT8 kernel: it must not claim int8 (FP16 it runs with FP16 numerics)
    assert "int8" in unsupported_reason(blas, op, [[2, 2]])


def test_unknown_tactic_source_is_an_error_and_kinds_without_named_tactics_keep_theirs(log):
    config = BuilderConfig()
    config.tactic_sources = {"no-such-tactic"}
    with pytest.raises(UsageError, match="no-such-tactic"):
        Builder().build_graph(_network(), config)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.DISABLE_FUSION)    # keep the Activation layer
    config.tactic_sources = {"packed-gemm-t"}
    engine = _engine(_network(), config)
    layers = engine.create_engine_inspector().layers()
    mm = [l for l in layers if l["LayerType"] == "MatrixMultiply"]
    assert mm and all(l["TacticName"] == "packed-gemm-t" for l in mm)
    assert any(l["LayerType"] == "Activation" and l["TacticName"] for l in layers)
    assert "name no Activation tactic; Activation layers keep all of theirs" in log.getvalue()


@pytest.mark.parametrize("flag", [BuilderFlag.REFIT, BuilderFlag.SPARSE_WEIGHTS])
def test_unimplemented_flag_raises(flag):
    with pytest.raises(UsageError, match=f"{flag.name} is not implemented"):
        BuilderConfig().set_flag(flag)


def test_unimplemented_profiling_verbosity_raises_and_detailed_works():
    config = BuilderConfig()
    assert config.profiling_verbosity is ProfilingVerbosity.DETAILED
    config.profiling_verbosity = ProfilingVerbosity.DETAILED
    for value in (ProfilingVerbosity.LAYER_NAMES_ONLY, ProfilingVerbosity.NONE):
        with pytest.raises(UsageError, match="not implemented"):
            config.profiling_verbosity = value


def test_execute_async_v3_stream_is_checked_by_the_device():
    ctx = _engine(_network()).create_execution_context()
    assert ctx.execute_async_v3({"x": X}, stream=None)["y"].shape == (2, 4)
    with pytest.raises(UsageError, match="no streams"):
        ctx.execute_async_v3({"x": X}, stream=12345)


def test_builder_leaves_the_callers_timing_cache_alone():
    config = BuilderConfig()
    Builder().build_graph(_network(), config)
    assert config.timing_cache is None


# plans and the device fingerprint ----------------------------------------------------------------------------

def test_plan_from_another_device_fingerprint_is_refused(monkeypatch):
    from native.cpu.device import CpuDevice
    plan = serialize_plan(Builder().build_graph(_network(), BuilderConfig()), BuilderConfig())
    Runtime().deserialize_engine(plan)   # same machine: loads
    real = CpuDevice.fingerprint
    monkeypatch.setattr(CpuDevice, "fingerprint", lambda self: dict(real(self), machine="riscv64"))
    foreign = serialize_plan(Builder().build_graph(_network(), BuilderConfig()), BuilderConfig())
    monkeypatch.setattr(CpuDevice, "fingerprint", real)
    with pytest.raises(PlanError, match=r"another machine.*machine: plan 'riscv64'.*check_fingerprint=False"):
        Runtime().deserialize_engine(foreign)
    engine = Runtime(check_fingerprint=False).deserialize_engine(foreign)   # the explicit opt-out
    assert engine.create_execution_context().execute({"x": X})["y"].shape == (2, 4)


def test_plan_for_a_device_that_is_not_here_is_refused():
    plan = bytearray(serialize_plan(Builder().build_graph(_network(), BuilderConfig()), BuilderConfig()))
    from backends.engine.plan import deserialize_plan
    from backends.engine.runtime.runtime import Engine
    header, graph = deserialize_plan(bytes(plan))
    header["device"] = {"device": "tpu9", "machine": "x"}
    with pytest.raises(PlanError, match="tpu9"):
        Engine(header, graph)


# process-wide state -------------------------------------------------------------------------------------------

_PROBE = textwrap.dedent("""
    import json, numpy as np
    from native.cpu import threads
    from backends.engine import BuilderConfig, Runtime
    from backends.engine.build import parse_onnx
    from backends.engine.builder import Builder
    from backends.engine.plan import serialize_plan
    from tests.backends.test_engine_core import mlp_model
    threads._blas_setter()(2)
    before = threads.blas_threads()
    net, _ = parse_onnx(mlp_model(dynamic=False).SerializeToString())
    plan = serialize_plan(Builder().build_graph(net, BuilderConfig()), BuilderConfig())
    engine = Runtime().deserialize_engine(plan)
    engine.create_execution_context().execute({"x": np.ones((2, 8), np.float32)})
    after_load = [threads.blas_threads(), threads.tuned()]
    tuned = Runtime(tune_process=True).deserialize_engine(plan)
    after_tune = [threads.blas_threads(), threads.tuned()]
    tuned.untune_process()
    print(json.dumps({"before": before, "after_load": after_load, "after_tune": after_tune,
                      "after_untune": [threads.blas_threads(), threads.tuned()]}))
""")


def test_loading_an_engine_leaves_blas_threading_untouched_unless_asked():
    from native.cpu import threads
    if threads._blas_setter() is None or threads._blas_getter() is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS we can query")
    import os
    env = dict(os.environ, DEBUGKIT_THREADS="2")
    env.pop("DEBUGKIT_TUNE_PROCESS", None)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["before"] == 2
    assert r["after_load"] == [2, False]          # loading and running: untouched
    assert r["after_tune"] == [1, True]           # asked for: the pool owns the cores, BLAS single-threaded
    assert r["after_untune"] == [2, False]        # and reversible


# a device adds itself without touching the builder ----------------------------------------------------------

def test_a_new_device_registers_itself_and_builds_without_builder_changes():
    from native.device import Device, get_device, register_device
    from native.tactics import register_tactic, registered_kinds

    ran = []

    class ToyDevice(Device):
        name = "toy"

        def load_tactics(self):
            for kind in registered_kinds("cpu"):       # borrow the CPU kernels, run through this device
                for t in tactics_for(kind, "cpu"):
                    cls = type(f"Toy{type(t).__name__}", (type(t),), {"device": "toy"})
                    try:
                        register_tactic(cls)
                    except ValueError:
                        pass

        def allocate(self, nbytes):
            return np.empty(nbytes, np.uint8)

        def run(self, tactic, op, inputs, outputs=None, workspace=None, stream=None):
            ran.append(op.kind)
            return tactic.run(op, inputs, outputs, workspace, stream)

    register_device("toy", ToyDevice)
    assert isinstance(get_device("toy"), ToyDevice)
    config = BuilderConfig()
    config.device = "toy"
    engine = _engine(_network(), config)
    assert engine.header["device"]["device"] == "toy"
    ran.clear()
    y = engine.create_execution_context().execute({"x": X})["y"]
    assert "MatrixMultiply" in ran
    np.testing.assert_allclose(y, _engine(_network()).create_execution_context().execute({"x": X})["y"],
                               rtol=1e-6)
    with pytest.raises(UsageError, match="not available"):
        get_device("no_such_device")


def test_short_style_tactics_are_adapted_to_the_contract():
    from native.tactics import register_tactic

    @register_tactic
    class Short(Tactic):
        kind, name, device = "ToyKind", "short", "cpu"

        def supports(self, op, shapes):
            return bool(op.params.get("ok"))

        def run(self, op, inputs):
            return [inputs[0] + 1]

    t = next(t for t in tactics_for("ToyKind") if t.name == "short")
    assert t.supports(Op("ToyKind", "a", {"ok": True}), None) is None
    assert "declined" in t.supports(Op("ToyKind", "a", {}), None)
    assert t.run(Op("ToyKind", "a", {}), [np.zeros(1)], None, None, None)[0][0] == 1
