"""HDF5 data files for inputs, outputs and per-layer tensors, with provenance.

Layout (format "debugkit-data/1"):
    /                         attrs: format, kind ("inputs" | "outputs"), versions (JSON), command, model_path, model_sha256
    /iteration_<i>/<tensor>   inputs files: one dataset per input; group attrs: inputs_hash
    /<runner>/                outputs files: attrs runner, build_config (JSON), model_sha256, layerwise
    /<runner>/iteration_<i>/<tensor>   one dataset per output or intermediate tensor; group attrs: inputs_hash
Tensor names are stored escaped ("/" → "%2F") with the real name in the dataset's `name` attribute.
Writers flush after every iteration, so nothing is held in memory across iterations. Files are written whole
(a temporary file renamed at the end, `complete` written last); loaded files are checked first (data_structure.py).
"""
from __future__ import annotations

import hashlib
import json
import platform

import numpy as np

from native.errors import DataFileError, InputFileError
from debugkit.data_structure import check_structure, isolated, iteration_index, read_all_headers
from native.files.signals import signals_deferred

FORMAT = "debugkit-data/1"


def escape(name: str) -> str:
    s = name.replace("%", "%25").replace("/", "%2F")
    return "%2E" + s[1:] if s.startswith(".") else (s or "%00")


def _unescape(key: str) -> str:
    s = key
    if s == "%00":
        return ""
    if s.startswith("%2E"):
        s = "." + s[3:]
    return s.replace("%2F", "/").replace("%25", "%")


unescape = _unescape


def inputs_hash(feeds: dict) -> str:
    """sha256 over names, dtypes, shapes and bytes of the feeds (order-independent)."""
    h = hashlib.sha256()
    for name in sorted(feeds):
        v = np.ascontiguousarray(feeds[name])
        h.update(f"{name}|{v.dtype.str}|{v.shape}|".encode())
        h.update(v.tobytes() if v.dtype != object else repr(v.tolist()).encode())
    return h.hexdigest()


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("debugkit", "numpy", "onnx", "onnxruntime", "h5py"):
        try:
            from importlib.metadata import version
            out[mod] = version(mod)
        except Exception:
            pass
    return out


def _h5():
    import h5py
    return h5py


class _WriteGuard:
    """The file object HDF5 writes through (h5py's fileobj driver). The first OSError (a full disk, a quota, a
    file-size limit) is kept and every later write is dropped, so HDF5 never sees a failed write: its own error
    path after one (reference-count errors, a crash at exit) is never taken. The owner checks `error` before
    committing and discards the file when it is set."""

    def __init__(self, path):
        self.f = open(path, "r+b")
        self.error: OSError | None = None

    def write(self, data):
        n = memoryview(data).nbytes
        if self.error is None:
            try:
                self.f.write(data)
                return n
            except OSError as e:
                self.error = e
        self.f.seek(n, 1)
        return n

    def readinto(self, buf):
        return self.f.readinto(buf)

    def read(self, n=-1):
        return self.f.read(n)

    def seek(self, pos, whence=0):
        return self.f.seek(pos, whence)

    def tell(self):
        return self.f.tell()

    def truncate(self, size=None):
        if self.error is None:
            try:
                return self.f.truncate(size)
            except OSError as e:
                self.error = e
        return size

    def flush(self):
        if self.error is None:
            try:
                self.f.flush()
            except OSError as e:
                self.error = e

    def close(self):
        try:
            self.f.close()
        except OSError as e:
            self.error = self.error or e


def _h5_boundary(fn):
    """A DataWriter method whose HDF5 errors drop the temporary file and surface as one line."""
    def wrapped(self, *a, **kw):
        if self.f is None:
            raise DataFileError(f"data file {self.path} is already closed")
        try:
            with signals_deferred():   # a Ctrl-C inside HDF5's write callback would be lost there
                out = fn(self, *a, **kw)
        except BaseException as e:
            self._fail(e)
        if self.guard.error is not None:   # the disk filled up: stop now, not after the last iteration
            self._fail(self.guard.error)
        return out
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


