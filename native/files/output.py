"""Writing output files so that nothing is clobbered or half-written.

Every writer (plans, data files, timing caches and preparations, replay and tactic files, calibration caches,
probe logs, reports, ONNX models) goes through `output_file` / `output_path` / `write_bytes` / `write_text` /
`write_json`. The rules, by what the target is:

- a regular file (or a new one): the content goes to a temporary file in the same directory, is flushed and
  fsync'd, then renamed over the target; the old file is intact until the new one is complete, and on any
  error or signal (KeyboardInterrupt included) the temporary file is removed;
- a symlink: its target (resolved once) is written by the same rule; the link stays a link;
- a character device, a FIFO, `/dev/stdout`, `/dev/fd/N` or `-` (stdout): written in place as a stream when the
  format can be streamed (`streamable=True`), else refused; never replaced by a regular file;
- a directory or anything else: refused; so is a file in a folder that does not exist (no folder is made).

A full disk, a quota or a file-size limit is one line, "could not write X: no space left on device; X is
unchanged" (an OutputFileError: exit 2 in the CLI), and leaves no partial file.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import tempfile

from native.errors import OutputFileError
from native.files.file_kind import kind_name

_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "no space left on device (disk quota exceeded)",
         errno.EFBIG: "no space left on device (file size limit exceeded)"}
_STREAM_ALIASES = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")


class Target:
    """Where an output path really goes: `kind` is "file" (regular or new), "stream" (device, FIFO, stdout) or
    "stdout" (`-`); `real` is the path written (a symlink's target, resolved once)."""

    def __init__(self, path: str, kind: str, real: str, existed: bool):
        self.path, self.kind, self.real, self.existed = path, kind, real, existed


def resolve_output(path, what: str = "output", streamable: bool = True) -> Target:
    """Classify `path` as an output target (see the module docstring); OutputFileError when it cannot be written
    by these rules. Nothing is created or changed."""
    path = os.fspath(path)
    if path == "-":
        if not streamable:
            raise OutputFileError(f"{what} cannot be written to stdout ('-'): this format needs a seekable file; "
                                  f"give a file name")
        return Target(path, "stdout", path, True)
    if not path:
        raise OutputFileError(f"{what}: empty output path")
    alias = path.startswith(_STREAM_ALIASES)
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputFileError(f"could not write {path}: {e.strerror or e}") from None
    if alias or (st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))):
        if not streamable:
            kind = "a stream" if st is None else kind_name(st.st_mode)
            raise OutputFileError(f"{what} {path} is {kind}; this format needs a seekable regular file, and "
                                  f"{path} is never replaced by one. Give a file name")
        return Target(path, "stream", path if alias else real, True)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputFileError(f"{what} {path} is {kind_name(st.st_mode)}, not a file; give a file name")
    parent = os.path.dirname(real) or "."
    if not os.path.isdir(parent):
        raise OutputFileError(f"could not write {path}: directory {os.path.dirname(path) or '.'} does not exist")
    return Target(path, "file", real, st is not None)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _full_disk_error(path, e: OSError, existed: bool):
    reason = _FULL.get(e.errno)
    after = f"{path} is unchanged" if existed else f"{path} was not created"
    if reason is None:
        reason = e.strerror or str(e)
    return OutputFileError(f"could not write {path}: {reason}; {after}")


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class PendingOutput:
    """A temporary file beside an output, for writers that fill it over time (data files written per iteration)
    or need a file name (h5py, onnx.save): `commit()` fsyncs it and renames it onto the target, `abort()` removes
    it. Until `commit()` returns, the target is as it was."""

    def __init__(self, path, what: str = "output"):
        self.target = resolve_output(path, what, streamable=False)
        self.path = self.target.path
        self.tmp = _temp_beside(self.target)
        self.done = False

    def commit(self):
        if self.done:
            return
        try:
            _fsync_path(self.tmp)
            os.replace(self.tmp, self.target.real)
        except OSError as e:
            self.abort()
            raise self.error(e) from None
        self.done = True
        _fsync_dir(os.path.dirname(self.target.real) or ".")

    def abort(self):
        if not self.done:
            _remove(self.tmp)
            self.done = True

    def error(self, e: OSError) -> OutputFileError:
        """The one-line OutputFileError for an OSError met while writing this output."""
        return _full_disk_error(self.path, e, self.target.existed)


