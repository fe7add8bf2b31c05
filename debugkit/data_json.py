"""Polygraphy's JSON data files, written: `--save-outputs FILE.json` and `--save-inputs FILE.json`.

What `polygraphy run --load-outputs / --load-inputs` reads (Polygraphy 0.53's format; the reader is
`data_file.PolygraphyJsonFile`):
- outputs: {"lst": [[runner, [iteration, ...]], ...], "polygraphy_class": "RunResults"}, each iteration
  {"outputs": {name: lazy array}, "runtime": seconds or null, "runner_name": runner,
  "polygraphy_class": "IterationResult"}, a lazy array {"values": array, "polygraphy_class": "LazyArray"};
- inputs: a JSON list with one {name: array} per iteration;
- an array: {"array": base64 of the bytes numpy.save writes, "polygraphy_class": "ndarray"}.
JSON holds no provenance (model hash, inputs hash, config): our HDF5 files do, so they stay the default. A file is
written whole by commit() (the run succeeded), through the one output module: an interrupted run leaves the old
file (or none), never half a file.
"""
from __future__ import annotations

import base64
import io
import json
import os

import numpy as np

from native.errors import InputFileError
from native.logger import G_LOGGER


def is_json_path(path: str | None) -> bool:
    return bool(path) and str(path).lower().endswith(".json")


def encode_array(value) -> dict:
    """One array as Polygraphy encodes an np.ndarray (the .npy bytes, base64)."""
    v = np.asarray(value)
    if v.dtype.name == "bfloat16" or v.dtype.kind == "V":   # not a dtype numpy.load knows without ml_dtypes
        v = v.astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, v, allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}


def _storable(name, value, skipped) -> bool:
    if value is None or isinstance(value, list) or np.asarray(value).dtype == object:
        skipped.add(name)
        return False
    return True


class PolygraphyJsonWriter:
    """The DataWriter interface (write_inputs, write_many, write, set_runner_attrs, close) for Polygraphy's JSON."""

    def __init__(self, path: str, kind: str, provenance: dict | None = None):
        self.path, self.kind = path, kind
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise InputFileError(f"cannot write data file {path}: folder {folder} does not exist")
        self.inputs: list[dict] = []
        self.runs: dict[str, list[dict]] = {}
        self.runtimes: dict[str, float] = {}
        self.skipped: set = set()
        self.closed = False

    def write_inputs(self, iteration: int, feeds: dict):
        while len(self.inputs) <= iteration:
            self.inputs.append({})
        self.inputs[iteration].update({k: v for k, v in feeds.items() if _storable(k, v, self.skipped)})

    def write_many(self, runner: str, iteration: int, values: dict, ihash: str | None = None):
        its = self.runs.setdefault(runner, [])
        while len(its) <= iteration:
            its.append({})
        its[iteration].update({k: v for k, v in values.items() if _storable(k, v, self.skipped)})

    def write(self, runner: str, iteration: int, name: str, value, ihash: str | None = None):
        self.write_many(runner, iteration, {name: value}, ihash)

    def set_runner_attrs(self, runner: str, attrs: dict):
        if isinstance(attrs.get("runtime"), (int, float)):
            self.runtimes[runner] = float(attrs["runtime"])

    def document(self):
        if self.kind == "inputs":
            return [{k: encode_array(v) for k, v in feeds.items()} for feeds in self.inputs]
        lst = []
        for runner, its in self.runs.items():
            lst.append([runner, [{"outputs": {k: {"values": encode_array(v), "polygraphy_class": "LazyArray"}
                                              for k, v in outs.items()},
                                  "runtime": self.runtimes.get(runner), "runner_name": runner,
                                  "polygraphy_class": "IterationResult"} for outs in its]])
        return {"lst": lst, "polygraphy_class": "RunResults"}

    def commit(self):
        """Write the file whole (the run succeeded); until then the old file stays as it was."""
        if self.closed:
            return
        self.closed = True
        if self.skipped:
            G_LOGGER.warning(f"{self.path}: Polygraphy's JSON holds arrays only; left out {sorted(self.skipped)} "
                             f"(sequences, optional outputs or object arrays; an .h5 file keeps them)")
        write_text_atomically(self.path, json.dumps(self.document(), indent=1), "--save-outputs"
                              if self.kind == "outputs" else "--save-inputs")

    def close(self):
        """Without commit() (the run failed) nothing is written."""
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_text_atomically(path: str, text: str, what: str = "output") -> None:
    """Write `text` through the one output module (native.files: temporary file beside the target, fsync, rename;
    symlinks written through; never onto an input)."""
    from native.files import write_text
    write_text(path, text, what)


def data_writer(path: str, kind: str, provenance: dict | None = None):
    """The writer for `path`: Polygraphy's JSON for *.json, else our HDF5 (with provenance)."""
    if is_json_path(path):
        return PolygraphyJsonWriter(path, kind, provenance)
    from debugkit.data_file import DataWriter
    return DataWriter(path, kind, provenance)