class DataWriter:
    """Writes one HDF5 data file incrementally. `kind` is "inputs" or "outputs".

    The file is written to a temporary file beside `path` (native/files): `commit()` marks it complete (the
    `complete` attribute, written last) and renames it onto `path`; `close()` without `commit()` (an error, Ctrl-C)
    removes it, so an existing file at `path` survives any failure byte for byte. Used as a context manager it
    commits when the block ends normally. HDF5 errors are caught here (the h5py boundary): a full disk is one
    OutputFileError line."""

    def __init__(self, path: str, kind: str, provenance: dict | None = None):
        from native.files import PendingOutput
        self.path, self.kind = path, kind
        self.f = None
        self.pending = PendingOutput(path, f"data file ({kind})")
        self.guard = _WriteGuard(self.pending.tmp)
        try:
            with signals_deferred():
                self.f = _h5().File(self.guard, "w")
                self.f.attrs["format"] = FORMAT
                self.f.attrs["kind"] = kind
                self.f.attrs["complete"] = False
                self.f.attrs["versions"] = json.dumps(package_versions())
                for k, v in (provenance or {}).items():
                    self.f.attrs[k] = v if isinstance(v, str) else json.dumps(v)
        except BaseException as e:
            self._fail(e)

    def _fail(self, e: BaseException):
        """Drop the temporary file and re-raise `e` (an OSError from h5py as one OutputFileError line)."""
        f, self.f = self.f, None
        if f is not None:
            try:
                with signals_deferred():
                    f.close()
            except Exception:   # the file is discarded anyway
                pass
        self.guard.close()
        self.pending.abort()
        if self.guard.error is not None:
            raise self.pending.error(self.guard.error) from None
        if isinstance(e, OSError):
            raise self.pending.error(e) from None
        if isinstance(e, RuntimeError) and not isinstance(e, RecursionError):
            raise self.pending.error(OSError(None, str(e).splitlines()[0] if str(e) else "HDF5 error")) from None
        raise e

    def _group(self, runner, iteration, ihash=None):
        base = self.f if runner is None else self.f.require_group(escape(runner))
        if runner is not None:
            base.attrs["runner"] = runner
        g = base.require_group(f"iteration_{iteration}")
        if ihash is not None:
            g.attrs["inputs_hash"] = ihash
        return g

    @_h5_boundary
    def set_runner_attrs(self, runner: str, attrs: dict):
        g = self.f.require_group(escape(runner))
        g.attrs["runner"] = runner
        for k, v in attrs.items():
            g.attrs[k] = v if isinstance(v, str) else json.dumps(v)

    @_h5_boundary
    def write_inputs(self, iteration: int, feeds: dict):
        g = self._group(None, iteration, inputs_hash(feeds))
        for name, v in feeds.items():
            self._dataset(g, name, v)
        self.f.flush()

    @_h5_boundary
    def write(self, runner: str, iteration: int, name: str, value, ihash: str | None = None):
        self._dataset(self._group(runner, iteration, ihash), name, value)

    @_h5_boundary
    def write_many(self, runner: str, iteration: int, values: dict, ihash: str | None = None):
        g = self._group(runner, iteration, ihash)
        for name, v in values.items():
            self._dataset(g, name, v)
        self.f.flush()

    @staticmethod
    def _dataset(group, name, value):
        key = escape(name)
        if key in group:
            del group[key]
        if value is None or isinstance(value, list):
            ds = group.create_dataset(key, data=np.zeros(0, np.float32))
            ds.attrs["kind"] = "none" if value is None else "sequence"
        else:
            v = np.asarray(value)
            if v.dtype == object or v.dtype.kind in "US":
                ds = group.create_dataset(key, data=v.astype(str).astype(object), dtype=_h5().string_dtype())
            elif v.dtype.kind == "V" or v.dtype.name.startswith(("bfloat16", "float8", "float4")):
                ds = group.create_dataset(key, data=v.astype(np.float32))
                ds.attrs["dtype"] = v.dtype.name
            else:
                ds = group.create_dataset(key, data=v)
        ds.attrs["name"] = name

    def commit(self):
        """Mark the file complete, close it and put it in place of `path` (whole or not at all)."""
        if self.f is None:
            return
        try:
            with signals_deferred():
                self.f.attrs["complete"] = True
                self.f.close()
                self.f = None
            self.guard.flush()
            if self.guard.error is not None:
                raise self.guard.error
        except BaseException as e:
            self._fail(e)
        self.guard.close()
        self.pending.commit()

    def close(self):
        """Discard the file unless `commit()` ran: the old file at `path`, if any, stays as it was."""
        if self.f is not None:
            try:
                with signals_deferred():
                    self.f.close()
            except Exception:
                pass
            self.f = None
        self.guard.close()
        self.pending.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.commit()
        self.close()


