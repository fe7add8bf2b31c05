"""The ONNX backend node test cases shipped in the installed onnx wheel, loaded as (model, inputs, outputs)."""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


DATA_DIR = None    # run_conformance.py --data DIR: the cases from another onnx installation


def data_dir():
    return DATA_DIR or os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def case_names():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(data_dir(), "test_*")))


def _load_value(path, type_proto):
    which = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    data = open(path, "rb").read()
    if which == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if which == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def load_case(name):
    d = os.path.join(data_dir(), name)
    model = onnx.load(os.path.join(d, "model.onnx"))
    init = {i.name for i in model.graph.initializer}
    ins = [vi for vi in model.graph.input if vi.name not in init]
    outs = list(model.graph.output)
    sets = []
    for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*"))):
        inputs = [_load_value(os.path.join(ds, f"input_{i}.pb"), ins[i].type if i < len(ins) else None)
                  for i in range(len(glob.glob(os.path.join(ds, "input_*.pb"))))]
        outputs = [_load_value(os.path.join(ds, f"output_{i}.pb"), outs[i].type if i < len(outs) else None)
                   for i in range(len(glob.glob(os.path.join(ds, "output_*.pb"))))]
        sets.append((inputs, outputs))
    return model, sets


def op_of(name):
    """The op a case tests, from its model's first non-Constant node type."""
    try:
        model = onnx.load(os.path.join(data_dir(), name, "model.onnx"), load_external_data=False)
        types = [n.op_type for n in model.graph.node]
        return types[-1] if len(set(types)) > 1 and types[0] == "Constant" else (types[0] if types else "?")
    except Exception:
        return "?"


def expected_failures() -> dict:
    """name pattern (regex) -> reason, from expected_failures.txt (`pattern  # reason`)."""
    out = {}
    path = os.path.join(HERE, "expected_failures.txt")
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pat, _, reason = line.partition("#")
            out[pat.strip()] = reason.strip() or "no reason given"
    return out


def expected_failure_reason(name, table=None):
    table = expected_failures() if table is None else table
    for pat, reason in table.items():
        if re.fullmatch(pat, name):
            return reason
    return None


def assert_close(expected, actual, rtol=1e-3, atol=1e-7, path="output"):
    if isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: expected a sequence, got {type(actual).__name__}"
        assert len(expected) == len(actual), f"{path}: sequence length {len(actual)} != {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_close(e, a, rtol, atol, f"{path}[{i}]")
        return
    if expected is None:
        assert actual is None, f"{path}: expected an empty optional, got {type(actual).__name__}"
        return
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert expected.shape == actual.shape, f"{path}: shape {actual.shape} != expected {expected.shape}"
    if expected.dtype.kind in "OUS":
        assert expected.tolist() == actual.tolist(), f"{path}: strings differ"
        return
    assert expected.dtype == actual.dtype, f"{path}: dtype {actual.dtype} != expected {expected.dtype}"
    if expected.dtype.kind in "fc" or expected.dtype.name in ("bfloat16",) or "float8" in expected.dtype.name:
        e = expected.astype(np.float64)
        a = actual.astype(np.float64)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=path)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=path)


def run_case(name, backend=None, device="CPU"):
    """Run one case through our Backend on `device` ("CPU" or "CUDA"); raises AssertionError on mismatch."""
    if backend is None:
        from backends.engine.onnx_backend import Backend as backend
    model, sets = load_case(name)
    rep = backend.prepare(model, device)
    for inputs, outputs in sets:
        got = rep.run(inputs)
        assert len(got) == len(outputs), f"{len(got)} outputs, expected {len(outputs)}"
        for i, (e, a) in enumerate(zip(outputs, got)):
            assert_close(e, a, path=f"output {i}")
