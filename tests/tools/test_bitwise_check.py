"""tools/bitwise_check.py: record an engine's every tensor with its tactics, rebuild with those tactics, compare
bit for bit; a layer with its recorded tactic and identical inputs whose output differs is a violation."""
import numpy as np
import onnx

import tools.bitwise_check as bw
from tests.debugkit.conftest import chain_model


def _planted_clock(monkeypatch):
    """Timed builds pick by a planted clock (registration order): a rebuild picks what the record did, top-level
    and body layers alike, whatever the machine's timings (DEBUGKIT_TEST_RANDOM_TACTIC_TIMES, a near tie on a
    loaded machine)."""
    from backends.engine.builder import tactic_selection
    monkeypatch.setattr(tactic_selection, "time_candidates",
                        lambda node, todo, *a, **k: {t.id: 1.0 + i for i, t in enumerate(todo)})


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


def test_a_body_whose_layers_changed_tactic_is_a_changed_tactic(tmp_path, monkeypatch, capsys):
    """The replay file pins top-level layers only: an If whose branch layers now run other tactics (recorded per
    layer as `body_tactics`) counts as a changed tactic, not as a violation."""
    import json
    from tests.backends.test_body_tactics import _model
    _planted_clock(monkeypatch)
    model, _ = _model()
    path = tmp_path / "if.onnx"
    onnx.save(model, path)
    entry = {"name": "iff", "feeds": {"x": {"shape": [1, 4, 16], "dtype": "float32"},
                                      "c": {"shape": [], "dtype": "bool", "value": 1}}}
    monkeypatch.setattr(bw, "_models", lambda only: iter([(entry, str(path), None)]))
    rec = tmp_path / "rec"
    assert bw.record(str(rec), []) == 0
    layers = json.loads((rec / "iff.layers.json").read_text())
    (lay,) = [x for x in layers if x.get("body_tactics")]
    assert any(t.startswith("then/") and ": " in t for t in lay["body_tactics"])
    data = dict(np.load(rec / "iff.npz"))
    out = lay["outputs"][0]
    y = data[f"t:{out}"].copy()
    y.reshape(-1).view(np.uint32)[0] ^= 1    # other bits out of the If ...
    data[f"t:{out}"] = y
    np.savez(rec / "iff.npz", **data)
    monkeypatch.setattr(bw, "_models", lambda only: iter([(entry, str(path), None)]))
    assert bw.check(str(rec), []) == 1      # ... with the same body tactics: a violation
    assert "VIOLATION" in capsys.readouterr().out
    lay["body_tactics"] = [t.replace(": ", ": old-") for t in lay["body_tactics"]]   # ... recorded with others
    (rec / "iff.layers.json").write_text(json.dumps(layers))
    monkeypatch.setattr(bw, "_models", lambda only: iter([(entry, str(path), None)]))
    assert bw.check(str(rec), []) == 0
    out = capsys.readouterr().out
    assert "(tactic changed)" in out and "0 violation(s)" in out


def test_a_restructured_model_compares_its_outputs_and_is_no_violation(tmp_path, monkeypatch, capsys):
    """A replay file none of whose layers remain (the graph restructured) cannot be replayed: the model is rebuilt
    with timed tactics and its outputs compared; a differing output is reported with its size, not as a violation."""
    import json
    _planted_clock(monkeypatch)
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    _one_model(monkeypatch, str(path))
    rec = tmp_path / "rec"
    assert bw.record(str(rec), []) == 0
    doc = json.loads((rec / "chain.replay.json").read_text())
    doc["model"]["fingerprint"] = "0" * 16
    doc["layers"] = {f"gone/{k}": v for k, v in doc["layers"].items()}
    (rec / "chain.replay.json").write_text(json.dumps(doc))
    _one_model(monkeypatch, str(path))
    assert bw.check(str(rec), []) == 0
    out = capsys.readouterr().out
    assert "restructured" in out and "1 of 1 bit-identical" in out and "0 violation(s)" in out
    data = dict(np.load(rec / "chain.npz"))
    data["t:y"] = data["t:y"] + np.float32(0.25)
    np.savez(rec / "chain.npz", **data)
    _one_model(monkeypatch, str(path))
    assert bw.check(str(rec), []) == 0
    out = capsys.readouterr().out
    assert "0 of 1 bit-identical, max |diff| 0.25" in out
