"""Untrusted ONNX: the validator names node, attribute and value of everything that would crash or exhaust the
process downstream (ONNX shape inference, importers, passes, kernels), before any of them sees the model."""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from backends.engine.build import parse_onnx
from backends.engine.onnx_parser.parser import load_onnx
from backends.engine.onnx_parser.validate import Limits, check_model, validate_model
from native.errors import ParseError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(nodes, inputs, outputs=("y",), inits=(), opset=17):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                     [h.make_tensor_value_info(n, T.FLOAT, None) for n in outputs], initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def maxpool_zero_stride():
    return _model([h.make_node("MaxPool", ["x"], ["y"], name="pool1", kernel_shape=[2, 2], strides=[2, 0])],
                  [("x", [1, 1, 4, 4])])


def _only(model, **kw):
    problems = validate_model(model, **kw)
    assert problems, "validator accepted a bad model"
    return str(problems[0])


def test_maxpool_zero_stride_exits_2_naming_node_and_attribute(tmp_path):
    """Today's SIGFPE inside ONNX shape inference: a child process, so a regression is a failure, not a crash."""
    path = tmp_path / "bad.onnx"
    onnx.save(maxpool_zero_stride(), path)
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-m", "debugkit", "run", str(path), "--engine", "--onnxrt"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "node 'pool1' (MaxPool): attribute 'strides' = [2, 0]: values must be positive" in p.stderr
    assert "Traceback" not in p.stderr


def test_parser_reports_instead_of_running_shape_inference():
    with pytest.raises(ParseError, match=r"node 'pool1' \(MaxPool\): attribute 'strides' = \[2, 0\]"):
        parse_onnx(maxpool_zero_stride())


@pytest.mark.parametrize("attrs,needle", [
    (dict(kernel_shape=[3, 3], dilations=[1, 0]), "attribute 'dilations' = [1, 0]: values must be positive"),
    (dict(kernel_shape=[3, -3]), "attribute 'kernel_shape' = [3, -3]: values must be positive"),
    (dict(kernel_shape=[3, 3], pads=[1, -1, 1, 1]), "attribute 'pads' = [1, -1, 1, 1]: values must be >= 0"),
    (dict(kernel_shape=[3, 3], pads=[1, 1]), "attribute 'pads' = [1, 1]: needs 4 values"),
    (dict(kernel_shape=[3, 3], strides=[1, 1, 1]), "attribute 'strides' = [1, 1, 1]: needs 2 values"),
    (dict(kernel_shape=[3, 3], group=0), "attribute 'group' = 0: must be >= 1"),
    (dict(kernel_shape=[3, 3], strides=[2 ** 40, 1]), "attribute 'strides' = [1099511627776, 1]: values of magnitude"),
])
def test_conv_attribute_constraints(attrs, needle):
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    m = _model([h.make_node("Conv", ["x", "w"], ["y"], name="conv7", **attrs)], [("x", [1, 1, 8, 8])], inits=[w])
    msg = _only(m)
    assert msg.startswith("node 'conv7' (Conv):") and needle in msg, msg


def test_attribute_of_the_wrong_type():
    n = h.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2, 2])
    n.attribute.append(h.make_attribute("strides", [1.5, 2.0]))
    msg = _only(_model([n], [("x", [1, 1, 4, 4])]))
    assert "attribute 'strides' = [1.5, 2.0]: must be of type INTS, got FLOATS" in msg


def test_axis_out_of_range_where_the_rank_is_known():
    m = _model([h.make_node("Softmax", ["x"], ["y"], name="sm", axis=5)], [("x", [2, 3])])
    assert "node 'sm' (Softmax): attribute 'axis' = 5: axis 5 is out of range for an input of rank 2" in _only(m)
    m = _model([h.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 0])], [("x", [2, 3])])
    assert "attribute 'perm' = [0, 0]: is not a permutation" in _only(m)


