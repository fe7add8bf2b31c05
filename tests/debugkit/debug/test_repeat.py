"""debug repeat: a flaky check's artifacts are sorted into good/ and bad/; in-process builds keep their plans."""
import os
import sys

import onnx

from debugkit.cli.main import main
from debugkit.debug.repeat import tactic_culprits

FLAKY = """import sys
counter = sys.argv[1]
n = int(open(counter).read()) if __import__("os").path.exists(counter) else 0
open(counter, "w").write(str(n + 1))
open(sys.argv[2], "w").write(f"run {n}")
sys.exit(n % 2)
"""


def test_flaky_command_artifacts_are_sorted(tmp_path, capsys):
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    art = tmp_path / "out.txt"
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    rc = main(["debug", "repeat", str(model), "--until", "4", "--art-dir", str(tmp_path / "arts"), "--artifacts",
               str(art), "--log", str(tmp_path / "p.jsonl"), "--check", sys.executable, str(script),
               str(tmp_path / "count"), str(art)])
    out = capsys.readouterr().out
    assert rc == 1 and "4 run(s): 2 passed, 2 failed" in out
    good = sorted(os.listdir(tmp_path / "arts" / "good"))
    bad = sorted(os.listdir(tmp_path / "arts" / "bad"))
    assert good == ["0_out.txt", "2_out.txt"] and bad == ["1_out.txt", "3_out.txt"]
    assert (tmp_path / "arts" / "bad" / "3_out.txt").read_text() == "run 3"


def test_until_bad_stops_at_the_first_failure(tmp_path, capsys):
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    rc = main(["debug", "repeat", str(model), "--until", "bad", "--art-dir", "", "--log", str(tmp_path / "p.jsonl"),
               "--check", sys.executable, str(script), str(tmp_path / "count"), str(tmp_path / "x")])
    assert rc == 1 and "2 run(s): 1 passed, 1 failed" in capsys.readouterr().out


def test_in_process_builds_are_compared_and_plans_kept(tmp_path, capsys):
    from tests.debugkit.conftest import chain_model
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    rc = main(["debug", "repeat", str(path), "--until", "2", "--art-dir", str(tmp_path / "arts"),
               "--log", str(tmp_path / "p.jsonl"), "--input-shapes", "x:[2,4]"])
    assert rc == 0, capsys.readouterr()
    assert sorted(os.listdir(tmp_path / "arts" / "good")) == ["engine_0.plan", "engine_1.plan"]
    assert (tmp_path / "arts" / "good" / "engine_0.plan").read_bytes()[:6] == b"DKPLAN"


def test_tactic_culprits_names_layers_that_split_good_from_bad():
    rec = lambda fails, t: {"result": {"fails": fails, "tactics": t}}
    records = [rec(False, {"conv": "gemm", "relu": "np"}), rec(True, {"conv": "winograd", "relu": "np"}),
               rec(False, {"conv": "gemm", "relu": "np2"}), rec(True, {"conv": "winograd", "relu": "np"})]
    assert tactic_culprits(records) == {"conv": {"good": "gemm", "bad": "winograd"}}
    assert tactic_culprits(records[:1]) == {}
