"""The blas MatrixMultiply tactic's per-op recipe (matmul.py `_blas_recipe`): the same floats as np.matmul followed
by fused.apply_post_ops, in every calling form (planned buffer or not, transposes, bias with and without an
activation, post-ops it leaves to the general path), and re-derived when the op's weights or params change.
packed-gemm-t's bias in the copy back to row-major: the same floats as the copy, then the post-ops."""
import numpy as np
import pytest

from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Op, tactics_for

BLAS = next(t for t in tactics_for("MatrixMultiply") if t.name == "blas")
GEMM_T = next(t for t in tactics_for("MatrixMultiply") if t.name == "packed-gemm-t")
RNG = np.random.default_rng(7)


def _reference(op, inputs):
    """The general path spelled out: np.matmul of the (transposed) operands, then the post-ops."""
    a = inputs[0]
    b = op.weights["b"] if "b" in op.weights else inputs[1]
    if op.params.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if op.params.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    return apply_post_ops(np.matmul(a, b), op, inputs)


POSTS = {
    "none": [],
    "bias": [{"op": "bias", "weight": "bias", "axis": -1}],
    "bias-relu": [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": "RELU"}],
    "bias-sigmoid": [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": "SIGMOID"}],
    "relu": [{"op": "activation", "type": "RELU"}],
    "bias-axis1": [{"op": "bias", "weight": "bias", "axis": 1}],
}


CASES = [(post, shape) for post in sorted(POSTS) for shape in [(1, 96), (5, 96), (2, 3, 96)]
         if post != "bias-axis1" or len(shape) == 2]   # a channel-axis bias: the last axis of 2-D results only


@pytest.mark.parametrize("post,a_shape", CASES)
@pytest.mark.parametrize("planned", [False, True])
def test_blas_recipe_matches_the_general_path_bit_for_bit(post, a_shape, planned):
    n = 24
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal((n, 96)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    op = Op("MatrixMultiply", "m", {"transpose_b": True, "post_ops": POSTS[post]}, {"b": b, "bias": bias})
    expect = _reference(op, [a])
    out = [np.full(expect.shape, np.nan, np.float32)] if planned else None
    for _ in range(2):   # the first call makes the recipe, the second uses it
        (y,) = BLAS.run(op, [a], out)
        assert y.dtype == expect.dtype and y.shape == expect.shape
        np.testing.assert_array_equal(y, expect)
        if planned:
            assert y is out[0]


def test_blas_recipe_two_activations_and_transposed_left_operand():
    a = RNG.standard_normal((3, 16, 4)).astype(np.float32)     # [.., K, M], transposed
    b = RNG.standard_normal((3, 16, 8)).astype(np.float32)     # an activation: the second input
    op = Op("MatrixMultiply", "m", {"transpose_a": True}, {})
    np.testing.assert_array_equal(BLAS.run(op, [a, b])[0], _reference(op, [a, b]))
    np.testing.assert_array_equal(BLAS.run(op, [a, b])[0], np.matmul(np.swapaxes(a, -1, -2), b))


def test_blas_recipe_follows_new_weights_and_params():
    a = RNG.standard_normal((2, 8)).astype(np.float32)
    b1, b2 = (RNG.standard_normal((8, 5)).astype(np.float32) for _ in range(2))
    bias = RNG.standard_normal(5).astype(np.float32)
    op = Op("MatrixMultiply", "m", {}, {"b": b1, "bias": bias})
    np.testing.assert_array_equal(BLAS.run(op, [a])[0], a @ b1)
    op.weights = {"b": b2, "bias": bias}
    np.testing.assert_array_equal(BLAS.run(op, [a])[0], a @ b2)
    op.params = {"post_ops": POSTS["bias"]}
    np.testing.assert_array_equal(BLAS.run(op, [a])[0], a @ b2 + bias)


def test_blas_recipe_half_precision_and_vector_operands():
    v = RNG.standard_normal(8).astype(np.float16)
    b = RNG.standard_normal((6, 8)).astype(np.float16)
    bias = RNG.standard_normal(6).astype(np.float16)
    op = Op("MatrixMultiply", "m", {"transpose_b": True, "post_ops": POSTS["bias"]}, {"b": b, "bias": bias})
    (y,) = BLAS.run(op, [v])
    expect = apply_post_ops(np.matmul(v.astype(np.float32), b.T.astype(np.float32)).astype(np.float16), op, [v])
    assert y.dtype == np.float16 and y.shape == (6,)
    np.testing.assert_array_equal(y, expect)
    w = RNG.standard_normal(8).astype(np.float32)
    op1 = Op("MatrixMultiply", "m", {}, {})
    np.testing.assert_array_equal(BLAS.run(op1, [w, w])[0], np.matmul(w, w))


@pytest.mark.parametrize("post,a_shape", [c for c in CASES if c[0] != "bias-axis1"])
@pytest.mark.parametrize("bias_dtype", [np.float32, np.float64])
def test_packed_gemm_t_bias_in_the_transposing_copy_bit_for_bit(post, a_shape, bias_dtype):
    n = 40
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal((n, 96)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(bias_dtype)
    op = Op("MatrixMultiply", "m", {"transpose_b": True, "post_ops": POSTS[post]}, {"b": b, "bias": bias})
    op.weights = GEMM_T.prepare(op)
    bt = op.weights["bt_packed"]
    y_t = np.ascontiguousarray(np.dot(bt, a.reshape(-1, 96).T).T).reshape(a_shape[:-1] + (n,))
    expect = apply_post_ops(y_t, op, [a])      # the tactic's former path: the copy, then the post-ops
    for _ in range(2):
        (y,) = GEMM_T.run(op, [a])
        assert y.dtype == np.float32 and y.shape == expect.shape and y.flags.c_contiguous
        np.testing.assert_array_equal(y, expect)
