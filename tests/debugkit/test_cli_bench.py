"""debugkit bench: latency statistics, throughput, per-layer profile, plans, ONNX Runtime in the same run, bad input."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from debugkit.cli.main import main


def mlp(depth=3, width=16, batch=4):
    rng = np.random.default_rng(0)
    nodes, inits, t = [], [], "x"
    for i in range(depth):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / 4).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(width) / 4).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [t, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"act{i}")]
        t = f"t{i}"
    nodes.append(helper.make_node("Softmax", [t], ["y"], name="softmax", axis=-1))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    return str(path)


def _bench(tmp_path, model, *extra):
    out = tmp_path / "bench.json"
    rc = main(["bench", model, "--input-shapes", "x:[8,16]", "--warm-up", "0", "--json", str(out), *extra])
    return rc, (json.loads(out.read_text()) if out.exists() else None)


def _ordered(s):
    return s["min"] <= s["median"] <= s["p90"] <= s["p99"] <= s["max"] and s["min"] <= s["mean"] <= s["max"]


def test_figures_are_consistent_and_cpu_transfers_are_not_invented(tmp_path, model, capsys):
    rc, r = _bench(tmp_path, model, "--iterations", "40", "--duration", "0")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert r["inferences"] == 40 and _ordered(r["latency_ms"]) and r["latency_ms"]["min"] > 0
    assert r["batch"] == 8 and r["inputs"] == {"x": {"shape": [8, 16], "dtype": "float32"}}
    tp = r["throughput"]
    assert tp["inferences_per_s"] == pytest.approx(40 / r["timed_seconds"])
    assert tp["samples_per_s"] == pytest.approx(8 * tp["inferences_per_s"])
    assert r["h2d_ms"] is None and r["d2h_ms"] is None and "not applicable" in r["transfers_note"]
    assert r["device"] == "cpu" and r["cuda_graph"] is False and r["build_seconds"] > 0
    assert "latency ms: min" in out and "samples/s (batch 8)" in out and "not applicable" in out


def test_precision_flags_and_layer_precisions_reach_the_build(tmp_path, model):
    rc, r = _bench(tmp_path, model, "--iterations", "2", "--duration", "0", "--fp16", "--layer-precisions",
                   "softmax:fp32", "--separate-profile-run")
    assert rc == 0 and r["precision_flags"] == ["fp16"]
    assert r["machine"]["cpus"] >= 1 and r["machine"]["cpu_kernel_threads"] >= 1
    prec = {n: x["precision"] for x in r["profile"]["layers"] for n in x["onnx_nodes"]}
    assert prec["softmax"] == "float32" and prec["mm0"] == prec["mm2"] == "float16", prec


def test_feed_from_a_data_loader_script_sets_shapes_and_batch(tmp_path, model):
    script = tmp_path / "feeds.py"
    script.write_text("import numpy as np\ndef load_data():\n    yield {'x': np.ones((5, 16), np.float32)}\n")
    rc, r = _bench(tmp_path, model, "--iterations", "2", "--duration", "0", "--data-loader-script", str(script))
    assert rc == 0 and r["inputs"]["x"]["shape"] == [5, 16] and r["batch"] == 5


def test_duration_runs_at_least_that_long_and_warm_up_runs_untimed(tmp_path, model):
    rc, r = _bench(tmp_path, model, "--iterations", "1", "--duration", "0.3")
    assert rc == 0 and r["loop_wall_seconds"] >= 0.3 and r["inferences"] > 1
    rc, r = _bench(tmp_path, model, "--iterations", "5", "--duration", "0", "--warm-up", "50")
    assert rc == 0 and r["warm_up"]["ms"] == 50 and r["warm_up"]["inferences"]["engine"] >= 1 and r["inferences"] == 5


def test_separate_profile_run_names_onnx_nodes_and_shares_sum_to_100(tmp_path, model, capsys):
    prof = tmp_path / "profile.json"
    rc, r = _bench(tmp_path, model, "--iterations", "12", "--duration", "0", "--separate-profile-run",
                   "--dump-profile", str(prof))
    out = capsys.readouterr().out
    assert rc == 0
    p = json.loads(prof.read_text())
    assert p == r["profile"] and p["separate_run"] is True and p["inferences"] == 12
    assert sum(x["percent"] for x in p["layers"]) == pytest.approx(100, abs=0.01)
    assert p["layers_total_ms"] == pytest.approx(sum(x["median_ms"] for x in p["layers"]))
    nodes = {n for x in p["layers"] for n in x["onnx_nodes"]}
    assert {"mm0", "add0", "act0", "mm2", "softmax"} <= nodes
    assert all(x["tactic"] for x in p["layers"])
    assert "per-layer profile (separate profile run" in out and "mm1, add1, act1" in out


def test_save_engine_then_bench_the_plan_both_ways(tmp_path, model):
    plan = tmp_path / "mlp.plan"
    rc, built = _bench(tmp_path, model, "--iterations", "3", "--duration", "0", "--save-engine", str(plan))
    assert rc == 0 and plan.exists() and built["saved_engine"] == str(plan)
    rc, r = _bench(tmp_path, str(plan), "--iterations", "3", "--duration", "0")
    assert rc == 0 and r["build_seconds"] is None and r["layers"] == built["layers"] and r["batch"] == 8
    rc, r = _bench(tmp_path, model, "--load-engine", str(plan), "--iterations", "3", "--duration", "0",
                   "--compare", "onnxrt")
    assert rc == 0 and r["build_seconds"] is None and r["plan"].endswith("mlp.plan") and "compare" in r


def test_compare_onnxrt_times_both_in_the_same_run(tmp_path, model, capsys):
    rc, r = _bench(tmp_path, model, "--iterations", "20", "--duration", "0", "--compare", "onnxrt")
    assert rc == 0
    o = r["compare"]["onnxrt"]
    assert o["inferences"] >= 20 and r["inferences"] >= 20 and _ordered(o["latency_ms"])
    assert o["median_ratio_engine_over_onnxrt"] == pytest.approx(r["latency_ms"]["median"] / o["latency_ms"]["median"])
    assert "onnxrt (same run, interleaved)" in capsys.readouterr().out


def test_device_timings_are_reported_apart_when_the_context_has_them(tmp_path, model, monkeypatch):
    """A device with its own memory sets ctx.timings per execute (the CUDA device does); bench reports each part."""
    from backends.engine.runtime import runtime
    real = runtime.ExecutionContext.execute

    def execute(self, feeds, taps=(), device_outputs=False):
        out = real(self, feeds, taps)
        self.timings = {"h2d_ms": 1.0, "compute_ms": 2.0, "d2h_ms": 0.5}
        return out
    monkeypatch.setattr(runtime.ExecutionContext, "execute", execute)
    rc, r = _bench(tmp_path, model, "--iterations", "5", "--duration", "0")
    assert rc == 0
    assert r["h2d_ms"]["median"] == pytest.approx(1.0) and r["compute_ms"]["max"] == pytest.approx(2.0)
    assert r["d2h_ms"]["min"] == pytest.approx(0.5) and "own clock" in r["transfers_note"]


def test_quiet_drops_the_log_lines(tmp_path, model, capsys):
    assert _bench(tmp_path, model, "--iterations", "2", "--duration", "0")[0] == 0
    assert "[I] timing: at least 2 inferences" in capsys.readouterr().err
    assert _bench(tmp_path, model, "--iterations", "2", "--duration", "0", "-q")[0] == 0
    captured = capsys.readouterr()
    assert "[I]" not in captured.err and "latency ms:" in captured.out


@pytest.mark.parametrize("extra, message", [
    (["--use-cuda-graph"], "CUDA graphs need --device cuda"),
    (["--iterations", "0"], "--iterations must be >= 1"),
    (["--duration", "-1"], "--duration must be >= 0"),
    (["--warm-up", "-5"], "--warm-up must be >= 0"),
    (["--input-shapes", "y:[1,2]"], "unknown input"),
    (["--dump-profile", "/no/such/dir/p.json"], "does not exist"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, model, capsys, extra, message):
    rc, r = _bench(tmp_path, model, *extra)
    assert rc == 2 and r is None
    assert message in capsys.readouterr().err


def test_plan_and_file_errors_exit_2(tmp_path, model, capsys):
    assert main(["bench", str(tmp_path / "missing.onnx")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["bench", model, "--load-engine", model]) == 2
    assert "not a debugkit plan" in capsys.readouterr().err
    plan = tmp_path / "m.plan"
    assert main(["bench", model, "--input-shapes", "x:[2,16]", "--duration", "0", "--warm-up", "0",
                 "--save-engine", str(plan), "-q"]) == 0
    capsys.readouterr()
    assert main(["bench", str(plan), "--compare", "onnxrt"]) == 2
    assert "needs the ONNX model" in capsys.readouterr().err
    other = tmp_path / "other.onnx"
    onnx.save(mlp(depth=2), other)
    assert main(["bench", str(other), "--load-engine", str(plan)]) == 2
    assert "another model" in capsys.readouterr().err


def convnet(path, depth=3, channels=16, size=48):
    """x[1,8,size,size] -> depth x (Conv 3x3 + Relu): layers that take milliseconds, so they dominate an execute."""
    rng = np.random.default_rng(1)
    nodes, inits, t, c = [], [], "x", 8
    for i in range(depth):
        inits.append(numpy_helper.from_array((rng.standard_normal((channels, c, 3, 3)) / 8).astype(np.float32),
                                             f"w{i}"))
        nodes += [helper.make_node("Conv", [t, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        t, c = f"r{i}", channels
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def test_timeline_is_a_chrome_trace_whose_layers_fill_each_execute(tmp_path, capsys):
    """--timeline writes the Trace Event Format: metadata naming the host and device threads, one 'execute #k'
    span per traced inference on the host thread, each engine layer inside it on both threads (tactic, precision,
    ONNX nodes in args), the host's sync; on the CPU the layers are most of each execute."""
    model = convnet(tmp_path / "cnn.onnx")
    trace = tmp_path / "trace.json"
    out = tmp_path / "bench.json"
    rc = main(["bench", model, "--warm-up", "0", "--json", str(out), "--iterations", "4", "--duration", "0",
               "--timeline", str(trace)])
    r = json.loads(out.read_text())
    assert rc == 0 and "wrote the timeline of 4 inferences" in capsys.readouterr().out
    doc = json.loads(trace.read_text())
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {1: "host (enqueue)", 2: "cpu (execution)"}
    assert all({"name", "ph", "ts", "dur", "pid", "tid", "cat"} <= set(e) for e in ev if e["ph"] == "X")
    runs = [e for e in ev if e.get("cat") == "inference"]
    assert [e["name"] for e in runs] == [f"execute #{k}" for k in range(4)] and doc["otherData"]["inferences"] == 4
    layers = [e for e in ev if e.get("cat") == "layer" and e["tid"] == 2]
    assert {e["args"]["onnx_nodes"][0] for e in layers} == {"conv0", "conv1", "conv2"}
    assert all(e["args"]["tactic"] and e["args"]["precision"] == "float32" for e in layers)
    assert len([e for e in ev if e.get("cat") == "layer" and e["tid"] == 1]) == len(layers) == 3 * 4
    assert len([e for e in ev if e.get("cat") == "sync"]) == 4
    shares = []
    for k, run_ in enumerate(runs):
        mine = [e for e in layers if e["args"]["inference"] == k]
        assert all(run_["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run_["ts"] + run_["dur"] + 1 for e in mine)
        assert sum(e["dur"] for e in mine) <= run_["dur"] + 1, (k, run_, mine)
        shares.append(sum(e["dur"] for e in mine) / run_["dur"])
    # the layers fill an execute the machine did not interrupt (a loaded machine may stretch some: not all four)
    assert max(shares) >= 0.5, shares
    assert r["timeline"]["inferences"] == 4
    assert r["timeline"]["layers_over_execute_median"] == pytest.approx(float(np.median(shares)), abs=0.02)


def test_enqueue_time_and_device_busy_are_reported(tmp_path, model):
    """On the CPU the host enqueues by computing: enqueue time is the compute, the device is busy for the summed
    enqueue times out of the loop's wall time (never more), and no enqueue-bound verdict is invented."""
    rc, r = _bench(tmp_path, model, "--iterations", "10", "--duration", "0")
    assert rc == 0 and _ordered(r["enqueue_ms"])
    assert r["enqueue_ms"]["max"] <= r["latency_ms"]["max"]
    b = r["device_busy"]
    assert 0 < b["busy_ms_total"] <= b["wall_ms_total"] and b["utilization"] == pytest.approx(
        b["busy_ms_total"] / b["wall_ms_total"]) and b["streams"] == 1
    assert b["wall_ms_total"] == pytest.approx(r["loop_wall_seconds"] * 1e3)
    assert r["enqueue_bound"] is None


def test_streams_run_contexts_at_once_and_report_the_aggregate(tmp_path, model, capsys):
    rc, r = _bench(tmp_path, model, "--iterations", "6", "--duration", "0", "--streams", "3")
    assert rc == 0 and r["streams"] == 3
    assert r["inferences"] == 18 and r["throughput"]["per_stream_inferences"] == [6, 6, 6]
    assert r["throughput"]["inferences_per_s"] == pytest.approx(18 / r["loop_wall_seconds"])
    assert r["device_busy"] is None      # the threads' host times overlap: no busy figure is made up
    assert "3 contexts in flight" in capsys.readouterr().out


def test_streams_on_a_device_that_has_one_stream_is_a_usage_error(tmp_path, model, capsys, monkeypatch):
    from native.device import get_device
    monkeypatch.setattr(type(get_device("cpu")), "concurrent_contexts", False)
    rc, r = _bench(tmp_path, model, "--iterations", "2", "--duration", "0", "--streams", "2")
    assert rc == 2 and r is None and "one stream per process" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--streams", "0"], "--streams must be >= 1"),
    (["--streams", "2", "--compare", "onnxrt"], "--streams N with --compare onnxrt"),
    (["--timeline", "/no/such/dir/t.json"], "does not exist"),
])
def test_bad_stream_and_timeline_options_exit_2(tmp_path, model, capsys, extra, message):
    rc, r = _bench(tmp_path, model, *extra)
    assert rc == 2 and r is None
    assert message in capsys.readouterr().err


