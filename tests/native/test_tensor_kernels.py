"""Data-movement, control-flow and sequence kernels: direct kernel calls and small ONNX models end to end."""
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from backends.engine.onnx_backend import Backend
from native.plugins import find_plugin
from native.tactics import Op, tactics_for


def run_kernel(kind, inputs, **params):
    return tactics_for(kind)[0].run(Op(kind, "t", params), inputs)


def test_shuffle_placeholder_and_transposes():
    x = np.arange(24).reshape(2, 3, 4)
    (y,) = run_kernel("Shuffle", [x], first_transpose=[0, 2, 1], reshape_dims=[0, -1], zero_is_placeholder=True)
    assert y.shape == (2, 12) and y[1, 1] == x[1, 1, 0]
    (z,) = run_kernel("Shuffle", [np.zeros((0, 3)), np.array([3, 0])], zero_is_placeholder=False)
    assert z.shape == (3, 0)


def test_slice_clamps_and_negative_steps():
    x = np.arange(10)
    (y,) = run_kernel("Slice", [x, np.array([-1]), np.array([-1000]), np.array([0]), np.array([-3])])
    np.testing.assert_array_equal(y, [9, 6, 3, 0])
    (z,) = run_kernel("Slice", [x, np.array([2]), np.array([1000])])
    np.testing.assert_array_equal(z, np.arange(2, 10))


def test_split_uneven_num_outputs():
    parts = run_kernel("Split", [np.arange(7)], axis=0, split=None, num_outputs=3)
    assert [len(p) for p in parts] == [3, 3, 1]


def test_gather_nd_batch_dims_and_scatter_reductions():
    x = np.arange(8).reshape(2, 2, 2)
    (y,) = run_kernel("Gather", [x, np.array([[1], [0]])], mode="ND", batch_dims=1)
    np.testing.assert_array_equal(y, [[2, 3], [4, 5]])
    (s,) = run_kernel("Scatter", [np.zeros(3), np.array([[0], [0], [2]]), np.array([1.0, 2.0, 5.0])],
                      mode="ND", reduction="add")
    np.testing.assert_array_equal(s, [3, 0, 5])
    (e,) = run_kernel("Scatter", [np.ones((2, 2)), np.array([[1], [0]]), np.array([[7.0], [9.0]])],
                      mode="ELEMENT", axis=1, reduction="max")
    np.testing.assert_array_equal(e, [[1, 7], [9, 1]])


def test_pad_modes_and_negative_pads():
    x = np.array([1, 2, 3])
    assert run_kernel("Padding", [x, np.array([2, 1])], mode="reflect")[0].tolist() == [3, 2, 1, 2, 3, 2]
    assert run_kernel("Padding", [x, np.array([1, 2])], mode="wrap")[0].tolist() == [3, 1, 2, 3, 1, 2]
    assert run_kernel("Padding", [x, np.array([-1, 1]), np.array(9)], mode="constant")[0].tolist() == [2, 3, 9]


@pytest.mark.parametrize("shape", [(5,), (1, 1, 12), (3, 4, 5), (2, 3, 4, 6), (1,), (2, 1)])
def test_pad_kernel_gives_np_pads_values(shape):
    """The Padding kernel's own constant / reflect fill (one buffer, borders filled axis by axis) equals np.pad
    element for element, corners included, for every width np.pad accepts (wider reflects go to np.pad)."""
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    for _ in range(60):
        width = [(int(rng.integers(0, d + 2)), int(rng.integers(0, d + 2))) for d in shape]
        pads = np.array([b for b, _ in width] + [e for _, e in width])
        got = run_kernel("Padding", [x, pads, np.array(2.5, np.float32)], mode="constant")[0]
        np.testing.assert_array_equal(got, np.pad(x, width, mode="constant", constant_values=np.float32(2.5)))
        try:
            want = np.pad(x, width, mode="reflect")
        except ValueError:
            continue
        np.testing.assert_array_equal(run_kernel("Padding", [x, pads], mode="reflect")[0], want)
    assert not np.shares_memory(run_kernel("Padding", [x, np.zeros(2 * len(shape), np.int64)])[0], x)


def test_topk_ties_keep_smaller_index():
    v, i = run_kernel("TopK", [np.array([[1, 3, 3, 2]]), np.array([3])], op="MAX", axis=-1)
    assert v.tolist() == [[3, 3, 2]] and i.tolist() == [[1, 2, 3]]
    v, i = run_kernel("TopK", [np.array([2, 1, 1], np.uint64), np.array([2])], op="MIN", axis=0)
    assert v.tolist() == [1, 1] and i.tolist() == [1, 2]