def _h5_read_boundary(fn):
    """A DataFile method whose HDF5 errors (a corrupt attribute, object header or chunk) are DataFileError."""
    def wrapped(self, *a, **kw):
        try:
            return fn(self, *a, **kw)
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise DataFileError(f"{self.path} is a corrupt HDF5 data file ({type(e).__name__} in {fn.__name__}: "
                                f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


def _open_checked(path, expect_kind, structure=True):
    """(h5py.File, kind) of a debugkit data file after the format, `complete` and kind checks (and with `structure`
    check_structure); DataFileError naming the file otherwise."""
    try:
        f = _h5().File(path, "r")
    except (OSError, RuntimeError, ValueError):
        raise DataFileError(f"{path} is not a debugkit HDF5 data file (unreadable or corrupt)") from None
    try:
        fmt = _attr(f.attrs.get("format"))
        if fmt != FORMAT:
            raise DataFileError(f"{path} is an HDF5 file but not a debugkit data file (format {fmt!r}, "
                                f"expected {FORMAT!r})")
        if _attr(f.attrs.get("complete")) in (False, 0, "False"):
            raise DataFileError(f"{path} was written incompletely (the run that wrote it stopped before the "
                                f"end); write it again")
        kind = str(_attr(f.attrs.get("kind")))
        if kind not in ("inputs", "outputs"):
            raise DataFileError(f"{path}: attribute 'kind' is {kind!r}, expected 'inputs' or 'outputs'")
        if expect_kind and kind != expect_kind:
            raise DataFileError(f"{path} holds {kind}, not {expect_kind}")
        if structure:
            check_structure(f, path, kind)
    except DataFileError:
        f.close()
        raise
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        f.close()
        raise DataFileError(f"{path} is a corrupt HDF5 data file ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    return f, kind


def _validate(path, expect_kind):
    """Every check, and a first read of every object header and attribute (run in a child: `isolated`)."""
    f, _ = _open_checked(path, expect_kind)
    try:
        read_all_headers(f)
    finally:
        f.close()


class DataFile:
    """Reads a data file lazily; every bad file raises DataFileError/InputFileError naming the path."""

    def __init__(self, path: str, expect_kind: str | None = None):
        from native.files import check_side_file
        self.path = path
        check_side_file(path, "data file")
        isolated(_validate, path, path, expect_kind)   # first read in a child: HDF5 may hang or crash on it
        self.f, self.kind = _open_checked(path, expect_kind, structure=False)

    @property
    @_h5_read_boundary
    def attrs(self) -> dict:
        return {k: _attr(v) for k, v in self.f.attrs.items()}

    @_h5_read_boundary
    def runners(self) -> list[str]:
        if self.kind != "outputs":
            return []
        return [str(self.f[k].attrs.get("runner", _unescape(k))) for k in self.f.keys()]

    @_h5_read_boundary
    def runner_attrs(self, runner: str) -> dict:
        return {k: _attr(v) for k, v in self._runner_group(runner).attrs.items()}

    def _runner_group(self, runner):
        if runner is None:
            return self.f
        key = escape(runner)
        if key not in self.f:
            raise DataFileError(f"{self.path} has no results for runner '{runner}'; it has {self.runners()}")
        return self.f[key]

    @_h5_read_boundary
    def iterations(self, runner: str | None = None) -> list[int]:
        g = self._runner_group(runner if self.kind == "outputs" else None) if (runner or self.kind != "outputs") \
            else self._runner_group(self.runners()[0])
        its = [iteration_index(k) for k in g.keys()]
        return sorted(i for i in its if i is not None)

    def _iter_group(self, runner, iteration):
        g = self._runner_group(runner)
        key = f"iteration_{iteration}"
        if key not in g:
            raise DataFileError(f"{self.path} has no iteration {iteration}" + (f" for runner '{runner}'" if runner else ""))
        return g[key]

    @_h5_read_boundary
    def inputs_hash(self, iteration: int, runner: str | None = None):
        return _attr(self._iter_group(runner, iteration).attrs.get("inputs_hash"))

    @_h5_read_boundary
    def tensor_names(self, iteration: int, runner: str | None = None) -> list[str]:
        g = self._iter_group(runner, iteration)
        return [str(g[k].attrs.get("name", _unescape(k))) for k in g.keys()]

    def read(self, iteration: int, name: str, runner: str | None = None):
        g = self._iter_group(runner, iteration)
        key = escape(name)
        if key not in g:
            raise DataFileError(f"{self.path} has no tensor '{name}' in iteration {iteration}")
        try:
            ds = g[key]
            if not isinstance(ds, _h5().Dataset):
                raise DataFileError(f"{self.path}: tensor '{name}' of iteration {iteration} is not a dataset")
            kind = _attr(ds.attrs.get("kind"))
            if kind == "none":
                return None
            if kind == "sequence":
                return []
            if ds.dtype.kind == "O":
                raw = np.asarray(ds[()], dtype=object)   # a scalar dataset reads as one bytes object
                return np.array([x.decode() if isinstance(x, bytes) else x for x in raw.ravel()],
                                dtype=object).reshape(ds.shape)
            stored_as = _attr(ds.attrs.get("dtype"))   # ml_dtypes' types (int4, float8, bfloat16) stored as float32
            if stored_as:
                import ml_dtypes
                want = getattr(ml_dtypes, str(stored_as), None)
                if want is not None:
                    return np.asarray(ds[()]).astype(want)
            return np.asarray(ds[()])   # a 0-d dataset reads as a numpy scalar: keep it an array
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise DataFileError(f"{self.path}: tensor '{name}' of iteration {iteration} cannot be read "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None

    @_h5_read_boundary
    def read_iteration(self, iteration: int, runner: str | None = None) -> dict:
        return {n: self.read(iteration, n, runner) for n in self.tensor_names(iteration, runner)}

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _attr(v):
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return json.loads(v)
        except ValueError:
            pass
    return v


# Polygraphy's JSON data files ------------------------------------------------------------------------------------
# Facts of the format (Polygraphy 0.53): an outputs file is {"polygraphy_class": "RunResults", "lst": [[runner name,
# [iteration, ...]], ...]}, each iteration {"polygraphy_class": "IterationResult", "runner_name", "runtime",
# "outputs": {name: array}}; an inputs file is a JSON list with one {name: array} dict per iteration. An array is
# {"polygraphy_class": "ndarray", "array": base64 of the bytes numpy.save writes} (older files: latin-1 text, or an
# NPZ archive), possibly wrapped as {"polygraphy_class": "LazyArray", "values": array}.

def _decode_polygraphy(obj, path):
    if isinstance(obj, dict):
        cls = obj.get("polygraphy_class")
        if cls == "LazyArray":
            return _decode_polygraphy(obj.get("values"), path)
        if cls == "ndarray" or (cls is None and set(obj) == {"array"}):
            import base64
            import binascii
            import io
            text = obj.get("array")
            if not isinstance(text, str):
                raise DataFileError(f"{path}: an array entry has no 'array' text")
            try:
                data = base64.b64decode(text.encode(), validate=True)
            except (binascii.Error, ValueError):
                data = text.encode("latin-1")
            try:
                arr = np.load(io.BytesIO(data), allow_pickle=False)
            except Exception as e:
                raise DataFileError(f"{path}: an array entry is not a numpy array ({type(e).__name__}: {e})") from None
            if not isinstance(arr, np.ndarray):   # an NPZ archive (older Polygraphy): its first array
                names = list(arr.keys())
                if not names:
                    raise DataFileError(f"{path}: an array entry is an empty NPZ archive")
                arr = arr[names[0]]
            return arr
        if cls is not None and cls not in ("RunResults", "IterationResult"):
            raise DataFileError(f"{path}: holds a Polygraphy '{cls}' value, which debugkit cannot read (arrays "
                                f"must be numpy arrays, not e.g. torch tensors)")
        return {k: _decode_polygraphy(v, path) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_polygraphy(v, path) for v in obj]
    return obj


class PolygraphyJsonFile:
    """A Polygraphy JSON data file (RunResults from `--save-outputs`, feeds from `--save-inputs`) read through
    the same interface as DataFile. Polygraphy keeps no model or inputs hash, so those are None."""

    def __init__(self, path: str, expect_kind: str | None = None):
        from native.files import read_side_text
        self.path = path
        try:
            raw = json.loads(read_side_text(path, "JSON data file"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise DataFileError(f"{path} is neither a debugkit HDF5 data file nor a readable Polygraphy JSON file "
                                f"({type(e).__name__}: {str(e)[:120]})") from None
        if isinstance(raw, dict) and raw.get("polygraphy_class") == "RunResults":
            self.kind = "outputs"
            lst = raw.get("lst")
            if not isinstance(lst, list):
                raise DataFileError(f"{path}: a Polygraphy RunResults without its 'lst' of runners")
            self._runs = {}
            for item in lst:
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
                    raise DataFileError(f"{path}: RunResults entries must be [runner name, [iterations]]")
                its = []
                for r in _decode_polygraphy(item[1], path):
                    outs = r.get("outputs") if isinstance(r, dict) else None
                    if not isinstance(outs, dict):
                        raise DataFileError(f"{path}: an iteration of runner {item[0]} has no outputs")
                    its.append(outs)
                self._runs[str(item[0])] = its
        elif isinstance(raw, list) and all(isinstance(x, dict) for x in raw):
            self.kind = "inputs"
            self._runs = {None: _decode_polygraphy(raw, path)}
        else:
            raise DataFileError(f"{path} is JSON but neither Polygraphy RunResults (--save-outputs) nor a list of "
                                f"feed dicts (--save-inputs)")
        if expect_kind and self.kind != expect_kind:
            raise DataFileError(f"{path} holds {self.kind}, not {expect_kind}")

    @property
    def attrs(self) -> dict:
        return {"format": "polygraphy-json", "kind": self.kind}

    def runners(self) -> list[str]:
        return [r for r in self._runs if r is not None]

    def runner_attrs(self, runner: str) -> dict:
        its = self._iterations_of(runner)
        return {"runner": runner, "outputs": list(its[0]) if its else []}

    def _iterations_of(self, runner):
        key = runner if self.kind == "outputs" else None
        if key not in self._runs:
            raise DataFileError(f"{self.path} has no results for runner '{runner}'; it has {self.runners()}")
        return self._runs[key]

    def iterations(self, runner: str | None = None) -> list[int]:
        if self.kind == "outputs" and runner is None:
            runner = self.runners()[0]
        return list(range(len(self._iterations_of(runner))))

    def _iteration(self, runner, iteration):
        its = self._iterations_of(runner)
        if not 0 <= iteration < len(its):
            raise DataFileError(f"{self.path} has no iteration {iteration}" + (f" for runner '{runner}'" if runner else ""))
        return its[iteration]

    def inputs_hash(self, iteration: int, runner: str | None = None):
        self._iteration(runner, iteration)
        return None

    def tensor_names(self, iteration: int, runner: str | None = None) -> list[str]:
        return list(self._iteration(runner, iteration))

    def read(self, iteration: int, name: str, runner: str | None = None):
        it = self._iteration(runner, iteration)
        if name not in it:
            raise DataFileError(f"{self.path} has no tensor '{name}' in iteration {iteration}")
        return it[name]

    def read_iteration(self, iteration: int, runner: str | None = None) -> dict:
        return dict(self._iteration(runner, iteration))

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_data_file(path: str, expect_kind: str | None = None):
    """A debugkit HDF5 data file or a Polygraphy JSON one, told apart by content (not by extension)."""
    from native.files import check_side_file
    check_side_file(path, "data file")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise InputFileError(f"cannot read data file {path}: {e.strerror or e}") from None
    if head.lstrip()[:1] in (b"{", b"["):
        return PolygraphyJsonFile(path, expect_kind)
    return DataFile(path, expect_kind)
