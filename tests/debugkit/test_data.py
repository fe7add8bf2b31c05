import numpy as np
import pytest

from backends.runners.base import TensorMeta
from debugkit.data_file import DataFile, DataWriter, escape, inputs_hash, unescape
from debugkit.data_loader import DataLoader, ScriptDataLoader, coerce_feeds
from native.errors import DataFileError, FeedError, InputFileError, ShapeError, UsageError


def meta(**kw):
    return {k: TensorMeta(k, np.dtype(d), s) for k, (d, s) in kw.items()}


def test_loader_is_seeded_and_respects_ranges_and_types():
    m = meta(x=("float32", ("N", 3)), ids=("int64", (2, 5)), flag=("bool", (4,)))
    dl = DataLoader(seed=3, iterations=2, val_ranges={"x": (-2, -1), "ids": (5, 7)}, shapes={"x": (2, 3)})
    dl.input_metadata = m
    a, b = list(dl)
    assert a["x"].shape == (2, 3) and a["x"].dtype == np.float32
    assert a["x"].min() >= -2 and a["x"].max() <= -1
    assert a["ids"].dtype == np.int64 and set(np.unique(a["ids"])) <= {5, 6, 7}
    assert a["flag"].dtype == bool
    assert not np.array_equal(a["x"], b["x"])                  # iterations differ
    dl2 = DataLoader(seed=3, iterations=2, val_ranges={"x": (-2, -1), "ids": (5, 7)}, shapes={"x": (2, 3)})
    dl2.input_metadata = m
    assert np.array_equal(next(iter(dl2))["x"], a["x"])         # same seed, same data
    assert inputs_hash(next(iter(dl2))) == inputs_hash(a)


def test_loader_rejects_bad_names_and_shapes():
    m = meta(x=("float32", (1, 3)))
    dl = DataLoader(shapes={"nope": (1, 3)})
    with pytest.raises(UsageError, match="unknown input"):
        dl.check_names(m)
    with pytest.raises(ShapeError, match="fixes it at 3"):
        DataLoader(shapes={"x": (1, 4)}).shape_for(m["x"])
    with pytest.raises(FeedError, match="unknown input"):
        coerce_feeds({"y": np.zeros((1, 3), np.float32)}, m)
    with pytest.raises(ShapeError, match="does not fit"):
        coerce_feeds({"x": np.zeros((2, 3), np.float32)}, m)
    assert coerce_feeds({"x": np.zeros((1, 3))}, m)["x"].dtype == np.float32


def test_script_loader(tmp_path):
    script = tmp_path / "dl.py"
    script.write_text("import numpy as np\ndef gen():\n    for i in range(3):\n        yield {'x': np.full((1, 3), i)}\n")
    feeds = list(ScriptDataLoader(f"{script}:gen"))
    assert [int(f["x"][0, 0]) for f in feeds] == [0, 1, 2]
    with pytest.raises(UsageError, match="no function"):
        ScriptDataLoader(f"{script}:missing")


def test_hdf5_round_trip_with_provenance(tmp_path):
    path = str(tmp_path / "out.h5")
    vals = {"/a/b/Conv_output_0": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.array([1, 2], np.int64),
            ".odd%name": np.array([True, False])}
    with DataWriter(path, "outputs", {"model_sha256": "abc", "model_path": "m.onnx"}) as w:
        w.write_many("engine-runner", 0, vals, "h0")
        w.write_many("engine-runner", 1, vals, "h1")
        w.set_runner_attrs("engine-runner", {"build_config": {"flags": ["tf32"]}})
    with DataFile(path, expect_kind="outputs") as f:
        assert f.attrs["model_sha256"] == "abc" and "numpy" in f.attrs["versions"]
        assert f.runners() == ["engine-runner"]
        assert f.iterations("engine-runner") == [0, 1]
        assert f.inputs_hash(1, "engine-runner") == "h1"
        assert f.runner_attrs("engine-runner")["build_config"] == {"flags": ["tf32"]}
        back = f.read_iteration(0, "engine-runner")
        assert set(back) == set(vals)
        for k in vals:
            assert np.array_equal(back[k], vals[k]) and back[k].dtype == vals[k].dtype
    for n in ["a/b", "%2F", ".x", ""]:
        assert unescape(escape(n)) == n


def test_bad_data_files(tmp_path):
    with pytest.raises(InputFileError):
        DataFile(str(tmp_path / "missing.h5"))
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5 at all")
    with pytest.raises(DataFileError, match="not a debugkit HDF5"):
        DataFile(str(junk))
    p = str(tmp_path / "in.h5")
    with DataWriter(p, "inputs") as w:
        w.write_inputs(0, {"x": np.zeros(2)})
    with pytest.raises(DataFileError, match="holds inputs, not outputs"):
        DataFile(p, expect_kind="outputs")
