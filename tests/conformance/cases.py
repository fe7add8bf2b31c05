"""The ONNX backend node test cases of the installed onnx release, loaded as (model, inputs, outputs).

Releases up to 1.21 ship the cases' files in the wheel (onnx/backend/test/data/node). Newer wheels ship only the
case definitions (onnx/backend/test/case/node); their files are generated once from those definitions into a
cache folder ($DEBUGKIT_ONNX_CASES, default ~/.cache/debugkit/onnx-<version>-node), the same files onnx's own
`backend-test-tools generate-data` writes. Expected failures: expected_failures.txt for every release, plus
expected_failures-<release>.txt for the cases of one release (the newest listed release not newer than the installed
one)."""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


DATA_DIR = None    # run_conformance.py --data DIR: the cases from another onnx installation


def _shipped_dir():
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def data_dir():
    if DATA_DIR:
        return DATA_DIR
    shipped = _shipped_dir()
    if glob.glob(os.path.join(shipped, "test_*")):
        return shipped
    return generated_dir()


def generated_dir():
    """The installed release's node cases, written from its case definitions on first use."""
    root = os.environ.get("DEBUGKIT_ONNX_CASES") or os.path.join(os.path.expanduser("~"), ".cache", "debugkit")
    out = os.path.join(root, f"onnx-{onnx.__version__}-node")
    if not os.path.exists(os.path.join(out, ".complete")):
        _generate(out)
    return out


def _write_value(path, value, type_proto, name):
    which = type_proto.WhichOneof("value")
    if isinstance(value, onnx.TensorProto):
        proto = value
    elif which == "sequence_type":
        proto = numpy_helper.from_list(value, name)
    elif which == "optional_type":
        proto = numpy_helper.from_optional(value, name)
    elif which == "map_type":
        proto = numpy_helper.from_dict(value, name)
    else:
        proto = numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def _generate(out):
    import shutil
    import tempfile

    from onnx.backend.test.case import node as node_cases
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out) + ".", dir=os.path.dirname(out))
    try:
        for case in node_cases.collect_testcases():
            d = os.path.join(tmp, case.name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "model.onnx"), "wb") as f:
                f.write(case.model.SerializeToString())
            graph = case.model.graph
            for i, (inputs, outputs) in enumerate(case.data_sets):
                ds = os.path.join(d, f"test_data_set_{i}")
                os.makedirs(ds, exist_ok=True)
                for j, v in enumerate(inputs):
                    _write_value(os.path.join(ds, f"input_{j}.pb"), v, graph.input[j].type, graph.input[j].name)
                for j, v in enumerate(outputs):
                    _write_value(os.path.join(ds, f"output_{j}.pb"), v, graph.output[j].type, graph.output[j].name)
        open(os.path.join(tmp, ".complete"), "w").close()
        try:
            os.replace(tmp, out)   # atomic: a suite running beside this one sees all of the cases or none
        except OSError:
            if not os.path.exists(os.path.join(out, ".complete")):
                raise
            shutil.rmtree(tmp)     # another process finished first (a folder is not replaced when not empty)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def _version_key(v: str):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", v)[:3])


def release_failures_file(version: str | None = None):
    """expected_failures-<release>.txt for the installed onnx: that release's, else one of the same minor release
    (1.23.1 takes 1.23.2's: patch releases share their cases), else the newest listed older one (the oldest listed
    when it predates them all); None when there is none."""
    version = version or onnx.__version__
    listed = sorted(((_version_key(m.group(1)), p) for p in glob.glob(os.path.join(HERE, "expected_failures-*.txt"))
                     if (m := re.search(r"expected_failures-(.+)\.txt$", p))), key=lambda kv: kv[0])
    if not listed:
        return None
    key = _version_key(version)
    same = [p for k, p in listed if k == key] or [p for k, p in listed if k[:2] == key[:2]]
    if same:
        return same[-1]
    older = [p for k, p in listed if k <= key]
    return older[-1] if older else listed[0][1]


def expected_failures(version: str | None = None) -> dict:
    """name pattern (regex) -> reason, from expected_failures.txt and the installed release's file
    (`pattern  # reason`)."""
    out = {}
    for path in (os.path.join(HERE, "expected_failures.txt"), release_failures_file(version)):
        if not path or not os.path.exists(path):
            continue
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
