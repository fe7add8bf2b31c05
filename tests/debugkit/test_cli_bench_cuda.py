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
