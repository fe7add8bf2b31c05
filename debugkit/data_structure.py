"""What a debugkit HDF5 data file may hold, checked before any tensor is read (docs/hardening.md).

The layout must be the writer's (debugkit/data_file.py): inputs `/iteration_<i>/<tensor>`, outputs
`/<runner>/iteration_<i>/<tensor>`. Refused, each with one DataFileError naming the file and the object: external
and soft links, virtual datasets and external raw storage (they would read other files on disk), datasets whose
declared size exceeds DEBUGKIT_MAX_TENSOR_BYTES or that are split into more than MAX_CHUNKS chunks, byte strings
and non-tensor datatypes, attributes debugkit writes as text holding something else, more than MAX_OBJECTS objects.

A corrupt file can make the HDF5 library itself loop forever or crash while it reads object headers or attributes
(fuzz case s24-610: a flipped address in the root attribute table). So the first read of a file, every object
header and attribute, happens in a forked child under a CPU limit (`isolated`): a hang or a crash there is a
DataFileError in the parent, which only then opens the file itself. (Tensor data is read in the parent, where a
damaged chunk is an HDF5 error named by the reader.)
"""
from __future__ import annotations

import os
import time

import numpy as np

from native.errors import DataFileError


def _h5():
    import h5py
    return h5py


MAX_OBJECTS = 1_000_000
MAX_CHUNKS = 1 << 16


def check_structure(f, path, kind):
    """Refuse what a data file must not hold, before any tensor is read. The layout must be the writer's:
    inputs `/iteration_<i>/<tensor>`, outputs `/<runner>/iteration_<i>/<tensor>`, nothing else. Refused: external
    links (they would read other files on disk), soft links, virtual datasets and external raw storage (same),
    datasets whose declared size exceeds DEBUGKIT_MAX_TENSOR_BYTES, string data other than the UTF-8 strings this
    writer stores for string tensors, other HDF5 datatypes (compound, references, ...)."""
    from native.limits import default_limits
    limit = default_limits().max_bytes
    count = 0
    levels = ["iterations", "tensors"] if kind == "inputs" else ["runners", "iterations", "tensors"]
    _check_text_attrs(f, "/", path)
    stack = [("", f, 0)]
    while stack:
        prefix, group, depth = stack.pop()
        for key in group.keys():
            count += 1
            if count > MAX_OBJECTS:
                raise DataFileError(f"{path} holds more than {MAX_OBJECTS} HDF5 objects; not a debugkit data file")
            _require_utf8(key, f"an object name under {prefix or '/'}", path)
            where = f"{prefix}/{key}"
            obj = _member(group, key, where, path)
            _check_text_attrs(obj, where, path)
            level = levels[depth]
            if level == "tensors":
                if not isinstance(obj, _h5().Dataset):
                    raise DataFileError(f"{path}: {where} is not a dataset; a data file's iteration groups hold "
                                        f"one dataset per tensor")
                _check_dataset(obj, where, path, limit)
                continue
            if not isinstance(obj, _h5().Group):
                raise DataFileError(f"{path}: {where} is not a group (expected {level[:-1]} groups here)")
            if level == "iterations" and iteration_index(key) is None:
                raise DataFileError(f"{path}: {where} is not an iteration group (expected iteration_<N>)")
            stack.append((where, obj, depth + 1))


TEXT_ATTRS = ("format", "kind", "command", "model_path", "model_sha256", "versions", "runner", "inputs_hash",
              "name", "dtype", "build_config", "loaded_outputs", "loaded_inputs")


def _check_text_attrs(obj, where, path):
    """The attributes debugkit writes as text must be text (a number or an array where a hash or a name belongs
    is a damaged or foreign file)."""
    for key in TEXT_ATTRS:
        if key in obj.attrs:
            v = obj.attrs[key]
            if isinstance(v, bytes):
                try:
                    v = v.decode()
                except UnicodeDecodeError:
                    raise DataFileError(f"{path}: attribute '{key}' of {where} is not UTF-8 text") from None
            if not isinstance(v, str):
                raise DataFileError(f"{path}: attribute '{key}' of {where} is {type(v).__name__}, not text")
            _require_utf8(v, f"attribute '{key}' of {where}", path)


