"""Builds (tactic timing per layer) and layerwise runs draw a bar on a terminal, and nothing on a pipe or with -q."""
import io
import os
import sys

import numpy as np

from backends.engine import build_plan_from_onnx
from native import progress as P

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "example.onnx")


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _with_stderr(stream, fn):
    old = sys.stderr
    sys.stderr = stream
    try:
        return fn()
    finally:
        sys.stderr = old


def test_build_shows_tactic_timing_on_a_tty_only():
    tty = _Tty()
    _with_stderr(tty, lambda: build_plan_from_onnx(EXAMPLE))
    assert "timing tactics" in tty.getvalue() and "layer/s" in tty.getvalue()
    pipe = io.StringIO()
    _with_stderr(pipe, lambda: build_plan_from_onnx(EXAMPLE))
    assert "timing tactics" not in pipe.getvalue()
    P.set_quiet(True)
    try:
        tty = _Tty()
        _with_stderr(tty, lambda: build_plan_from_onnx(EXAMPLE))
        assert "timing tactics" not in tty.getvalue()
    finally:
        P.set_quiet(False)


def test_mark_all_shows_layerwise_progress(tmp_path):
    from debugkit.cli.main import main
    tty = _Tty()
    code = _with_stderr(tty, lambda: main(["run", EXAMPLE, "--engine", "--onnxrt", "--mark-all"]))
    assert code == 0
    assert "layerwise:" in tty.getvalue() and "tensor/s" in tty.getvalue()
    tty = _Tty()
    code = _with_stderr(tty, lambda: main(["run", EXAMPLE, "--engine", "--onnxrt", "--mark-all", "-q"]))
    assert code == 0 and "tensor/s" not in tty.getvalue() and "layer/s" not in tty.getvalue()
    assert not P.is_quiet()  # -q is undone after the command
    assert np.isfinite(code)
