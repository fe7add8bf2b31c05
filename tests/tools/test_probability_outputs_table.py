"""tools/probability_outputs_table.py on a one-model corpus: a conv whose Sigmoid output sits in FP16's subnormal
range (tests/backends/test_probability_outputs.py's model)."""
import contextlib
import io
import json


def test_table_shows_the_rule_and_the_layer_it_keeps(tmp_path):
    from tests.backends.test_probability_outputs import X, sigmoid_model
    from tools.probability_outputs_table import BEGIN, END, main
    (tmp_path / "m.onnx").write_bytes(sigmoid_model().SerializeToString())
    (tmp_path / "public_models.json").write_text(json.dumps({"models": [
        {"name": "tail", "source": "exported", "path": "m.onnx",
         "feeds": {"x": {"shape": list(X.shape), "dtype": "float32", "range": [0, 1]}}}]}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nold\n{END}\nafter\n")
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["--corpus", str(tmp_path), "--shipped", str(tmp_path), "--seeds", "2", "--pairs", "4",
                     "--doc", str(doc), "--json", str(tmp_path / "r.json")]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\nafter\n") and "old" not in text
    cells = [c.strip() for c in next(l for l in text.splitlines() if l.startswith("| tail |")).split("|")[1:-1]]
    assert float(cells[1]) < 0.999 <= float(cells[2])       # without / with the rule, against our FP32 engine
    assert cells[3] == "`head + sig`" and "ms (" in cells[4]
    res = json.loads((tmp_path / "r.json").read_text())["tail"]
    assert res["moved"] == ["head + sig"] and res["time"]["rounds"] == 4
