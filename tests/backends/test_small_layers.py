"""The small layers around tiny models' arithmetic cost what they must: constant Slice / Pad operands become params
(worked out once per input shape), a Gather of one index is a view, and Squeeze / Unsqueeze plugins over
shape-static tensors become reshapes (Shuffle)."""
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from backends.engine import BuilderFlag
from backends.engine.build import build_plan_from_onnx
from backends.engine.runtime import Runtime
from native.errors import ExecutionError

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _engine(model, **kw):
    return Runtime().deserialize_engine(build_plan_from_onnx(model, **kw))


def test_constant_slice_and_pad_operands_become_params_and_follow_the_input_shape():
    model = _model([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
                    h.make_node("Pad", ["s", "pads"], ["y"], mode="reflect")],
                   [h.make_tensor_value_info("x", T.FLOAT, ["N", 12])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)],
                   [nh.from_array(np.array([1, -2], np.int64), "st"), nh.from_array(np.array([-1, 0], np.int64), "en"),
                    nh.from_array(np.array([1, 0], np.int64), "ax"), nh.from_array(np.array([2, -1], np.int64), "sp"),
                    nh.from_array(np.array([0, 2, 0, 1], np.int64), "pads")])
    eng = _engine(model, ranges={"x": ((1, 12), (3, 12), (5, 12))})
    sl, pad = [n for n in eng.graph.nodes if n.kind in ("Slice", "Padding")]
    assert sl.inputs == ["x"] and sl.params["starts"] == [1, -2] and sl.params["steps"] == [2, -1]
    assert pad.inputs == ["s"] and pad.params["pads"] == [0, 2, 0, 1]
    ctx = eng.create_execution_context()
    for n in (3, 5, 2, 3):                          # the index kept per input shape is redone when it changes
        x = RNG.standard_normal((n, 12)).astype(np.float32)
        ref = np.pad(x[-2:0:-1, 1:-1:2], [(0, 0), (2, 1)], mode="reflect")
        np.testing.assert_array_equal(ctx.execute({"x": x})["y"], ref)


@pytest.mark.parametrize("index", [0, 2, -1])
def test_gather_of_one_index_is_a_view_with_numpys_values(index):
    model = _model([h.make_node("Gather", ["x", "i"], ["g"], axis=1), h.make_node("Shape", ["x"], ["s"]),
                    h.make_node("Gather", ["s", "i"], ["d"], axis=0), h.make_node("Relu", ["g"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]), h.make_tensor_value_info("i", T.INT64, [])],
                   [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("d", T.INT64, None)])
    ctx = _engine(model, flags=[BuilderFlag.DISABLE_CONSTANT_FOLDING]).create_execution_context()
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    out = ctx.execute({"x": x, "i": np.array(index, np.int64)})
    np.testing.assert_array_equal(out["y"], np.maximum(np.take(x, index, axis=1), 0))
    assert isinstance(out["d"], np.ndarray) and out["d"].shape == () and out["d"] == (2, 3, 4)[index]
    with pytest.raises(ExecutionError, match="out of bounds"):
        ctx.execute({"x": x, "i": np.array(3, np.int64)})


def test_unsqueeze_plugin_over_a_static_tensor_becomes_a_reshape():
    """An If whose branches differ in rank leaves its output's rank unknown at import, so the Unsqueeze after it
    is a plugin; at fixed shapes the If folds and the plugin becomes a Shuffle."""
    then = h.make_graph([h.make_node("Unsqueeze", ["x", "ax0"], ["t_y"])], "then", [],
                        [h.make_tensor_value_info("t_y", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e_y"])], "else", [],
                         [h.make_tensor_value_info("e_y", T.FLOAT, None)])
    model = _model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Size", ["s"], ["r"]),
                    h.make_node("Equal", ["r", "two"], ["c"]),
                    h.make_node("If", ["c"], ["u"], then_branch=then, else_branch=other),
                    h.make_node("Unsqueeze", ["u", "ax0"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [3, 4])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                   [nh.from_array(np.array(2, np.int64), "two"), nh.from_array(np.array([0], np.int64), "ax0")])
    from backends.engine import parse_onnx
    net, _ = parse_onnx(model)
    assert [l.kind for l in net.layers][-1] == "Plugin"
    eng = _engine(model, shapes={"x": (3, 4)})
    kinds = [n.kind for n in eng.graph.nodes]
    assert "Plugin" not in kinds and "If" not in kinds and "Shuffle" in kinds, kinds
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(eng.create_execution_context().execute({"x": x})["y"], x[None, None])


def test_padding_from_params_crops_fills_and_follows_shape_and_dtype():
    from native.cpu.kernels.tensor import padding
    from native.tactics import Op
    op = Op("Padding", "p", {"mode": "constant", "pads": [1, -1, 0, 2], "value": 7.0, "axes": None})
    for shape, dtype in (((3, 4), np.float32), ((5, 2), np.float32), ((3, 4), np.int32), ((3, 4), np.float32)):
        x = RNG.integers(-5, 5, shape).astype(dtype)
        want = np.pad(x[:, 1:], [(1, 0), (0, 2)], constant_values=7)
        got = padding(op, [x])[0]
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_integer_div_of_one_element_truncates_like_c(dtype):
    """A length divided by a rate (asr resamplers): the one-element path gives the array path's answers."""
    from native.cpu.kernels.elementwise import elementwise
    from native.tactics import Op
    op = Op("ElementWise", "d", {"op": "DIV"})
    values = [0, 1, 7, 100, 255] + ([15999, -7, -1, -15999] if dtype != np.uint8 else [])
    for x in values:
        for y in [v for v in values if v] + [0]:
            a, b = np.array([x], dtype), np.array(y, dtype)
            got = elementwise(op, [a, b])[0]
            want = np.array([0 if y == 0 else abs(x) // abs(y) * (-1 if (x < 0) != (y < 0) else 1)], dtype)
            assert got.dtype == want.dtype and got.shape == (1,) and got.tolist() == want.tolist(), (x, y)
            big = elementwise(op, [np.array([x, x], dtype), b])[0]   # the general (array) path agrees
            assert big.tolist() == [got[0]] * 2


def test_constant_split_sizes_become_params_and_follow_the_input_shape():
    model = _model([h.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1)],
                   [h.make_tensor_value_info("x", T.FLOAT, ["N", 7])],
                   [h.make_tensor_value_info(n, T.FLOAT, None) for n in "abc"],
                   [nh.from_array(np.array([2, 4, 1], np.int64), "sizes")], opset=13)
    eng = _engine(model, ranges={"x": ((1, 7), (2, 7), (4, 7))})
    (sp,) = [n for n in eng.graph.nodes if n.kind == "Split"]
    assert sp.inputs == ["x"] and sp.params["split"] == [2, 4, 1]
    ctx = eng.create_execution_context()
    for n in (2, 4, 1):
        x = RNG.standard_normal((n, 7)).astype(np.float32)
        out = ctx.execute({"x": x})
        for name, part in zip("abc", np.split(x, [2, 6], axis=1)):
            np.testing.assert_array_equal(out[name], part)