def test_onehot_range_fill_expand():
    (o,) = run_kernel("OneHot", [np.array([0, -1, 5]), np.array(3), np.array([0.0, 1.0])], axis=-1)
    np.testing.assert_array_equal(o, [[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    assert run_kernel("Range", [np.array(5), np.array(-1), np.array(-2)])[0].tolist() == [5, 3, 1]
    (f,) = tactics_for("Fill")[0].run(Op("Fill", "f", {"op": "CONSTANT"}, {"value": np.array([7], np.int32)}),
                                      [np.array([2, 2])])
    assert f.dtype == np.int32 and f.sum() == 28
    assert run_kernel("Expand", [np.array([[1], [2]]), np.array([1, 3])])[0].shape == (2, 3)


def test_builtin_plugins():
    x = np.arange(9).reshape(3, 3)
    (t,) = find_plugin("Trilu").enqueue([x, np.array(0)], {"upper": 0})
    np.testing.assert_array_equal(t, np.tril(x))
    vals, first, inv, counts = find_plugin("Unique").enqueue([np.array([2, 1, 1, 3, 2])], {"sorted": 0})
    assert vals.tolist() == [2, 1, 3] and first.tolist() == [0, 1, 3]
    assert inv.tolist() == [0, 1, 1, 2, 0] and counts.tolist() == [2, 2, 1]
    (r,) = find_plugin("ReverseSequence").enqueue([np.arange(6).reshape(3, 2), np.array([2, 3])],
                                                 {"time_axis": 0, "batch_axis": 1})
    np.testing.assert_array_equal(r, [[2, 5], [0, 3], [4, 1]])


def _loop_if_model():
    then = h.make_graph([], "then", [], [h.make_tensor_value_info("x", T.FLOAT, [3])])
    els = h.make_graph([h.make_node("Neg", ["x"], ["n"])], "else", [], [h.make_tensor_value_info("n", T.FLOAT, [3])])
    body = h.make_graph(
        [h.make_node("Add", ["acc", "x"], ["acc2"]), h.make_node("Identity", ["cin"], ["cout"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cin", T.BOOL, []),
         h.make_tensor_value_info("acc", T.FLOAT, [3]), h.make_tensor_value_info("keep", T.FLOAT, [3])],
        [h.make_tensor_value_info("cout", T.BOOL, []), h.make_tensor_value_info("acc2", T.FLOAT, [3]),
         h.make_tensor_value_info("keep", T.FLOAT, [3]), h.make_tensor_value_info("x", T.FLOAT, [3])])
    w = nh.from_array(np.arange(3, dtype=np.float32), "w")
    g = h.make_graph(
        [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els),
         h.make_node("Loop", ["M", "", "x", "w"], ["acc", "keep", "xs"], body=body)], "g",
        [h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [3]),
         h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("w", T.FLOAT, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3]), h.make_tensor_value_info("acc", T.FLOAT, [3]),
         h.make_tensor_value_info("keep", T.FLOAT, [3]), h.make_tensor_value_info("xs", T.FLOAT, [None, 3]),
         h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("w", T.FLOAT, [3])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.unused", 1)])


@pytest.mark.parametrize("cond,trips", [(True, 3), (False, 0)])
def test_if_loop_outer_scope_and_passthrough_outputs(cond, trips):
    """Branch/body outputs read from the outer scope, body inputs passed straight out, a graph output that is
    a graph input and one that is an initializer (also listed as an input), an unused opset domain."""
    x = np.array([1, 2, 3], np.float32)
    y, acc, keep, xs, xo, wo = Backend.prepare(_loop_if_model()).run([np.array(cond), x, np.array(trips, np.int64)])
    np.testing.assert_array_equal(y, x if cond else -x)
    np.testing.assert_array_equal(acc, x * (trips + 1))
    np.testing.assert_array_equal(keep, [0, 1, 2])
    assert xs.shape == (trips, 3)
    np.testing.assert_array_equal(xo, x)
    np.testing.assert_array_equal(wo, [0, 1, 2])


def test_sequence_ops_end_to_end():
    g = h.make_graph(
        [h.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
         h.make_node("SequenceErase", ["s", ""], ["s2"]),
         h.make_node("SequenceInsert", ["s2", "v", "zero"], ["s3"]),
         h.make_node("ConcatFromSequence", ["s3"], ["y"], axis=0, new_axis=1),
         h.make_node("SequenceLength", ["s3"], ["n"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3, 2]), h.make_tensor_value_info("v", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [3, 2]), h.make_tensor_value_info("n", T.INT64, [])],
        [nh.from_array(np.array(0, np.int64), "zero")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y, n = Backend.prepare(m).run([x, np.array([9, 9], np.float32)])
    np.testing.assert_array_equal(y, [[9, 9], [0, 1], [2, 3]])
    assert int(n) == 3
