"""Every crash, hang or escaped exception the fuzzer ever found, kept as a case: each must now be refused with a
DebugkitError (or run), in a worker process so that a regression is a failure, not a dead test run.

Saved inputs live in tests/fuzz/cases/ (named <target>-s<seed>-<index>, as tools/fuzz.py --save writes them);
the tests below also rebuild the classes of defect by hand, so they document what was wrong."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from tests.fuzz.fuzzer import Worker

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")
FILES = sorted(f for f in os.listdir(CASES) if f.endswith((".onnx", ".plan", ".h5")))


@pytest.fixture(scope="module")
def workers():
    pool = {}

    def get(target):
        if target not in pool:
            pool[target] = Worker(target, memory_mb=4096, max_tensor_mb=16)
        return pool[target]
    yield get
    for w in pool.values():
        w.close()


@pytest.mark.parametrize("name", FILES)
def test_saved_case_is_refused_cleanly(workers, name):
    target = name.split("-s")[0]
    with open(os.path.join(CASES, name), "rb") as f:
        data = f.read()
    r = workers(target).run(data, hard_limit=60)
    assert r.outcome in ("ok", "rejected", "not-run"), f"{name}: {r.outcome} {r.detail}"
    assert r.cpu < 10, f"{name} took {r.cpu:.1f} s CPU"


def _model(nodes, inputs, inits=(), opset=18, outputs=("y",)):
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs],
                     initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def test_minus_one_dim_through_shape_and_slice_does_not_abort(workers):
    """A declared dim of -1 reached ONNX shape inference's Slice as a size: assertion, SIGABRT (case s0-1808)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Reshape", ["x", "s"], ["r"]),
             h.make_node("Slice", ["r", "st", "en", "ax"], ["y"], name="slice")]
    data = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 4, -1])],
                  [_i64("st", [1]), _i64("en", [3]), _i64("ax", [2])])
    outcome, detail, *_ = workers("onnx-structure").run(data, hard_limit=60)
    assert outcome in ("ok", "rejected"), detail


def test_invalid_utf8_names_are_a_parse_error(workers):
    """protobuf hands invalid UTF-8 strings over as bytes; they escaped as TypeError from the plan writer."""
    m = onnx.load_from_string(_model([h.make_node("Relu", ["x"], ["y"], name="relu")],
                                     [h.make_tensor_value_info("x", T.FLOAT, [2])]))
    data = m.SerializeToString().replace(b"relu", b"rel\x80")
    outcome, detail, *_ = workers("onnx-bytes").run(data, hard_limit=60)
    assert (outcome, detail) == ("rejected", "ParseError")


def test_float_reshape_shape_is_not_a_value_error(workers):
    """A NaN in a float shape constant reached int() in a fusion pass (case s0-10)."""
    nodes = [h.make_node("Concat", ["a", "b"], ["shape"], axis=0, name="cat"),
             h.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    inits = [numpy_helper.from_array(np.array([np.nan], np.float32), "b")]
    data = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 2]), h.make_tensor_value_info("a", T.FLOAT, [1])],
                  inits)
    outcome, detail, *_ = workers("onnx-structure").run(data, hard_limit=60)
    assert outcome == "rejected", detail


def test_conv_group_that_does_not_fit_is_a_parse_error():
    """group=7 on 4 output channels escaped as ValueError from the kernel's weight packing (case s0-1790)."""
    from backends.engine.build import parse_onnx
    from native.errors import ParseError
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w")
    data = _model([h.make_node("Conv", ["x", "w"], ["y"], name="conv2", kernel_shape=[3, 3], group=7)],
                  [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])], [w])
    with pytest.raises(ParseError, match=r"node 'conv2' \(Conv\): group 7 does not divide the 4 output channels"):
        parse_onnx(data)


def test_oversized_intermediate_is_refused_before_the_build():
    """A large but valid input made a case take 13 s (case s0-990): tensors over the limit are a ParseError."""
    from backends.engine.build import parse_onnx
    from backends.engine.onnx_parser.validate import Limits, set_limits
    from native.errors import ParseError
    data = _model([h.make_node("Tile", ["x", "reps"], ["y"], name="tile")],
                  [h.make_tensor_value_info("x", T.FLOAT, [64, 64])], [_i64("reps", [64, 64])])
    old = set_limits(Limits(max_bytes=16 << 20, max_elements=16 << 20))
    try:
        with pytest.raises(ParseError, match=r"node 'tile' \(Tile\): output 'y' of shape \[4096, 4096\]"):
            parse_onnx(data)
    finally:
        set_limits(old)


@pytest.mark.parametrize("name", [f for f in FILES if f.startswith("plan-bytes")] + ["onnx-bytes-s21-1012884.onnx"])
def test_sizes_from_mutated_weights_are_refused_before_allocating(name):
    """Plans whose weight bytes were mutated behind valid checksums: a Pad width, a Tile repeat count or a TopK k
    read from the blob asked for gigabytes (up to 35 s and 13 GB per case without a memory limit). The kernels now
    refuse them against the tensor size limit, naming the layer (16 MiB in the fuzz worker)."""
    with open(os.path.join(CASES, name), "rb") as f:
        data = f.read()
    w = Worker(name.split("-s")[0], memory_mb=4096, max_tensor_mb=16, messages=True)
    try:
        r = w.run(data, hard_limit=60)
    finally:
        w.close()
    assert r.outcome == "rejected", r
    assert r.detail.startswith("ExecutionError: ") and r.cpu < 5, r
    assert "exceeds the tensor size limit of 0.0156 GiB" in r.detail or "TopK 'topk': k=268435459" in r.detail, r


def test_a_deconvolution_output_shape_over_the_limit_is_a_plan_error():
    """A plan's own params can ask for a huge output too: a Deconvolution's output_shape (the geometry check does
    not apply to it) is held against the tensor size limit when the header is checked."""
    import copy

    from backends.engine import Runtime
    from backends.engine.plan import pack_plan
    from native.errors import PlanError
    from native.limits import Limits, set_limits
    from tests.fuzz.fuzzer import CaseMaker
    plan, header, blob = next(p for p in CaseMaker("plan-structure").plans
                              if any(n["kind"] == "Deconvolution" for n in p[1]["graph"]["nodes"]))
    i = next(i for i, n in enumerate(header["graph"]["nodes"]) if n["kind"] == "Deconvolution")
    old = set_limits(Limits(max_bytes=16 << 20, max_elements=16 << 20))
    try:
        for shape, ok in (([16, 16], True), ([8192, 8192], False)):
            h = copy.deepcopy(header)
            h["graph"]["nodes"][i]["params"]["output_shape"] = shape
            if ok:
                Runtime().deserialize_engine(pack_plan(h, blob))
                continue
            with pytest.raises(PlanError, match=rf"graph.nodes\[{i}\].params.output_shape: \[8192, 8192\] exceeds"):
                Runtime().deserialize_engine(pack_plan(h, blob))
    finally:
        set_limits(old)
