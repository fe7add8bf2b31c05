"""tools/bitwise_check.py: record an engine's every tensor with its tactics, rebuild with those tactics, compare
bit for bit; a layer with its recorded tactic and identical inputs whose output differs is a violation."""
import numpy as np
import onnx

import tools.bitwise_check as bw
from tests.debugkit.conftest import chain_model


def _one_model(monkeypatch, path):
    entry = {"name": "chain", "feeds": {"x": {"shape": [2, 4], "dtype": "float32"}}}
    monkeypatch.setattr(bw, "_models", lambda only: iter([(entry, path, None)]))


def test_record_then_check_is_identical_and_a_changed_bit_is_a_violation(tmp_path, monkeypatch, capsys):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    _one_model(monkeypatch, str(path))
    rec = tmp_path / "rec"
    assert bw.record(str(rec), []) == 0
    assert (rec / "chain.replay.json").exists() and (rec / "chain.layers.json").exists()
    assert bw.check(str(rec), []) == 0
    out = capsys.readouterr().out
    assert "| chain |" in out and "0 violation(s)" in out
    data = dict(np.load(rec / "chain.npz"))
    y = data["t:y"].copy()
    y.view(np.uint32)[0, 0] ^= 1          # one bit of the old output: the same tactic now "gives other bits"
    data["t:y"] = y
    np.savez(rec / "chain.npz", **data)
    _one_model(monkeypatch, str(path))
    assert bw.check(str(rec), []) == 1
    out = capsys.readouterr().out
    assert "VIOLATION" in out and "1 violation(s)" in out


def test_a_changed_tactic_or_input_explains_a_difference():
    layers = [{"name": "a", "inputs": ["x"], "outputs": ["t1"]}, {"name": "b", "inputs": ["t1"], "outputs": ["t2"]},
              {"name": "c", "inputs": ["t2"], "outputs": ["t3"]}]
    old = {"t1": np.float32([1.0]), "t2": np.float32([2.0]), "t3": np.float32([3.0])}
    new = {"t1": np.float32([1.5]), "t2": np.float32([2.5]), "t3": np.float32([3.0])}
    res = bw.compare_layers(layers, old, new, replayed={"b", "c"})
    assert res["rows"] == [("a", "tactic changed"), ("b", "input differed"), ("c", "identical")]
    res = bw.compare_layers(layers, old, {**old, "t3": np.float64([3.0])}, replayed={"a", "b", "c"})
    assert res["rows"][-1] == ("c", "VIOLATION")   # another dtype is other bits
