"""Reading side files (caches, replay files, data files, scripts) with bounds.

A side file must be a regular file (or `-` where a reader allows stdin), no larger than its kind's limit, and is
checked before any byte is read: a FIFO, a character device (`/dev/zero`, `/dev/full`) or a 30 GB file is one line
(InputFileError, exit 2) instead of a read that blocks forever or ends in the OOM killer. The file is opened
non-blocking and checked on the open descriptor, so a path swapped between check and read changes nothing.

Limits per kind (bytes); DEBUGKIT_MAX_DATA_FILE_BYTES (native/config.py) overrides the data-file limit.
"""
from __future__ import annotations

import os
import stat
import sys

from native.errors import InputFileError
from native.files.file_kind import kind_name

MiB = 1 << 20
LIMITS = {
    "timing cache": 512 * MiB,
    "timing cache preparations": 64 * 1024 * MiB,
    "tactic replay file": 64 * MiB,
    "calibration cache": 64 * MiB,
    "probe log": 256 * MiB,
    "data loader script": 16 * MiB,
    "options file": 16 * MiB,
    "JSON data file": 4096 * MiB,
    "data file": 64 * 1024 * MiB,
}


def limit_for(kind: str) -> int:
    if kind in ("data file", "JSON data file"):
        from native.config import max_data_file_bytes
        override = max_data_file_bytes()
        if override is not None:
            return override
    return LIMITS.get(kind, 256 * MiB)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _open_checked(path, kind, limit):
    """A read-only descriptor of `path` after checking it is a regular file within `limit`; its size."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputFileError(f"{kind} not found: {path}") from None
    except IsADirectoryError:
        raise InputFileError(f"{kind} {path} is a directory, not a file") from None
    except OSError as e:
        raise InputFileError(f"cannot read {kind} {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{kind} {path} is {kind_name(st.st_mode)}; a {kind} must be a regular file")
        if st.st_size > limit:
            raise InputFileError(f"{kind} {path} is {st.st_size} bytes, larger than the {_size(limit)} ({limit} "
                                 f"bytes) a {kind} may be; is it the right file?")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def check_side_file(path, kind: str, limit: int | None = None) -> int:
    """Check `path` as a side file of `kind` without reading it (for readers that open it themselves, e.g. h5py);
    returns its size. InputFileError naming the file when it is missing, not regular, or too large."""
    fd, size = _open_checked(os.fspath(path), kind, limit_for(kind) if limit is None else limit)
    os.close(fd)
    return size


def read_side_file(path, kind: str, limit: int | None = None, allow_stdin: bool = False) -> bytes:
    """The bytes of side file `path` of `kind`, bounded by the kind's limit (or `limit`)."""
    limit = limit_for(kind) if limit is None else limit
    path = os.fspath(path)
    if path == "-":
        if not allow_stdin:
            raise InputFileError(f"a {kind} cannot be read from stdin ('-'); give a file name")
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise InputFileError(f"{kind} on stdin is larger than the {_size(limit)} a {kind} may be")
        return data
    fd, size = _open_checked(path, kind, limit)
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(max(size - total, 0) + 1, 16 * MiB) or 1)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:   # the file grew while being read
                raise InputFileError(f"{kind} {path} grew past the {_size(limit)} a {kind} may be while being "
                                     f"read")
            chunks.append(chunk)
    except OSError as e:
        raise InputFileError(f"cannot read {kind} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_side_text(path, kind: str, limit: int | None = None, allow_stdin: bool = False) -> str:
    data = read_side_file(path, kind, limit, allow_stdin)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(f"{kind} {path} is not UTF-8 text (byte {e.start}); is it the right file?") from None


def read_side_json(path, kind: str, limit: int | None = None, allow_stdin: bool = False, error=InputFileError):
    """Parsed JSON of side file `path`; `error` (a DebugkitError class) names the file and where parsing failed."""
    import json
    text = read_side_text(path, kind, limit, allow_stdin)
    try:
        return json.loads(text)
    except ValueError as e:
        raise error(f"{kind} {path} is not valid JSON ({e}); is it the right file?") from None
