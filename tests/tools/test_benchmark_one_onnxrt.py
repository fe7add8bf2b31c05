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


def _spinner(seconds):
    """A thread that stays runnable (a busy loop, as ONNX Runtime's workers after a run) for `seconds`, then parks."""
    import threading
    import time
    park = threading.Event()
    end = time.perf_counter() + seconds

    def spin():
        while time.perf_counter() < end and not park.is_set():
            pass
        park.wait()
    t = threading.Thread(target=spin, daemon=True)
    t.start()
    return t, park, end


def _only(thread):
    """runnable_threads as settle reads it, counting `thread` alone: the other threads of this test process (a CPU
    pool worker or ONNX Runtime's workers left by earlier tests, runnable for seconds on a loaded machine) are not
    the subject here."""
    def runnable():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[0] == "R")
        except OSError:
            return 0
    return runnable


@pytest.mark.skipif(B.runnable_threads() is None, reason="thread states are read from /proc (Linux)")
def test_settle_waits_until_the_other_threads_stop_spinning(monkeypatch):
    import time
    t, park, end = _spinner(0.06)
    monkeypatch.setattr(B, "runnable_threads", _only(t))
    try:
        waited = B.settle(max_s=5.0)
        assert time.perf_counter() >= end          # not back before the spinner parked
        assert waited < 5.0 and B.runnable_threads() == 0
    finally:
        park.set()
        t.join()


@pytest.mark.skipif(B.runnable_threads() is None, reason="thread states are read from /proc (Linux)")
def test_settle_gives_up_at_its_limit_and_returns_at_once_when_idle(monkeypatch):
    t, park, _ = _spinner(60.0)
    monkeypatch.setattr(B, "runnable_threads", _only(t))
    try:
        assert 0.05 <= B.settle(max_s=0.05) < 2.0
    finally:
        park.set()
        t.join()
    assert B.settle(max_s=5.0) < 2.0   # nothing runnable: two polls


def test_interleaved_settles_at_every_switch_and_times_each_block(monkeypatch):
    calls = []
    monkeypatch.setattr(B, "settle", lambda max_s=B.SETTLE_MAX_S: calls.append(max_s) or 0.0)
    ran = {"a": 0, "b": 0}
    times, _ = B.interleaved({"a": lambda: ran.__setitem__("a", ran["a"] + 1),
                              "b": lambda: ran.__setitem__("b", ran["b"] + 1)}, 10, 0.0, block=5)
    assert [len(times["a"]), len(times["b"])] == [10, 10]
    assert ran == {"a": 12, "b": 12}          # one untimed call after each switch
    assert calls == [B.SETTLE_MAX_S] * 4      # two rounds, two switches each
    calls.clear()
    B.interleaved({"a": lambda: None}, 5, 0.0)
    assert calls == []                        # one contender: nothing to wait for
