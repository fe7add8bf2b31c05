"""The `hdf5-structure` fuzz target: mutated debugkit data files fed to `run --load-inputs` / `--load-outputs`.

A case is the bytes of an HDF5 file, made from seed inputs/outputs files of a small model by structural mutations
(h5py: dtypes, shapes, huge declared shapes, strings, attributes, links, external links, virtual datasets,
external raw storage, extra or missing groups) and, sometimes, byte flips of the result. The first byte of a case
says which option reads it ("i" inputs, "o" outputs). A case is run through the CLI in-process: exit 0/1 is 'ok',
2 'rejected' (the one-line message's class is the detail), 3 (internal error) is a 'bug'.
"""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import random
import shutil
import tempfile

import numpy as np

_DIR = None
ROOT_ENV = "DEBUGKIT_FUZZ_TMP"   #: the campaign's temporary folder (fuzzer.fuzz sets it; workers inherit it)


def _workdir():
    """This process's scratch folder: under the campaign's folder where one is set (the campaign removes it, so a
    worker killed for a crash or hang leaves nothing behind), else the system's; removed at exit either way."""
    global _DIR
    if _DIR is None or not os.path.isdir(_DIR):
        _DIR = tempfile.mkdtemp(prefix="debugkit-fuzz-h5-", dir=os.environ.get(ROOT_ENV) or None)
        atexit.register(shutil.rmtree, _DIR, True)
    return _DIR


def model_path():
    """The seed model (x[N,4] -> ... -> y), written once per process."""
    path = os.path.join(_workdir(), "chain.onnx")
    if not os.path.exists(path):
        import onnx
        from onnx import TensorProto as T
        from onnx import helper as h
        from onnx import numpy_helper
        rng = np.random.default_rng(0)
        nodes = [h.make_node("MatMul", ["x", "w"], ["t_mm"], name="mm"),
                 h.make_node("Relu", ["t_mm"], ["y"], name="relu")]
        g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])],
                         [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, path)
    return path


def _seed_file(kind, rng) -> str:
    from debugkit.data_file import DataWriter
    path = os.path.join(_workdir(), f"seed-{kind}.h5")
    n = rng.choice([1, 2, 3])
    x = np.random.default_rng(rng.randrange(1 << 30)).standard_normal((n, 4)).astype(np.float32)
    with DataWriter(path, kind, {"command": "seed", "model_sha256": "0" * 64}) as w:
        if kind == "inputs":
            w.write_inputs(0, {"x": x})
            if rng.random() < 0.3:
                w.write_inputs(1, {"x": x * 2})
        else:
            w.write_many("onnxrt-runner", 0, {"y": np.maximum(x, 0), "t_mm": x})
            w.set_runner_attrs("onnxrt-runner", {"model_sha256": "0" * 64})
    return path


_DTYPES = ["float16", "float64", "int8", "int32", "int64", "uint8", "bool", "complex64", "S4", "U3", "object",
           "compound", "float32"]


def _array(dtype, shape, rng):
    import h5py
    if dtype == "compound":
        return np.zeros(shape, dtype=[("a", "f4"), ("b", "i4")])
    if dtype == "object":
        return np.array(["x"] * int(np.prod(shape)), dtype=h5py.string_dtype()).reshape(shape)
    if dtype == "U3":
        return np.zeros(shape, "S3")
    return np.ones(shape, np.dtype(dtype))


def _datasets(f):
    out = []
    f.visititems(lambda name, obj: out.append(name) if hasattr(obj, "dtype") else None)
    return out


def _groups(f):
    out = ["/"]
    f.visititems(lambda name, obj: out.append(name) if not hasattr(obj, "dtype") else None)
    return out