class _Ctx:
    """An execution context whose capture fails (or not) as `error` says."""

    def __init__(self, error=None):
        self.error, self.graph, self.runs = error, [], 0

    def enable_cuda_graph(self, on=True):
        self.graph.append(on)

    def execute(self, feeds):
        self.runs += 1
        if self.error is not None:
            raise self.error


def _engine(*tactics):
    from types import SimpleNamespace
    return SimpleNamespace(graph=SimpleNamespace(nodes=[SimpleNamespace(name=f"l{i}", tactic_name=t)
                                                        for i, t in enumerate(tactics)]))


def test_use_cuda_graph_falls_back_like_trtexec_when_the_execution_cannot_be_captured(capsys):
    """Host layers are named without trying a capture; a capture that fails for another reason (a layer that
    synchronizes) is turned off again; both warn and bench times without the graph. Any other error is raised."""
    from debugkit.cli.bench import _enable_cuda_graph, host_layers
    from native.errors import ExecutionError
    assert host_layers(_engine("cublas", "host:numpy", None, "host:blas")) == ["l1", "l3"]
    ctx = _Ctx()
    note = _enable_cuda_graph(ctx, _engine("cublas", "host:numpy", "host:blas"), {})
    assert ctx.graph == [] and ctx.runs == 0
    assert note == "not captured: 2 layer(s) run on the host ('l1' and 1 more) and synchronize the stream"
    assert "timing without a CUDA graph" in capsys.readouterr().err
    ctx = _Ctx(ExecutionError("CUDA graph capture failed (cuStreamSynchronize failed: CUDA_ERROR_STREAM_CAPTURE_"
                              "UNSUPPORTED); a layer that synchronizes (a host layer) cannot be captured: ..."))
    note = _enable_cuda_graph(ctx, _engine("cublas"), {})
    assert ctx.graph == [True, False] and ctx.runs == 1
    assert note == ("not captured: CUDA graph capture failed (cuStreamSynchronize failed: "
                    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)")
    ctx = _Ctx()
    assert _enable_cuda_graph(ctx, _engine("cublas"), {}) is None and ctx.graph == [True] and ctx.runs == 1
    with pytest.raises(ExecutionError, match="out of memory"):
        _enable_cuda_graph(_Ctx(ExecutionError("cuMemAlloc failed: out of memory")), _engine("cublas"), {})
