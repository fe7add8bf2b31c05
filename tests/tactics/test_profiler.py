"""The runtime profiler (TensorRT's IProfiler): one report per layer per inference, and run --profile."""
import numpy as np

from backends.engine.build import build_plan_from_onnx
from backends.engine.runtime import Runtime
from backends.engine.runtime.profiler import LayerProfiler
from debugkit.cli.main import main
from tests.tactics.models import conv_chain, save


def test_profiler_reports_every_layer_every_inference(tmp_path):
    engine = Runtime().deserialize_engine(build_plan_from_onnx(conv_chain()))
    ctx = engine.create_execution_context()
    calls = []

    class Spy:
        def report_layer_time(self, name, ms):
            calls.append((name, ms))
    ctx.profiler = Spy()
    ctx.execute({"x": np.ones((1, 3, 12, 12), np.float32)})
    names = [n.name for n in engine.graph.nodes if n.kind != "Constant"]
    assert [c[0] for c in calls] == names and all(ms > 0 for _, ms in calls)
    prof = LayerProfiler()
    ctx.profiler = prof
    for _ in range(3):
        ctx.execute({"x": np.ones((1, 3, 12, 12), np.float32)})
    rows = prof.summary()
    assert len(prof.runs) == 3 and [r["layer"] for r in rows] == names
    assert abs(sum(r["percent"] for r in rows) - 100) < 1 and all(r["tactic"] for r in rows)


def test_run_profile_prints_the_table(tmp_path, capsys):
    model = save(conv_chain(), tmp_path)
    assert main(["run", model, "--engine", "--profile", "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert "per-layer time over" in out and "conv3 + relu3" in out



def test_profiler_times_each_layer_on_the_devices_clock(monkeypatch):
    """A layer's reported time is what the device's `time` measures around it (on a GPU: events with the GPU held
    busy while the host enqueues, so Python launch overhead is not in it), on the interpreter's first run at a new
    shape and on the compiled plan after it alike."""
    from native.device import get_device
    engine = Runtime().deserialize_engine(build_plan_from_onnx(conv_chain()))
    ticks = iter(range(1, 1000))

    def fake_time(self, fn, stream=None):
        fn()
        return 0.25 * next(ticks)
    monkeypatch.setattr(type(get_device("cpu")), "time", fake_time)
    ctx = engine.create_execution_context()
    prof = LayerProfiler()
    ctx.profiler = prof
    outs = [ctx.execute({"x": np.ones((1, 3, 12, 12), np.float32)}) for _ in range(2)]
    names = [n.name for n in engine.graph.nodes if n.kind != "Constant"]
    want = [0.25 * k for k in range(1, 2 * len(names) + 1)]
    assert [ms for run in prof.runs for ms in run.values()] == want
    for a, b in zip(outs[0].values(), outs[1].values()):
        np.testing.assert_array_equal(a, b)
