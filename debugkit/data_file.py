"""HDF5 data files for inputs, outputs and per-layer tensors, with provenance.

Layout (format "debugkit-data/1"):
    /                         attrs: format, kind ("inputs" | "outputs"), versions (JSON), command, model_path, model_sha256
    /iteration_<i>/<tensor>   inputs files: one dataset per input; group attrs: inputs_hash
    /<runner>/                outputs files: attrs runner, build_config (JSON), model_sha256, layerwise
    /<runner>/iteration_<i>/<tensor>   one dataset per output or intermediate tensor; group attrs: inputs_hash
Tensor names are stored escaped ("/" → "%2F") with the real name in the dataset's `name` attribute.
Writers flush after every iteration, so nothing is held in memory across iterations.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform

import numpy as np

from native.errors import DataFileError, InputFileError

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


class DataWriter:
    """Writes one HDF5 data file incrementally. `kind` is "inputs" or "outputs"."""

    def __init__(self, path: str, kind: str, provenance: dict | None = None):
        self.path, self.kind = path, kind
        try:
            self.f = _h5().File(path, "w")
        except OSError as e:
            raise InputFileError(f"cannot write data file {path}: {e}") from None
        self.f.attrs["format"] = FORMAT
        self.f.attrs["kind"] = kind
        self.f.attrs["versions"] = json.dumps(package_versions())
        for k, v in (provenance or {}).items():
            self.f.attrs[k] = v if isinstance(v, str) else json.dumps(v)

    def _group(self, runner, iteration, ihash=None):
        base = self.f if runner is None else self.f.require_group(escape(runner))
        if runner is not None:
            base.attrs["runner"] = runner
        g = base.require_group(f"iteration_{iteration}")
        if ihash is not None:
            g.attrs["inputs_hash"] = ihash
        return g

    def set_runner_attrs(self, runner: str, attrs: dict):
        g = self.f.require_group(escape(runner))
        g.attrs["runner"] = runner
        for k, v in attrs.items():
            g.attrs[k] = v if isinstance(v, str) else json.dumps(v)

    def write_inputs(self, iteration: int, feeds: dict):
        g = self._group(None, iteration, inputs_hash(feeds))
        for name, v in feeds.items():
            self._dataset(g, name, v)
        self.f.flush()

    def write(self, runner: str, iteration: int, name: str, value, ihash: str | None = None):
        self._dataset(self._group(runner, iteration, ihash), name, value)

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
            elif v.dtype.kind == "V" or v.dtype.name == "bfloat16":
                ds = group.create_dataset(key, data=v.astype(np.float32))
                ds.attrs["dtype"] = v.dtype.name
            else:
                ds = group.create_dataset(key, data=v)
        ds.attrs["name"] = name

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DataFile:
    """Reads a data file lazily; every bad file raises DataFileError/InputFileError naming the path."""

    def __init__(self, path: str, expect_kind: str | None = None):
        self.path = path
        if not os.path.exists(path):
            raise InputFileError(f"data file not found: {path}")
        h5py = _h5()
        try:
            self.f = h5py.File(path, "r")
        except OSError:
            raise DataFileError(f"{path} is not a debugkit HDF5 data file (unreadable or corrupt)") from None
        fmt = self.f.attrs.get("format")
        if fmt != FORMAT:
            self.f.close()
            raise DataFileError(f"{path} is an HDF5 file but not a debugkit data file (format {fmt!r}, "
                                f"expected {FORMAT!r})")
        self.kind = str(self.f.attrs.get("kind"))
        if expect_kind and self.kind != expect_kind:
            self.f.close()
            raise DataFileError(f"{path} holds {self.kind}, not {expect_kind}")

    @property
    def attrs(self) -> dict:
        return {k: _attr(v) for k, v in self.f.attrs.items()}

    def runners(self) -> list[str]:
        if self.kind != "outputs":
            return []
        return [str(self.f[k].attrs.get("runner", _unescape(k))) for k in self.f.keys()]

    def runner_attrs(self, runner: str) -> dict:
        return {k: _attr(v) for k, v in self._runner_group(runner).attrs.items()}

    def _runner_group(self, runner):
        if runner is None:
            return self.f
        key = escape(runner)
        if key not in self.f:
            raise DataFileError(f"{self.path} has no results for runner '{runner}'; it has {self.runners()}")
        return self.f[key]

    def iterations(self, runner: str | None = None) -> list[int]:
        g = self._runner_group(runner if self.kind == "outputs" else None) if (runner or self.kind != "outputs") \
            else self._runner_group(self.runners()[0])
        its = [int(k.split("_", 1)[1]) for k in g.keys() if k.startswith("iteration_")]
        return sorted(its)

    def _iter_group(self, runner, iteration):
        g = self._runner_group(runner)
        key = f"iteration_{iteration}"
        if key not in g:
            raise DataFileError(f"{self.path} has no iteration {iteration}" + (f" for runner '{runner}'" if runner else ""))
        return g[key]

    def inputs_hash(self, iteration: int, runner: str | None = None):
        return _attr(self._iter_group(runner, iteration).attrs.get("inputs_hash"))

    def tensor_names(self, iteration: int, runner: str | None = None) -> list[str]:
        g = self._iter_group(runner, iteration)
        return [str(g[k].attrs.get("name", _unescape(k))) for k in g.keys()]

    def read(self, iteration: int, name: str, runner: str | None = None):
        g = self._iter_group(runner, iteration)
        key = escape(name)
        if key not in g:
            raise DataFileError(f"{self.path} has no tensor '{name}' in iteration {iteration}")
        ds = g[key]
        kind = ds.attrs.get("kind")
        if kind == "none":
            return None
        if kind == "sequence":
            return []
        if ds.dtype.kind == "O":
            return np.array([x.decode() if isinstance(x, bytes) else x for x in ds[()].ravel()],
                            dtype=object).reshape(ds.shape)
        return ds[()]

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
        self.path = path
        try:
            with open(path) as f:
                raw = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError) as e:
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
    if not os.path.exists(path):
        raise InputFileError(f"data file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(8)
    if head.lstrip()[:1] in (b"{", b"["):
        return PolygraphyJsonFile(path, expect_kind)
    return DataFile(path, expect_kind)
