"""Values of the CPU math kernels: pointwise dtype rules, activations, reductions, softmax, matmul tactics."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from native.cpu.kernels.activations import activation, activation_inplace
from native.tactics import Op, tactics_for


def run(kind, params, inputs, weights=None, tactic=None):
    candidates = tactics_for(kind)
    t = next(c for c in candidates if tactic is None or c.name == tactic)
    op = Op(kind, "t", dict(params), dict(weights or {}))
    op.weights = t.prepare(op)
    return t.run(op, list(inputs))


def test_integer_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    (y,) = run("ElementWise", {"op": "DIV"}, [a, b])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 2])


def test_mod_and_fmod_signs():
    a = np.array([-4, 7, 5], np.int64)
    b = np.array([3, -3, 2], np.int64)
    np.testing.assert_array_equal(run("ElementWise", {"op": "MOD"}, [a, b])[0], [2, -2, 1])
    np.testing.assert_array_equal(run("ElementWise", {"op": "FMOD"}, [a, b])[0], [-1, 1, 1])


def test_pow_keeps_base_dtype():
    (y,) = run("ElementWise", {"op": "POW"}, [np.array([2, 3], np.int32), np.array([2.0, 3.0], np.float32)])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [4, 27])
    (y,) = run("ElementWise", {"op": "POW"}, [np.array([2.0], np.float32), np.array([3], np.int64)])
    assert y.dtype == np.float32 and y[0] == 8.0


def test_second_operand_cast_to_first_dtype():
    (y,) = run("ElementWise", {"op": "DIV"}, [np.array([3.0, 6.0], np.float16), np.array(3.0, np.float32)])
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, [1.0, 2.0])


@pytest.mark.parametrize("kind,alpha,beta,expect", [
    ("RELU", 0, 0, [0.0, 0.0, 2.0]),
    ("LEAKY_RELU", 0.1, 0, [-0.2, 0.0, 2.0]),
    ("CLIP", -1.0, 1.0, [-1.0, 0.0, 1.0]),
    ("HARD_SIGMOID", 0.2, 0.5, [0.1, 0.5, 0.9]),
    ("THRESHOLDED_RELU", 1.0, 0, [0.0, 0.0, 2.0]),
    ("SHRINK", 0.5, 0.1, [-1.9, 0.0, 1.9]),
    ("SOFTPLUS", 1.0, 1.0, list(np.log1p(np.exp([-2.0, 0.0, 2.0])))),
    ("GELU_ERF", 0, 0, [-0.04550026, 0.0, 1.95449974]),
    ("SILU", 0, 0, [-2 / (1 + np.exp(2)), 0.0, 2 / (1 + np.exp(-2))]),
    ("SELU", 1.6732632, 1.0507010, [1.0507010 * 1.6732632 * (np.exp(-2) - 1), 0.0, 2.101402]),
])
def test_activation_values_and_inplace(kind, alpha, beta, expect):
    x = np.array([-2.0, 0.0, 2.0], np.float32)
    y = activation(x, kind, alpha, beta)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, [-2.0, 0.0, 2.0])  # untouched
    z = x.copy()
    out = activation_inplace(z, kind, alpha, beta)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)
    assert out is z  # float buffer reused


def test_clip_int8_with_input_bounds():
    x = np.array([-100, 0, 100], np.int8)
    (y,) = run("Activation", {"type": "CLIP"}, [x, np.array(-5, np.int8), None])
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [-5, 0, 100])


def test_reduce_dtypes_and_empty_sets():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (s,) = run("Reduce", {"op": "SUM", "axes": [1], "keep_dims": False}, [x])
    assert s.dtype == np.int32
    np.testing.assert_array_equal(s, [3, 12])
    empty = np.zeros((2, 0, 4), np.float32)
    assert run("Reduce", {"op": "PROD", "axes": [1]}, [empty])[0].tolist() == [[[1.0] * 4]] * 2
    assert np.all(run("Reduce", {"op": "MAX", "axes": [1]}, [empty])[0] == -np.inf)
    (lse,) = run("Reduce", {"op": "LOG_SUM_EXP", "axes": None, "keep_dims": False},
                 [np.array([1000.0, 1000.0], np.float32)])
    np.testing.assert_allclose(lse, 1000.0 + np.log(2.0), rtol=1e-6)
    (noop,) = run("Reduce", {"op": "SUM", "noop_with_empty_axes": True}, [x, np.array([], np.int64)])
    np.testing.assert_array_equal(noop, x)


def test_argreduce_select_last_index():
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    np.testing.assert_array_equal(run("ArgReduce", {"op": "MAX", "axis": 1}, [x])[0], [[1], [0]])
    np.testing.assert_array_equal(run("ArgReduce", {"op": "MAX", "axis": 1, "select_last_index": True}, [x])[0],
                                  [[2], [1]])


def test_softmax_axis_and_flatten():
    x = np.array([[[1.0, 2.0], [3.0, 4.0]]], np.float32)
    (y,) = run("Softmax", {"axis": -1}, [x])
    np.testing.assert_allclose(y[0, 0], np.exp([1, 2]) / np.exp([1, 2]).sum(), rtol=1e-6)
    (f,) = run("Softmax", {"axis": 1, "flatten": True}, [x])  # opset < 13: over the 4 trailing values
    np.testing.assert_allclose(f.reshape(-1), np.exp([1, 2, 3, 4]) / np.exp([1, 2, 3, 4]).sum(), rtol=1e-6)
    (h,) = run("Softmax", {"axis": -1, "hard": True}, [np.array([[1.0, 5.0, 5.0]], np.float32)])
    np.testing.assert_array_equal(h, [[0, 1, 0]])
    (ls,) = run("Softmax", {"axis": -1, "log": True}, [x])
    np.testing.assert_allclose(ls, np.log(y), rtol=1e-5)


def test_cumsum_exclusive_reverse():
    x = np.array([1, 2, 3], np.int32)
    (y,) = run("Cumulative", {"exclusive": True, "reverse": True}, [x, np.array(0)])
    np.testing.assert_array_equal(y, [5, 3, 0])
    assert y.dtype == np.int32


def test_matmul_tactics_agree_with_post_ops():
    names = {t.name for t in tactics_for("MatrixMultiply")}
    assert {"blas", "packed-gemm"} <= names
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 5, 8)).astype(np.float32)
    b = rng.standard_normal((6, 8)).astype(np.float32)  # [N, K], used transposed
    bias = rng.standard_normal(6).astype(np.float32)
    params = {"transpose_b": True, "post_ops": [{"op": "bias", "weight": "bias", "axis": -1},
                                                {"op": "activation", "type": "RELU"}]}
    weights = {"b": b, "bias": bias}
    expect = np.maximum(a @ b.T + bias, 0)
    (y1,) = run("MatrixMultiply", params, [a], weights, tactic="blas")
    (y2,) = run("MatrixMultiply", params, [a], weights, tactic="packed-gemm")
    np.testing.assert_allclose(y1, expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y2, expect, rtol=1e-5, atol=1e-5)
    # 1-D left operand and float16
    v = rng.standard_normal(8).astype(np.float16)
    (z1,) = run("MatrixMultiply", {"transpose_b": True}, [v], {"b": b.astype(np.float16)}, tactic="blas")
    (z2,) = run("MatrixMultiply", {"transpose_b": True}, [v], {"b": b.astype(np.float16)}, tactic="packed-gemm")
    assert z1.dtype == z2.dtype == np.float16 and z1.shape == z2.shape == (6,)
    np.testing.assert_allclose(z1.astype(np.float32), z2.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_packed_gemm_not_offered_for_activation_operands():
    packed = next(t for t in tactics_for("MatrixMultiply") if t.name == "packed-gemm")
    assert packed.supports(Op("MatrixMultiply", "m", {}, {}), [[2, 3], [3, 4]]) is not None


def test_einsum_and_det():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = run("Einsum", {"equation": "ij -> ji"}, [a])
    np.testing.assert_array_equal(y, a.T)
    m = np.array([[[2.0, 0.0], [0.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]]], np.float32)
    np.testing.assert_allclose(run("Unary", {"op": "DET"}, [m])[0], [6.0, -2.0], rtol=1e-6)


def _gemm_model(with_const_b):
    rng = np.random.default_rng(1)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.standard_normal(3).astype(np.float32)
    inits = [numpy_helper.from_array(c, "C")]
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, [5, 4])]
    if with_const_b:
        inits.append(numpy_helper.from_array(b, "B"))
    else:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, [4, 3]))
    node = helper.make_node("Gemm", ["A", "B", "C"], ["Y"], name="gemm0", alpha=0.5, beta=2.0)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [5, 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), b, c


@pytest.mark.parametrize("const_b", [True, False])
def test_gemm_import_end_to_end(const_b):
    from backends.engine.build import parse_onnx
    from backends.engine.onnx_backend import Backend
    model, b, c = _gemm_model(const_b)
    network, _ = parse_onnx(model)
    mm = [l for l in network.layers if l.kind == "MatrixMultiply"]
    assert len(mm) == 1 and mm[0].source_nodes == ["gemm0"]
    assert ("b" in mm[0].weights) == const_b
    # alpha folds into a constant B, so the bias can be an epilogue; else alpha scales first and C is added after
    assert ("post_ops" in mm[0].params) == const_b
    a = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    feeds = [a] if const_b else [a, b]
    (y,) = Backend.prepare(model).run(feeds)
    np.testing.assert_allclose(y, 0.5 * a @ b + 2.0 * c, rtol=1e-5, atol=1e-5)


def test_gelu_erf_accuracy():
    import math
    erf = np.vectorize(math.erf)          # the reference: Python's libm erf in float64 (scipy is not a dependency)
    x = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -0.0, 1e-8, -1e-8]]).astype(np.float32)
    ref = 0.5 * x.astype(np.float64) * (1 + erf(x.astype(np.float64) / np.sqrt(2)))
    for y in (activation(x, "GELU_ERF"), activation_inplace(x.copy(), "GELU_ERF")):
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, ref, rtol=0, atol=5e-7)
    y64 = activation(x.astype(np.float64), "GELU_ERF")
    np.testing.assert_allclose(y64, ref, rtol=0, atol=3e-7)


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("a_shape", [(2, 16, 64), (16, 64), (40, 64)])
def test_matmul_tactics_agree(transpose_b, a_shape):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal((48, 64) if transpose_b else (64, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    ref = a.astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64) + bias
    ref = np.where(ref > 0, ref, 0)
    params = {"transpose_b": transpose_b, "post_ops": [{"op": "bias", "weight": "bias", "axis": -1},
                                                       {"op": "activation", "type": "RELU"}]}
    names = [t.name for t in tactics_for("MatrixMultiply")]
    assert {"blas", "packed-gemm", "packed-gemm-t"} <= set(names)
    for name in ("blas", "packed-gemm", "packed-gemm-t"):
        (y,) = run("MatrixMultiply", params, [a], {"b": b, "bias": bias}, tactic=name)
        assert y.shape == a_shape[:-1] + (48,) and y.flags.c_contiguous
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_packed_gemm_splits_large_products_into_bands():
    from native.cpu.kernels import matmul
    rng = np.random.default_rng(4)
    a = rng.standard_normal((300, 256)).astype(np.float32)
    b = rng.standard_normal((256, 300)).astype(np.float32)
    calls = []
    y = matmul.gemm(a, b, epilogue=lambda rows: calls.append(rows.shape[0]) or np.maximum(rows, 0, out=rows))
    np.testing.assert_allclose(y, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    assert sum(calls) == 300


@pytest.mark.parametrize("mask_shape", [None, (1, 1, 256, 256), (256,), (2, 1, 1, 256)])
def test_attention_row_bands_match_reference(mask_shape):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 4, 256, 32)).astype(np.float32)
    k = rng.standard_normal((2, 4, 256, 32)).astype(np.float32)
    v = rng.standard_normal((2, 4, 256, 32)).astype(np.float32)
    inputs = [q, k, v]
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * 0.25
    if mask_shape is not None:
        mask = rng.standard_normal(mask_shape).astype(np.float32)
        inputs.append(mask)
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v
    (y,) = run("Attention", {"scale": 0.25, "mask_kind": "add" if mask_shape else "none", "transpose_k": True}, inputs)
    assert y.shape == (2, 4, 256, 32)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
