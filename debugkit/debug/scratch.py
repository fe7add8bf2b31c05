"""Temporary directories of searches that never outlive them.

`search_dir(prefix)` is a directory for one search, removed when the block ends (normal exit, error, Ctrl-C,
SIGTERM: all unwind through it). A run killed outright (kill -9, out of memory) cannot clean up, so the name carries
the owner's pid and every new search first removes directories of its prefix whose owner is gone. `process_scratch_dir()`
is one directory per worker process (a model copy for an external check command on a node without the driver's
files), removed when the process exits and, likewise, by the next search if the process was killed.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile

_PROCESS_DIR = None
_OWNED = re.compile(r"_pid(\d+)_")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(prefix: str, directory: str | None = None) -> int:
    """Remove `<prefix>pid<N>_*` directories in the temporary directory whose process N has ended; how many."""
    directory = directory or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(prefix):
            continue
        m = _OWNED.search(name[len(prefix) - 1:])
        if m is None or _alive(int(m.group(1))):
            continue
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
        removed += 1
    return removed


@contextlib.contextmanager
def search_dir(prefix: str):
    """A fresh directory `<tmp>/<prefix>pid<N>_XXXX` for the block; stale ones of killed runs go first."""
    remove_stale(prefix)
    path = tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}_")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def process_scratch_dir() -> str:
    """This process's own scratch directory, made on first use and removed when the process exits."""
    global _PROCESS_DIR
    if _PROCESS_DIR is None or not os.path.isdir(_PROCESS_DIR):
        remove_stale("debugkit_worker_")
        _PROCESS_DIR = tempfile.mkdtemp(prefix=f"debugkit_worker_pid{os.getpid()}_")
        atexit.register(shutil.rmtree, _PROCESS_DIR, True)
    return _PROCESS_DIR
