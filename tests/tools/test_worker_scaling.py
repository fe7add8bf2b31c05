"""tools/worker_scaling.py: the same debug precision search with 1 and 2 workers, timed, answers compared."""
import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tool():
    spec = importlib.util.spec_from_file_location("worker_scaling", os.path.join(ROOT, "tools", "worker_scaling.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_and_two_workers_find_the_planted_set(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = _tool().main(["--depth", "4", "--width", "16", "--batch", "4", "--workers", "1", "2", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "answers agree: yes; equal to the planted set: yes" in text
    res = json.loads(out.read_text())
    assert res["expected"] == ["mm1", "mm1/fp16_compensation", "mm3", "mm3/fp16_compensation"]
    assert [r["workers"] for r in res["rows"]] == [1, 2]
    assert all(r["answer"] == res["expected"] and r["wall_s"] > 0 and r["probes"] > 0 for r in res["rows"])
