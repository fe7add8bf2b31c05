"""A debug search on a terminal is quiet and honest: one progress bar whose total is the search's bound (it never
grows past its first value by more than 10%), a short summary, no per-build lines and no raw numpy warnings; those go
to -v and --log-file, summarised in one line."""
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import numpy as np
import onnx
import pytest

from tests.debugkit.debug.test_precision import ROOT, _tool, mlp

pytest.importorskip("backends.engine.builder.precision_spec")


@pytest.fixture
def planted(tmp_path):
    from backends.runners import OnnxrtRunner
    model = mlp(depth=6)
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    with OnnxrtRunner(model, mark=["m1", "m4"]) as r:
        values = r.infer(feeds, taps=["m1", "m4"])
    _tool().plant(model, ["mm1", "mm4"], values)
    path = tmp_path / "planted.onnx"
    onnx.save(model, path)
    return str(path)


def _on_terminal(argv, cwd) -> tuple[int, str]:
    """Run `python -m debugkit argv` with stdout and stderr on a pseudo-terminal (80x24); (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1", COLUMNS="80")
    proc = subprocess.Popen([sys.executable, "-m", "debugkit", *argv], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode("utf-8", "replace")


def test_precision_search_on_a_terminal_is_one_bar_and_a_summary(tmp_path, planted):
    log = tmp_path / "search.log"
    rc, out = _on_terminal(["debug", "precision", planted, "--fp16", "--atol", "1e-2", "-o", "p.json",
                            "--log-file", str(log)], tmp_path)
    assert rc == 0, out
    lines = out.replace("\r\n", "\n").count("\n")
    assert lines <= 15, out
    assert "building" not in out and "RuntimeWarning" not in out and "timing tactics" not in out
    totals = [int(t) for t in re.findall(r"\|\s*\d+/(\d+) \[", out)]
    assert totals, "no progress bar was drawn"
    assert max(totals) <= 1.1 * totals[0], totals
    done = [int(t) for t in re.findall(r"\|\s*(\d+)/\d+ \[", out)]
    assert done == sorted(done) and done[-1] >= 1 + 18   # per probe: the base build, 18 ranking runs, the probes
    assert "2 layer(s)" not in out and "4 layer(s) of" in out   # the answer: 2 planted layers + 2 compensations
    logged = log.read_text()
    # what the terminal did not show is in the log file (the builds' own lines)
    assert "built engine '" in logged and "built engine" not in out


def test_numpy_warnings_are_counted_per_layer_and_logged():
    from native.logger import Logger, Severity, tally_warnings

    class Layer:
        name, precision = "conv1", "float16"

    class Sink:
        def __init__(self):
            self.lines = []

        def write(self, s):
            self.lines.append(s)

        def flush(self):
            pass

    sink = Sink()
    logger = Logger(Severity.WARNING, stream=sink)
    logger.file, logger.file_severity = sink, Severity.VERBOSE
    with tally_warnings(lambda: Layer, logger) as tally:
        for _ in range(3):
            np.float16(60000) * np.float16(4)   # overflow encountered in scalar multiply
        np.zeros(2) / np.zeros(2)                # invalid value encountered in divide
    assert tally.count == 4 and tally.kinds == {"overflow": 3, "invalid value": 1}
    assert tally.layers == {"conv1": "float16"}
    assert tally.summary().startswith("4 numpy warnings (overflow 3, invalid value 1) in 1 layer (fp16 1)")
    text = "".join(sink.lines)
    assert text.count("[I] numpy: overflow") == 1 and text.count("[V] numpy: overflow") == 2   # first per layer: INFO
    assert "layer 'conv1' (float16)" in text


def test_search_bar_records_its_bound():
    from native.progress import SearchBar
    bar = SearchBar("x", 10)
    bar.step()
    bar.plan(8)
    bar.step(9)   # past the bound: the total follows, never n > total
    assert (bar.first_total, bar.max_total, bar.bar.total, bar.n) == (10, 10, 10, 10)
    bar.close()
