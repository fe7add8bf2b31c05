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


class _Elsewhere:
    """An executor whose 'workers' see none of the driver's files (another working directory and TMPDIR, the probe
    pickled across), as Ray workers on another node: what `debug repeat --ray` must cope with."""
    remote, workers = True, 2

    def __init__(self, cwd, tmp):
        self.cwd, self.tmp = str(cwd), str(tmp)

    def map(self, fn, items, on_done=None):
        import pickle
        import tempfile
        here, old_tmp = os.getcwd(), tempfile.tempdir
        os.chdir(self.cwd)
        tempfile.tempdir = self.tmp
        try:
            return [pickle.loads(pickle.dumps(fn))(x) for x in items]
        finally:
            os.chdir(here)
            tempfile.tempdir = old_tmp

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_shipped_iterations_need_none_of_the_drivers_files(tmp_path, monkeypatch, capsys):
    """On Ray the iterations get the model's bytes (the driver's path, here relative to its working directory, means
    nothing on a worker) and their plans come back to --art-dir on the driver; nothing stays on the worker."""
    from debugkit.cli import _search_args
    from debugkit.debug import scratch
    from tests.debugkit.conftest import chain_model
    drv, cwd, tmp = (tmp_path / d for d in ("driver", "worker_cwd", "worker_tmp"))
    for d in (drv, cwd, tmp):
        d.mkdir()
    onnx.save(chain_model(), drv / "chain.onnx")
    monkeypatch.chdir(drv)
    monkeypatch.setattr(scratch, "_PROCESS_DIR", None)
    monkeypatch.setattr(_search_args, "make_executor", lambda args: _Elsewhere(cwd, tmp))
    rc = main(["debug", "repeat", "chain.onnx", "--until", "2", "--art-dir", "arts", "--log", "p.jsonl",
               "--input-shapes", "x:[2,4]"])
    assert rc == 0, capsys.readouterr()
    assert sorted(os.listdir(drv / "arts" / "good")) == ["engine_0.plan", "engine_1.plan"]
    assert (drv / "arts" / "good" / "engine_1.plan").read_bytes()[:6] == b"DKPLAN"
    import json
    logged = [json.loads(x) for x in (drv / "p.jsonl").read_text().splitlines()[1:]]
    assert [r["result"]["artifacts"] for r in logged] == [[os.path.join("arts", "good", f"engine_{k}.plan")]
                                                          for k in (0, 1)]
    assert os.listdir(cwd) == [] and not [n for n in os.listdir(tmp) if not n.startswith("debugkit_worker_")]
    left = [sorted(os.listdir(tmp / n)) for n in os.listdir(tmp)]   # only the worker's copy of the model
    assert len(left) == 1 and len(left[0]) == 1 and left[0][0].endswith("_chain.onnx"), left
