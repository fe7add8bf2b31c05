"""Kernels whose output size comes from data (not from the validated model) check the tensor size limit before
allocating: a mutated repeat count, shape, pad width, scale, depth or k is an ExecutionError naming the layer, the
shape and the limit, never minutes of swapping (fuzz cases plan-bytes-s11-*, onnx-bytes-s21-1012884)."""
import numpy as np
import pytest

from native.errors import ExecutionError
from native.limits import Limits, check_size, default_limits, set_limits
from native.tactics import Op

LIMIT = 1 << 20  # bytes (and elements) for these tests


@pytest.fixture(autouse=True)
def small_limit():
    old = set_limits(Limits(max_bytes=LIMIT, max_elements=LIMIT))
    yield
    set_limits(old)


def _i64(*v):
    return np.array(v, np.int64)


def _refused(kernel, op, inputs, shape):
    """The kernel refuses with the layer's name, the shape it would make and the limit (in GiB)."""
    with pytest.raises(ExecutionError) as e:
        kernel(op, inputs)
    msg = str(e.value)
    assert f"layer '{op.name}' ({op.kind})" in msg, msg
    assert str(shape) in msg and "exceeds the tensor size limit of 0.000977 GiB" in msg, msg
    assert "DEBUGKIT_MAX_TENSOR_BYTES" in msg, msg


# every shape below is far beyond any machine's memory: a kernel that allocated first would fail with
# MemoryError / ValueError (or take the machine down), not with the ExecutionError asserted here

def test_tile_repeats():
    from native.cpu.kernels.tensor import tile
    _refused(tile, Op("Tile", "tile", {}), [np.ones((1, 22), np.float32), _i64(2 ** 20, 2 ** 30)],
             [1048576, 23622320128])
    assert tile(Op("Tile", "t", {}), [np.ones((2, 3), np.float32), _i64(2, 1)])[0].shape == (4, 3)
    assert tile(Op("Tile", "t", {}), [np.ones((3,), np.float32), _i64(2, 2)])[0].shape == (2, 6)  # reps longer


def test_expand_shape():
    from native.cpu.kernels.tensor import expand
    _refused(expand, Op("Expand", "expand", {}), [np.ones((1, 22), np.float32), _i64(2 ** 40, 1)],
             [1099511627776, 22])


def test_constant_of_shape_and_random_fill():
    from native.cpu.kernels.tensor import fill
    value = {"value": np.zeros(1, np.float32)}
    _refused(fill, Op("Fill", "cos", {"op": "CONSTANT"}, value), [_i64(2 ** 31, 2 ** 31)], [2147483648, 2147483648])
    _refused(fill, Op("Fill", "rnd", {"op": "RANDOM_NORMAL", "shape": [2 ** 40]}), [None], [1099511627776])
    assert fill(Op("Fill", "ok", {"op": "CONSTANT"}, value), [_i64(2, 3)])[0].shape == (2, 3)


def test_range_length():
    from native.cpu.kernels.tensor import range_
    args = [np.float32(0), np.float32(1e18), np.float32(1)]
    _refused(range_, Op("Range", "range", {}), args, [999999984306749440])
    with pytest.raises(ExecutionError, match="Range 'r': .* no finite length"):
        range_(Op("Range", "r", {}), [np.float32(0), np.float32(np.inf), np.float32(1)])


def test_pad_widths():
    from native.cpu.kernels.tensor import padding
    op = Op("Padding", "pad", {"mode": "constant", "pads": None, "value": 0.0, "axes": None})
    x = np.ones((1, 4, 8, 8), np.float32)
    _refused(padding, op, [x, _i64(0, 0, 1, 0, 0, 0, 1, 2 ** 33)], [1, 4, 10, 8589934600])
    # an empty tensor with a huge other dim is refused too: kernels still loop and build masks over that dim
    _refused(padding, op, [x, _i64(0, -4, 0, 0, 0, 0, 2 ** 24, 0)], [1, 0, 16777224, 8])


def test_resize_scales():
    from native.cpu.kernels.resize import resize
    op = Op("Resize", "resize", {"mode": "NEAREST"})
    x = np.ones((1, 4, 8, 8), np.float32)
    _refused(resize, op, [x, None, np.array([1, 1, 2 ** 20, 2 ** 20], np.float32), None],
             [1, 4, 8388608, 8388608])


def test_onehot_depth():
    from native.cpu.kernels.tensor import onehot
    _refused(onehot, Op("OneHot", "onehot", {"axis": -1}), [_i64(1, 2), _i64(2 ** 40), np.array([0.0, 1.0])],
             [2, 1099511627776])


def test_elementwise_broadcast():
    from native.cpu.kernels.elementwise import elementwise
    a, b = np.ones((1 << 13, 1), np.float32), np.ones((1, 1 << 12), np.float32)
    _refused(elementwise, Op("ElementWise", "add", {"op": "SUM"}), [a, b], [8192, 4096])
    assert elementwise(Op("ElementWise", "add", {"op": "SUM"}), [a[:64], b[:, :64]])[0].shape == (64, 64)


def test_topk_k_larger_than_the_axis():
    from native.cpu.kernels.tensor import topk
    with pytest.raises(ExecutionError, match=r"TopK 'topk': k=268435459 is outside 0..6"):
        topk(Op("TopK", "topk", {"axis": 1}), [np.ones((1, 6), np.float32), _i64(268435459)])


def test_the_executor_stops_a_tensor_no_kernel_checked():
    """A backstop after every layer: an over-limit output that a kernel made unchecked ends the run there."""
    from backends.engine.engine_graph import Graph, Node, TensorInfo
    from backends.engine.runtime.executor import GraphExecutor
    g = Graph(name="g", inputs=[TensorInfo("x", "int8", [-1])], outputs=[TensorInfo("y", "int8", [-1])])
    g.nodes = [Node("cat", "Concatenation", ["x", "x", "x"], ["y"], {"axis": 0})]
    with pytest.raises(ExecutionError, match=r"layer 'cat' \(Concatenation\): output of shape \[1572864\]"):
        GraphExecutor(g).run({"x": np.ones(1 << 19, np.int8)})
    assert GraphExecutor(g).run({"x": np.ones(1 << 18, np.int8)})["y"].shape == (3 << 18,)


def test_the_limit_is_the_validators_and_configurable(monkeypatch):
    from backends.engine.onnx_parser import validate
    assert validate.default_limits is default_limits and validate.set_limits is set_limits
    set_limits(None)
    monkeypatch.setenv("DEBUGKIT_MAX_TENSOR_BYTES", "2e6")
    assert default_limits().max_bytes == 2_000_000
    op = Op("Tile", "t", {})
    assert check_size(op, [1000, 500], 4) == 500_000
    with pytest.raises(ExecutionError, match="1.9 MiB|0.00186 GiB"):
        check_size(op, [1000, 501], 4)
