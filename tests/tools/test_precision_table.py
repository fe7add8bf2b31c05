"""tools/precision_table.py on a one-model corpus: the bundled example, whose FP16 output overflows."""
import contextlib
import io
import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_table_names_the_overflowing_node(tmp_path):
    from tools.precision_table import BEGIN, END, main
    shutil.copy(os.path.join(ROOT, "examples", "example.onnx"), tmp_path / "example.onnx")
    (tmp_path / "public_models.json").write_text(json.dumps({"models": [
        {"name": "example", "source": "exported", "path": "example.onnx",
         "feeds": {"x": {"shape": [1, 8], "dtype": "float32", "range": [0, 1]}}}]}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nold\n{END}\nafter\n")
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["--corpus", str(tmp_path), "--shipped", str(tmp_path), "--samples", "2", "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\nafter\n") and "old" not in text
    row = next(line for line in text.splitlines() if line.startswith("| example | y |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2] == "inf" and cells[3] == "nan"          # FP16: the output overflows
    assert float(cells[6]) > 0.9999                          # BF16 keeps FP32's range
    assert "names ONNX node `reduce` (ReduceSum" in text and "1 NaN/Inf value(s) in the output" in text