def test_initializer_data_must_match_its_dims():
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    w.dims[:] = [1000]
    m = _model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [("x", [4])], inits=[w])
    assert "tensor 'w' dims [1000] need 4000 bytes of data, it holds 16" in _only(m)
    w2 = h.make_tensor("w", T.FLOAT, [2], [1.0, 2.0])
    w2.dims[:] = [3]      # written by hand: onnx >= 1.23's make_tensor refuses the mismatch itself
    m = _model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [("x", [3])], inits=[w2])
    assert "need 3 values in float_data, it holds 2" in _only(m)


def test_shapes_over_the_memory_limit():
    small = Limits(max_bytes=1 << 20, max_elements=1 << 20)
    m = _model([h.make_node("Relu", ["x"], ["y"], name="r")], [("x", [1 << 12, 1 << 12])])
    msg = _only(m, limits=small)
    assert "node 'x' (graph input): attribute 'shape' = [4096, 4096]" in msg and "exceed the limit" in msg
    shape = numpy_helper.from_array(np.array([1 << 30, 1 << 30], np.int64), "s")
    m = _model([h.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [], inits=[shape])
    assert "node 'cos' (ConstantOfShape): input 's' = [1073741824, 1073741824]" in _only(m)


def test_range_with_zero_delta():
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("a", 0), ("b", 10), ("d", 0))]
    m = _model([h.make_node("Range", ["a", "b", "d"], ["y"], name="rng")], [], inits=inits)
    assert "node 'rng' (Range)" in _only(m) and "delta must not be 0" in _only(m)


def test_subgraph_depth_limit():
    def nest(depth):
        if depth == 0:
            return h.make_graph([h.make_node("Identity", ["c"], ["o"])], "leaf", [],
                                [h.make_tensor_value_info("o", T.BOOL, None)])
        body = nest(depth - 1)
        node = h.make_node("If", ["c"], ["o"], name=f"if{depth}", then_branch=body, else_branch=body)
        return h.make_graph([node], f"g{depth}", [], [h.make_tensor_value_info("o", T.BOOL, None)])
    g = nest(4)
    g.input.append(h.make_tensor_value_info("c", T.BOOL, []))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    assert validate_model(m) == []
    msg = _only(m, limits=Limits(1 << 30, 1 << 30, max_depth=2))
    assert "subgraphs nest deeper than 2 levels" in msg


def test_load_onnx_raises_parse_error_with_the_first_problem_first():
    with pytest.raises(ParseError) as e:
        load_onnx(maxpool_zero_stride().SerializeToString())
    assert str(e.value).splitlines()[0].startswith("invalid model: node 'pool1' (MaxPool): attribute 'strides'")


def test_well_formed_models_pass():
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    m = _model([h.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                h.make_node("Softmax", ["c"], ["y"], name="sm", axis=-1)], [("x", ["N", 1, 8, 8])], inits=[w])
    check_model(m)
    assert not validate_model(m)


@pytest.mark.parametrize("argv,code,needle", [
    (["surgeon", "sanitize", "{m}", "-o", "{o}", "--fold-constants"], 2,
     "debugkit surgeon: error: invalid {m}: node 'pool1' (MaxPool): attribute 'strides' = [2, 0]"),
    (["check", "lint", "{m}"], 1, "[E] LINT | Name: pool1 | node 'pool1' (MaxPool): attribute 'strides' = [2, 0]"),
    (["inspect", "model", "{m}"], 2, "node 'pool1' (MaxPool): attribute 'strides' = [2, 0]"),
])
def test_every_command_that_reads_onnx_validates_first(tmp_path, argv, code, needle):
    path = tmp_path / "bad.onnx"
    onnx.save(maxpool_zero_stride(), path)
    argv = [a.format(m=path, o=tmp_path / "o.onnx") for a in argv]
    p = subprocess.run([sys.executable, "-m", "debugkit", *argv], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert p.returncode == code, (p.returncode, p.stderr)
    assert needle.format(m=path) in p.stderr + p.stdout