@contextlib.contextmanager
def output_path(path, what: str = "output"):
    """Yield a temporary path beside `path` for writers that need a file name (h5py, onnx.save); when the block
    ends normally the file is fsync'd and renamed onto `path` (regular files and symlinks' targets only). On any
    exception or signal the temporary file is removed and `path` is unchanged; OSErrors become OutputFileError.
    """
    pending = PendingOutput(path, what)
    try:
        try:
            yield pending.tmp
        except OSError as e:
            raise pending.error(e) from None
        pending.commit()
    finally:
        pending.abort()


def _temp_beside(target: Target) -> str:
    directory, base = os.path.split(target.real)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory or ".")
    except OSError as e:
        raise _full_disk_error(target.path, e, target.existed) from None
    try:
        mode = stat.S_IMODE(os.stat(target.real).st_mode) if target.existed else 0o666 & ~_umask()
        os.fchmod(fd, mode)
    except OSError:
        pass
    finally:
        os.close(fd)
    return tmp


def _fsync_path(tmp):
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(tmp):
    try:
        os.remove(tmp)
    except OSError:
        pass


@contextlib.contextmanager
def output_file(path, mode: str = "wb", what: str = "output", streamable: bool = True, encoding="utf-8"):
    """Yield a file object to write `path` by the module's rules (mode "wb" or "w"). The content lands when
    the block ends normally; any exception leaves the old file as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"output_file mode must be 'w' or 'wb', not {mode!r}")
    target = resolve_output(path, what, streamable)
    if target.kind == "stdout":
        out = sys.stdout.buffer if mode == "wb" else sys.stdout
        yield out
        out.flush()
        return
    if target.kind == "stream":
        try:
            with open(target.real, mode, encoding=None if "b" in mode else encoding) as f:
                yield f
        except OSError as e:
            raise _full_disk_error(target.path, e, True) from None
        return
    with output_path(path, what) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()


def write_bytes(path, data, what: str = "output", streamable: bool = True) -> int:
    """Write `data` (bytes, or a list of buffers written in order) to `path`; returns the size written."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    size = 0
    with output_file(path, "wb", what, streamable) as f:
        for part in parts:
            size += f.write(part)
    return size


def write_text(path, text: str, what: str = "output", streamable: bool = True):
    with output_file(path, "w", what, streamable) as f:
        f.write(text)


def write_json(path, doc, what: str = "output", streamable: bool = True, **dump_kw):
    """JSON of `doc` to `path`; serialised first, so an unserialisable value leaves `path` untouched."""
    text = json.dumps(doc, **dump_kw)
    write_text(path, text + ("\n" if dump_kw.get("indent") is not None else ""), what, streamable)


def append_text(path, text: str, what: str = "log"):
    """Append `text` to a log that must survive a crash as far as it got (probe logs, --log-file): written in
    place and flushed. A full disk is one OutputFileError line; the lines already there stay."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
    except OSError as e:
        reason = _FULL.get(e.errno) or e.strerror or str(e)
        raise OutputFileError(f"could not write {path}: {reason}; the {what}'s earlier lines are kept") from None


def is_stream(path) -> bool:
    """True when writing `path` streams (stdout, a device or FIFO) rather than replacing a file."""
    try:
        return resolve_output(path).kind != "file"
    except OutputFileError:
        return False


__all__ = ["Target", "PendingOutput", "resolve_output", "output_file", "output_path", "write_bytes", "write_text", "write_json",
           "append_text", "is_stream"]
