"""Progress bars for long loops (tactic timing, layerwise runs, calibration, debug searches).

`progress(...)` gives a tqdm bar on stderr when stderr is a terminal, and a silent stand-in with the same small
interface otherwise (pipes, CI logs, `-q`), so callers never branch on where their output goes. `set_quiet(True)`
(the CLI's -q) silences every bar in the process; `set_quiet(False)` undoes it.

`status(message)` is a line about one piece of long work ("building engine-runner … done"): shown on a terminal,
but inside `search_scope()` (a debug search, whose one bar says how far it is) it goes to the log at INFO instead,
so a search of 200 builds draws one bar, not 400 lines. `SearchBar` is that one bar: its total is the search's
bound in probes, revised as phases end (`first_total` and `max_total` keep it honest).
"""
from __future__ import annotations

import contextlib
import sys
from native.logger import G_LOGGER

_QUIET = False
_SEARCHES = 0


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


def progress(iterable=None, *, total=None, desc="", unit="it", outer=False):
    """A progress bar over `iterable` (or driven by `.update(n)`), usable as iterable and context manager.

    Drawn with tqdm on a terminal; silent when stderr is not a TTY or after `set_quiet(True)`. The bar disappears
    when done (leave=False) so finished work leaves only the log lines that say what was done.
    """
    if total is None and iterable is not None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    if not enabled() or (_SEARCHES and not outer):   # a search draws one bar: builds inside it draw none
        return _Silent(iterable, total=total, desc=desc, unit=unit)
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, dynamic_ncols=True)


@contextlib.contextmanager
def search_scope():
    """Within the block, `status` lines go to the log (INFO) instead of the terminal."""
    global _SEARCHES
    _SEARCHES += 1
    try:
        yield
    finally:
        _SEARCHES -= 1


def in_search() -> bool:
    return _SEARCHES > 0


def status(message: str) -> None:
    """A progress line about long work: on the terminal (outside a search); inside a search to the log at INFO
    (-v, --log-file); elsewhere (a pipe) to the log at VERBOSE."""
    if enabled() and not _SEARCHES:
        print(message, file=sys.stderr, flush=True)
    elif _SEARCHES:
        G_LOGGER.info(message)
    else:
        G_LOGGER.verbose(message)


class SearchBar:
    """One bar for a whole search: `total` is its bound (every build and probe it can still make, counted in
    probes), set with `plan(total)` and lowered or raised with `revise(total)` when a phase ends; `step()` per probe.
    `first_total` and `max_total` record how honest the first bound was."""

    def __init__(self, desc: str, total: int = 0, unit: str = "probe"):
        self.first_total = self.max_total = None
        self.n = 0
        self.bar = progress(total=total or None, desc=desc, unit=unit, outer=True)
        if total:
            self.plan(total)

    def plan(self, total: int) -> None:
        total = max(int(total), self.n)
        if self.first_total is None:
            self.first_total = total
        self.max_total = max(self.max_total or 0, total)
        self.bar.total = total
        if hasattr(self.bar, "refresh"):
            self.bar.refresh()

    revise = plan

    def step(self, n: int = 1, postfix: str | None = None) -> None:
        self.n += n
        if self.bar.total is not None and self.n > self.bar.total:   # a bound is a bound: never show n > total
            self.plan(self.n)
        if postfix is not None:
            self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        # the last count drawn, whatever tqdm's redraw throttling skipped (a search whose last probes came within
        # its minimum interval would leave an early count as the bar's last frame); then the bar goes (leave=False)
        if hasattr(self.bar, "refresh"):
            self.bar.refresh()
        self.bar.close()
