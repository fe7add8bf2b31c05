"""Before a command does any work: its outputs must not be its inputs, and no other run may be writing them.

`refuse_overwriting_inputs(outputs, inputs)` compares resolved paths (symlinks, `..`, hard links by device and
inode), so `convert m.onnx -o ./m.onnx` or `-o link-to-m.onnx` is refused before anything is read.
`OutputLocks` holds an advisory lock (fcntl.flock) per output for the whole command: a second run writing the same
file is refused at once, naming the process that holds it, instead of interleaving logs and renames.
Lock files live in the temporary directory (never beside the user's files), keyed by the resolved path.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile

from native.errors import OutputFileError


def _identity(path):
    """(resolved path, (device, inode) or None) of `path`; None for `-` and empty paths."""
    path = os.fspath(path)
    if path in ("", "-"):
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real, None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None   # devices, FIFOs: reading and writing one is the user's business (e.g. /dev/null twice)
    return real, (st.st_dev, st.st_ino)


def refuse_overwriting_inputs(outputs, inputs):
    """OutputFileError when an output path resolves to a file the same command reads.

    `outputs` and `inputs` are iterables of (role, path) pairs, e.g. ("-o", "m.plan"), ("model", "m.onnx");
    None paths are skipped. The message names both roles."""
    seen = {}
    for role, path in inputs:
        if path is None:
            continue
        ident = _identity(path)
        if ident is None:
            continue
        seen.setdefault(ident[0], (role, path))
        if ident[1] is not None:
            seen.setdefault(ident[1], (role, path))
    for role, path in outputs:
        if path is None:
            continue
        ident = _identity(path)
        if ident is None:
            continue
        hit = seen.get(ident[0]) or (seen.get(ident[1]) if ident[1] is not None else None)
        if hit is not None:
            in_role, in_path = hit
            same = "" if os.fspath(in_path) == os.fspath(path) else f" (the same file as {in_path})"
            raise OutputFileError(f"{role} {path} is also this command's {in_role}{same}: writing it would "
                                  f"destroy an input; choose another output path")


def lock_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), f"debugkit-locks-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


class OutputLocks:
    """Advisory locks on a command's outputs, held until `release()` (or the `with` block ends).

    Only regular files (existing or not) and directories are locked: streams such as /dev/null can be written by
    any number of runs. `wait=False` refuses at once with the holder's pid; `wait=True` blocks until it ends."""

    def __init__(self, outputs, wait: bool = False):
        self.outputs = [(role, p) for role, p in outputs if p is not None]
        self.wait = wait
        self._fds: list[int] = []

    def acquire(self):
        import fcntl
        seen = set()
        try:
            for role, path in self.outputs:
                ident = _identity(path)
                if ident is None or ident[0] in seen:
                    continue
                seen.add(ident[0])
                name = hashlib.sha256(ident[0].encode()).hexdigest()[:32] + ".lock"
                fd = os.open(os.path.join(lock_dir(), name), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    holder = _read_pid(fd)
                    os.close(fd)
                    who = f"another debugkit run (pid {holder})" if holder else "another debugkit run"
                    raise OutputFileError(f"{role} {path} is being written by {who}; wait for it to finish or "
                                          f"choose another output path") from None
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                self._fds.append(fd)
        except BaseException:
            self.release()
            raise
        return self

    def release(self):
        while self._fds:
            fd = self._fds.pop()
            try:
                os.close(fd)   # closing drops the flock
            except OSError:
                pass

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def _read_pid(fd) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