def _require_utf8(text: str, what: str, path):
    """h5py hands invalid UTF-8 over as str with surrogate escapes, which fail later when encoded again (a name
    looked up, a report written): refuse them here, as bad input."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataFileError(f"{path}: {what} is not valid UTF-8 text; not a debugkit data file") from None


def _member(group, key, where, path):
    h5py = _h5()
    link = group.get(key, getlink=True)
    if isinstance(link, h5py.ExternalLink):
        raise DataFileError(f"{path}: {where} is an HDF5 external link (to {link.filename}); data files may not "
                            f"point at other files")
    if isinstance(link, h5py.SoftLink):
        raise DataFileError(f"{path}: {where} is an HDF5 soft link; debugkit data files hold none")
    obj = group[key]
    if not isinstance(obj, (h5py.Group, h5py.Dataset)):
        raise DataFileError(f"{path}: {where} is an HDF5 {type(obj).__name__}, not a group or dataset")
    return obj


def iteration_index(key: str):
    head, _, tail = key.partition("_")
    if head != "iteration" or not tail.isdigit() or len(tail) > 9:
        return None
    return int(tail)


def _check_dataset(ds, where, path, limit):
    h5py = _h5()
    if ds.is_virtual:
        raise DataFileError(f"{path}: {where} is a virtual dataset (its data lives in other files); refused")
    if ds.external:
        raise DataFileError(f"{path}: {where} keeps its data in external files {[e[0] for e in ds.external]}; "
                            f"refused")
    dt = ds.dtype
    if dt.kind == "O" or dt.kind in "SU":
        info = h5py.check_string_dtype(dt)
        if dt.kind != "O" or info is None or info.encoding != "utf-8":
            raise DataFileError(f"{path}: {where} holds {dt} strings; data files hold numbers (string tensors as "
                                f"variable-length UTF-8)")
    elif dt.kind not in "biufc" or dt.names is not None or dt.subdtype is not None:
        raise DataFileError(f"{path}: {where} has HDF5 datatype {dt}, which is not a tensor dtype")
    shape = ds.shape or ()
    if shape is None or any(int(d) < 0 for d in shape):
        raise DataFileError(f"{path}: {where} has no usable shape")
    size = int(np.prod([int(d) for d in shape], dtype=object)) * max(dt.itemsize, 1)
    if size > limit:
        raise DataFileError(f"{path}: {where} declares shape {tuple(shape)} of {dt} ({size} bytes), larger than "
                            f"the tensor size limit of {limit} bytes (DEBUGKIT_MAX_TENSOR_BYTES)")
    chunks = ds.chunks
    if chunks:   # HDF5 visits every chunk: a million 16-byte chunks take minutes to read (debugkit writes none)
        count = int(np.prod([-(-int(d) // max(int(c), 1)) for d, c in zip(shape, chunks)], dtype=object))
        if count > MAX_CHUNKS:
            raise DataFileError(f"{path}: {where} is stored in {count} chunks of shape {tuple(chunks)}; more than "
                                f"{MAX_CHUNKS} chunks is not a data file debugkit reads")


CHECK_CPU_SECONDS = 5      # metadata only: a real data file's headers read in milliseconds
CHECK_WALL_SECONDS = 120


def read_all_headers(f):
    """Touch what a reader will touch first: every object header and every attribute."""
    dict(f.attrs)
    f.visititems(lambda name, obj: dict(obj.attrs))


def isolated(fn, path, *args):
    """Run `fn(*args)` in a forked child under a CPU limit: its DataFileError comes back as one here, a hang or a
    crash becomes one. Where fork is missing, it runs here."""
    if not hasattr(os, "fork"):
        return fn(*args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        code, msg = 0, b""
        try:
            os.close(r)
            import resource
            resource.setrlimit(resource.RLIMIT_CPU, (CHECK_CPU_SECONDS, CHECK_CPU_SECONDS + 1))
            fn(*args)
        except DataFileError as e:
            code, msg = 1, str(e).encode()
        except BaseException as e:   # noqa: BLE001 - anything else the HDF5 library raised on a corrupt file
            text = str(e).splitlines()[0][:120] if str(e) else ""
            code, msg = 1, f"{path} is a corrupt HDF5 data file ({type(e).__name__}: {text})".encode()
        try:
            os.write(w, msg[:8000])
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + CHECK_WALL_SECONDS
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(r)
            raise DataFileError(f"{path}: the HDF5 library did not finish reading its structure in "
                                f"{CHECK_WALL_SECONDS} s; the file is corrupt")
        else:
            time.sleep(0.005)
    msg = b""
    while True:
        chunk = os.read(r, 8192)
        if not chunk:
            break
        msg += chunk
    os.close(r)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        what = "ran past its CPU limit" if sig in (24, 9) else f"crashed (signal {sig})"
        raise DataFileError(f"{path}: the HDF5 library {what} reading its structure; the file is corrupt")
    if os.WEXITSTATUS(status) != 0:
        raise DataFileError(msg.decode(errors="replace") or f"{path} is a corrupt HDF5 data file")