def _mutate(f, rng):
    import h5py
    ds = _datasets(f)
    groups = _groups(f)
    op = rng.randrange(14)
    if op == 0 and ds:                         # another dtype or shape
        name = rng.choice(ds)
        attrs = dict(f[name].attrs)
        del f[name]
        shape = rng.choice([(), (0,), (1, 4), (2, 4), (4,), (1, 5), (3, 0, 2), (1,) * 9])
        new = f.create_dataset(name, data=_array(rng.choice(_DTYPES), shape, rng))
        for k, v in attrs.items():
            new.attrs[k] = v
    elif op == 1 and ds:                       # a huge declared shape (chunked: nothing is stored)
        name = rng.choice(ds)
        del f[name]
        f.create_dataset(name, shape=(rng.choice([1 << 20, 1 << 31, 1 << 40]), 4), dtype="f4", chunks=(1, 4))
    elif op == 2:                              # an external link to some file
        target = rng.choice(["/etc/hostname", os.path.join(_workdir(), "seed-inputs.h5"), "missing.h5"])
        f[rng.choice(groups).rstrip("/") + "/ext"] = h5py.ExternalLink(target, "/")
    elif op == 3 and ds:                       # a soft link, possibly dangling or cyclic
        f[rng.choice(groups).rstrip("/") + "/soft"] = h5py.SoftLink(rng.choice(["/" + rng.choice(ds), "/nope",
                                                                               "/soft"]))
    elif op == 4 and ds:                       # a virtual dataset over another file
        layout = h5py.VirtualLayout(shape=(1, 4), dtype="f4")
        layout[0] = h5py.VirtualSource(os.path.join(_workdir(), "seed-inputs.h5"), "iteration_0/x", shape=(1, 4))[0]
        name = rng.choice(ds)
        del f[name]
        f.create_virtual_dataset(name, layout, fillvalue=0)
    elif op == 5 and ds:                       # external raw storage
        name = rng.choice(ds)
        del f[name]
        f.create_dataset(name, shape=(1, 4), dtype="f4", external=[("/dev/zero", 0, 16)])
    elif op == 6:                              # file attributes: format, kind, complete
        key = rng.choice(["format", "kind", "complete", "versions", "model_sha256", "loaded_outputs"])
        value = rng.choice(["", "outputs", "inputs", "debugkit-data/1", "debugkit-data/2", 0, 1, -1, 1e300,
                            np.arange(3), "{", "[1, 2", True, False, b"\xff\xfe"])
        if rng.random() < 0.2 and key in f.attrs:
            del f.attrs[key]
        else:
            f.attrs[key] = value
    elif op == 7 and ds:                       # dataset attributes: name, kind, dtype
        obj = f[rng.choice(ds)]
        key = rng.choice(["name", "kind", "dtype"])
        obj.attrs[key] = rng.choice(["", "x", "y", "none", "sequence", "bfloat16", "float8", "nonsense", 3,
                                     np.zeros(2), "../x", "%2F"])
    elif op == 8:                              # a group where a dataset is expected, or an odd iteration name
        g = f[rng.choice(groups)]
        name = rng.choice(["iteration_-1", "iteration_x", "iteration_99999999999999999999", "iteration_", "x",
                           "onnxrt-runner", "y"])
        if name not in g:
            g.create_group(name) if rng.random() < 0.5 else g.create_dataset(name, data=np.zeros(2, "f4"))
    elif op == 9 and len(groups) > 1:          # delete a group
        del f[rng.choice(groups[1:])]
    elif op == 10 and ds:                      # a scalar or empty dataset
        name = rng.choice(ds)
        attrs = dict(f[name].attrs)
        del f[name]
        new = f.create_dataset(name, data=rng.choice([np.float32(1), np.zeros((0, 4), "f4"),
                                                      np.full((1, 4), np.nan, "f4")]))
        for k, v in attrs.items():
            new.attrs[k] = v
    elif op == 11:                             # group attributes: runner, inputs_hash
        g = f[rng.choice(groups)]
        g.attrs[rng.choice(["runner", "inputs_hash", "build_config"])] = rng.choice(["", "x" * 300, 5, "{}"])
    elif op == 12 and ds:                      # a named datatype or a reference
        f["named"] = np.dtype("f4")
        f.attrs["ref"] = f[rng.choice(ds)].ref
    elif op == 13 and ds:                      # a hard link loop / second name
        g = f[rng.choice(groups)]
        if "loop" not in g:
            g["loop"] = f["/"]


def make_case(rng: random.Random) -> bytes:
    import h5py
    kind = rng.choice(["inputs", "outputs"])
    seed = _seed_file(kind, rng)
    path = os.path.join(_workdir(), "case.h5")
    with open(seed, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    with h5py.File(path, "r+") as f:
        for _ in range(rng.choice([1, 1, 2, 3, 5])):
            try:
                _mutate(f, rng)
            except (ValueError, KeyError, TypeError, OSError, RuntimeError):
                pass   # a mutation h5py itself refuses: try the next
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    if rng.random() < 0.25 and data:           # byte flips of the structure
        for _ in range(rng.choice([1, 4, 16])):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
    return (b"i" if kind == "inputs" else b"o") + bytes(data)


def run_case(data: bytes, messages=False):
    """('ok'|'rejected'|'bug', detail) of `debugkit run chain.onnx --onnxrt --load-inputs|--load-outputs CASE`."""
    from debugkit.cli.main import main
    path = os.path.join(_workdir(), "input.h5")
    with open(path, "wb") as f:
        f.write(data[1:])
    flag = "--load-inputs" if data[:1] == b"i" else "--load-outputs"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["run", model_path(), "--onnxrt", flag, path, "-q"])
    text = err.getvalue().strip().splitlines()
    last = text[-1] if text else ""
    if rc in (0, 1):
        return "ok", ""
    if rc == 2:
        return "rejected", last[:200] if messages else _message_class(last)
    return "bug", last[:300]


def _message_class(line: str) -> str:
    """A rejection's kind for the report's counts: the message with names and numbers taken out."""
    import re
    text = line.split("error: ", 1)[-1]
    text = re.sub(r"\S*input\.h5\S*", "FILE", text)
    text = re.sub(r"'[^']*'|\d+", "_", text)
    return text[:60]
