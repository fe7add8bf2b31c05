"""debugkit bench on the GPU: CUDA graphs, copies and compute timed apart by the device. Skipped without a GPU."""
import json

import onnx
import pytest

from debugkit.cli.main import main
from tests.debugkit.test_cli_bench import _ordered, mlp

pytestmark = pytest.mark.cuda


def test_bench_on_cuda_with_graphs_reports_device_times(tmp_path):
    path, out = tmp_path / "mlp.onnx", tmp_path / "bench.json"
    onnx.save(mlp(), path)
    rc = main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--fp16", "--use-cuda-graph",
               "--iterations", "30", "--duration", "0", "--warm-up", "0", "--separate-profile-run", "--json", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["device"] == "cuda" and r["cuda_graph"] is True and r["inferences"] >= 30
    assert _ordered(r["latency_ms"]) and all(r[k] is not None and _ordered(r[k])
                                             for k in ("h2d_ms", "compute_ms", "d2h_ms"))
    assert "own clock" in r["transfers_note"]
    shares = [row["percent"] for row in r["profile"]["layers"]] if isinstance(r["profile"], dict) else []
    assert shares and abs(sum(shares) - 100) < 2


def test_use_cuda_graph_on_an_engine_with_host_layers_times_without_the_graph(tmp_path, capsys):
    """Host layers synchronize the stream, so the execution cannot be captured: bench warns naming one, times
    without the graph (trtexec's fallback) and says so in the JSON, instead of failing (the corpus's audio and
    detection models, whose engines keep host layers, all failed `--use-cuda-graph` with exit 2)."""
    path, out = tmp_path / "mlp.onnx", tmp_path / "bench.json"
    onnx.save(mlp(), path)
    rc = main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--use-cuda-graph",
               "--tactic-sources", "host:numpy", "--iterations", "5", "--duration", "0", "--warm-up", "0",
               "--json", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["cuda_graph"] is False and r["inferences"] >= 5
    assert r["cuda_graph_note"].startswith("not captured: ") and "run on the host" in r["cuda_graph_note"]
    assert "timing without a CUDA graph" in capsys.readouterr().err
    # --streams N replays captured graphs on streams of their own: without a graph that is a usage error
    assert main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--use-cuda-graph",
                 "--tactic-sources", "host:numpy", "--streams", "2", "--iterations", "2", "--duration", "0"]) == 2
    assert "cannot be captured" in capsys.readouterr().err


def test_timeline_on_cuda_places_layers_on_the_stream_and_enqueue_apart(tmp_path):
    """--timeline on the GPU: device spans from events (no synchronisation between layers), in order and inside
    each execute; enqueue time and GPU busy reported; --streams > 1 refused (one stream per process)."""
    path, out, trace = tmp_path / "mlp.onnx", tmp_path / "bench.json", tmp_path / "trace.json"
    onnx.save(mlp(), path)
    rc = main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--iterations", "5",
               "--duration", "0", "--warm-up", "0", "--timeline", str(trace), "--json", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    assert _ordered(r["enqueue_ms"]) and r["device_busy"]["utilization"] > 0 and r["enqueue_bound"] in (True, False)
    ev = json.loads(trace.read_text())["traceEvents"]
    runs = [e for e in ev if e.get("cat") == "inference"]
    assert len(runs) == 5
    dev = [e for e in ev if e.get("tid") == 2 and e.get("ph") == "X"]
    assert {e["name"] for e in dev if e["cat"] == "copy"} == {"H2D", "D2H"}
    for k, run_ in enumerate(runs):
        mine = [e for e in dev if e["args"]["inference"] == k]
        starts = [e["ts"] for e in mine]
        assert starts == sorted(starts) and mine[0]["name"] == "H2D" and mine[-1]["name"] == "D2H"
        assert all(run_["ts"] - 50 <= e["ts"] and e["ts"] + e["dur"] <= run_["ts"] + run_["dur"] + 50 for e in mine)
    assert main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--streams", "2"]) == 2


def test_streams_replay_captured_contexts_on_streams_of_their_own(tmp_path):
    """--streams 3 --use-cuda-graph: three contexts, each graph replayed on its own stream per round; the
    aggregate throughput counts every context's inferences."""
    path, out = tmp_path / "mlp.onnx", tmp_path / "bench.json"
    onnx.save(mlp(), path)
    rc = main(["bench", str(path), "--input-shapes", "x:[64,16]", "--device", "cuda", "--fp16", "--use-cuda-graph",
               "--streams", "3", "--iterations", "20", "--duration", "0", "--warm-up", "0", "--json", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    per = r["throughput"]["per_stream_inferences"]
    assert r["streams"] == 3 and per == [per[0]] * 3 and per[0] >= 20 and r["inferences"] == 3 * per[0]
    assert r["throughput"]["inferences_per_s"] == pytest.approx(3 * per[0] / r["loop_wall_seconds"])
    assert "round" in r["latency_note"] and "noDataTransfers" in r["transfers_note"]
