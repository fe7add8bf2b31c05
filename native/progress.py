"""Progress bars for long loops (tactic timing, layerwise runs, calibration, debug searches).

`progress(...)` gives a tqdm bar on stderr when stderr is a terminal, and a silent stand-in with the same small
interface otherwise (pipes, CI logs, `-q`), so callers never branch on where their output goes. `set_quiet(True)`
(the CLI's -q) silences every bar in the process; `set_quiet(False)` undoes it.
"""
from __future__ import annotations

import sys

_QUIET = False


def set_quiet(quiet: bool = True) -> None:
    """Silence (or re-enable) every progress bar in this process."""
    global _QUIET
    _QUIET = bool(quiet)


def is_quiet() -> bool:
    return _QUIET


def enabled() -> bool:
    """True when a bar would be drawn: not quiet, and stderr is a terminal."""
    if _QUIET:
        return False
    stream = sys.stderr
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False


class _Silent:
    """What `progress` returns when no bar is drawn: iterates, counts, and says nothing."""

    def __init__(self, iterable=None, total=None, desc="", unit="it"):
        self.iterable = iterable
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = 0
        self.postfix = ""

    def __iter__(self):
        if self.iterable is None:
            return
        for item in self.iterable:
            yield item
            self.n += 1

    def update(self, n=1):
        self.n += n

    def set_postfix_str(self, s="", refresh=True):
        self.postfix = s

    def set_description(self, desc=None, refresh=True):
        self.desc = desc or ""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(iterable=None, *, total=None, desc="", unit="it"):
    """A progress bar over `iterable` (or driven by `.update(n)`), usable as iterable and context manager.

    Drawn with tqdm on a terminal; silent when stderr is not a TTY or after `set_quiet(True)`. The bar disappears
    when done (leave=False) so finished work leaves only the log lines that say what was done.
    """
    if total is None and iterable is not None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    if not enabled():
        return _Silent(iterable, total=total, desc=desc, unit=unit)
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, dynamic_ncols=True)
