"""Expand and Gather (native/cpu/kernels/tensor.py). Expand: the broadcast values, the result shape kept per (input
shape, shape) on the op (checked once), the input itself where the shape does not change (as Identity and Reshape
hand back theirs). Gather: integer indices straight to np.take (negative ones wrap once, past either end raises)."""
import numpy as np

from native.cpu.kernels.tensor import expand
from native.tactics import Op


def test_expand_broadcasts_and_keeps_the_shape_per_op():
    op = Op("Expand", "e", {})
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    y = expand(op, [x, np.array([2, 3, 4], np.int64)])[0]
    assert y.shape == (2, 3, 4) and y.flags.writeable and not np.shares_memory(x, y)
    assert np.array_equal(y, np.broadcast_to(x, (2, 3, 4)))
    assert op.__dict__["_expand"] == ((3, 1), (2, 3, 4), (2, 3, 4))
    again = expand(op, [x + 1, np.array([2, 3, 4], np.int64)])[0]
    assert np.array_equal(again, np.broadcast_to(x + 1, (2, 3, 4)))
    other = expand(op, [x, np.array([1, 5], np.int64)])[0]        # another shape: worked out again
    assert other.shape == (3, 5) and op.__dict__["_expand"][2] == (3, 5)


def test_expand_to_its_own_shape_returns_the_input():
    op = Op("Expand", "e", {})
    mask = np.ones((2, 1, 16, 16), bool)
    for _ in range(2):
        assert expand(op, [mask, np.array([2, 1, 16, 16], np.int64)])[0] is mask
        assert expand(op, [mask, np.array([1, 1, 1], np.int64)])[0] is mask   # ones broadcast to x's shape


def test_gather_wraps_negative_indices_once_and_refuses_past_either_end():
    import pytest
    from native.cpu.kernels.tensor import gather
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    op = Op("Gather", "g", {"axis": 0, "mode": "DEFAULT"})
    for dtype in (np.int64, np.int32, np.uint8):
        idx = np.array([[4, 0], [2, 3]], dtype)
        assert np.array_equal(gather(op, [x, idx])[0], x[idx.astype(np.int64)])
    assert np.array_equal(gather(op, [x, np.array([-1, -5], np.int64)])[0], x[[4, 0]])
    assert np.array_equal(gather(Op("Gather", "g", {"axis": 1}), [x, np.array([-1], np.int64)])[0], x[:, [3]])
    for bad in (5, -6):
        with pytest.raises(IndexError):
            gather(op, [x, np.array([bad], np.int64)])
