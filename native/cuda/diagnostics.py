"""cuDNN's own diagnostics, captured: the frontend prints to the process's stderr (file descriptor 2) while it
builds graphs and execution plans (`Warning: CUDNN_STATUS_NOT_SUPPORTED ...`, engine-config JSON). Around those
calls fd 2 is pointed at a temporary file and restored (a process-wide side effect, undone in `finally`); what was
said becomes one summary line per layer in the verbose log (`summary`), never raw lines on the terminal."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

_STATUS = re.compile(r"CUDNN_STATUS_[A-Z_]+")


@contextlib.contextmanager
def captured_stderr(lines: list):
    """Run the body with fd 2 redirected to a temporary file; its lines are appended to `lines` afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no fd 2 to redirect (an embedded interpreter): nothing to capture
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(line for line in tmp.read().decode("utf-8", "replace").splitlines() if line.strip())


def summary(lines) -> str:
    """One line for what cuDNN said: how many lines, and how often each status appeared."""
    counts = {}
    for line in lines:
        for status in _STATUS.findall(line):
            counts[status] = counts.get(status, 0) + 1
    kinds = ", ".join(f"{n} x {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{len(lines)} diagnostic line(s)" + (f" ({kinds})" if kinds else "")
