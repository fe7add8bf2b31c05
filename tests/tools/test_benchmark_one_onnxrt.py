"""One benchmark: `debugkit bench --compare onnxrt` and the corpus driver (tools/benchmark.py) open ONNX Runtime
with the same factory and settings and time it with the same interleaved loop, so they report one ONNX Runtime."""
import json

import numpy as np
import onnx
import pytest

import tools.benchmark as corpus
from debugkit import benchmark as B
from debugkit.cli.main import main
from tests.debugkit.conftest import chain_model


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    return str(path)


def test_bench_and_corpus_driver_time_the_same_onnxrt(chain, tmp_path, monkeypatch, capsys):
    opened, loops = [], []
    real_session, real_loop = B.onnxrt_session, B.interleaved

    def session(model, settings=None):
        opened.append(settings or B.onnxrt_settings())
        return real_session(model, settings)

    def loop(fns, iterations, duration_s, block=5, after=None):
        loops.append(sorted(fns))
        return real_loop(fns, iterations, duration_s, block=block, after=after)
    monkeypatch.setattr(B, "onnxrt_session", session)
    monkeypatch.setattr(B, "interleaved", loop)
    j = tmp_path / "b.json"
    code = main(["bench", chain, "--input-shapes", "x:[3,4]", "--compare", "onnxrt", "--iterations", "3",
                 "--duration", "0", "--warm-up", "0", "--json", str(j)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "onnxrt settings: " in out and json.loads(j.read_text())["onnxrt_settings"] == B.onnxrt_settings()
    feeds = {"x": np.zeros((3, 4), np.float32)}
    r = corpus.bench_all(chain, feeds, 3, 1, with_off=False)
    assert r["ort"]["latency_ms"]["median"] > 0
    assert len(opened) == 2 and opened[0] == opened[1] == B.onnxrt_settings()   # one ONNX Runtime
    assert len(loops) == 2 and "onnxrt" in loops[0] and "ort" in loops[1]       # one timing loop


def test_onnxrt_settings_are_explicit_and_printed():
    s = B.onnxrt_settings(threads=3)
    assert (s["intra_op_threads"], s["inter_op_threads"], s["spinning"], s["memory_arena"]) == (3, 1, True, True)
    line = B.onnxrt_settings_line(s)
    assert "3 intra-op thread(s)" in line and "spinning on" in line and "memory arena on" in line
