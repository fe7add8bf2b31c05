"""Reduced-precision CPU tactics, bit for bit against small independent numpy references (odd shapes: batch > 1,
channels not a multiple of 8, groups, depthwise, dilation, stride, broadcasting).

Operands are multiples of 8 (up to 64) and of 1/8 (up to 1) plus a tiny perturbation that the format's rounding must remove, so every
product and every float32 partial sum is exact whatever the summation order: the references (float64 loops) and the
tactics (BLAS) then agree exactly, and what is checked is where each mode rounds: inputs, weights, FP16 running sums
(FP16 accumulation), the stored output (round to nearest even, ties included).
"""
import itertools

import ml_dtypes
import numpy as np
import pytest

from native import numerics
from native.device import get_device
from native.tactics import Op, tactics_for

DEV = get_device("cpu")
STORE = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "fp8": np.float16, "float32": np.float32}
CAST_IN = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def run(kind, tactic, params, weights, inputs, precision, math=""):
    t = next(t for t in tactics_for(kind) if t.name == tactic)
    out_type = {"fp8": "float16"}.get(precision, precision)
    op = Op(kind, "t", params, dict(weights), precision=precision, math=math,
            output_types=(out_type if precision != "float32" else None,))
    assert t.supports(op, [list(np.shape(a)) if a is not None else None for a in inputs]) in (None, True)
    op.weights = DEV.prepare(t, op)
    return DEV.run(t, op, inputs)[0]


def operands(rng, shape, denom, perturb=None, big=None, levels=8):
    """Nonzero multiples of 1/denom in [-levels/denom, levels/denom], each plus `perturb` (removed by the
    rounding)."""
    perturb = perturb if perturb is not None else (2.0 ** -16 if levels <= 8 else 2.0 ** -20)
    k = rng.integers(1, levels + 1, shape) * rng.choice([-1, 1], shape)
    v = k / denom
    if big is not None:
        v.flat[:3] = big
    return (v + perturb).astype(np.float32), v


def ref_conv(x, w, b, stride, pad, dil, groups):
    """Direct convolution in float64, one kernel tap at a time."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // groups
    for g in range(groups):
        for i, j in itertools.product(range(kh), range(kw)):
            patch = xp[:, g * cg:(g + 1) * cg, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                       j * dil:j * dil + stride * (ow - 1) + 1:stride]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
    return y + b.reshape(1, -1, 1, 1)


def ref_conv_fp16acc(x, w, b, stride, pad, dil, groups, block=16):
    """Same, accumulating K = (c, kh, kw) of each group in order, rounding the running sum to FP16 per block."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    mg = m // groups
    y = np.zeros((n, m, oh, ow))
    for g in range(groups):
        terms = []  # per K index: [n, mg, oh, ow] products
        for ci in range(cg):
            for i, j in itertools.product(range(kh), range(kw)):
                patch = xp[:, g * cg + ci, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                           j * dil:j * dil + stride * (ow - 1) + 1:stride]
                terms.append(patch[:, None] * w[g * mg:(g + 1) * mg, ci, i, j][None, :, None, None])
        acc = np.zeros_like(terms[0])
        for s in range(0, len(terms), block):
            acc = (acc + sum(terms[s:s + block])).astype(np.float16).astype(np.float64)
        y[:, g * mg:(g + 1) * mg] = acc
    return y + b.reshape(1, -1, 1, 1)


CONV_CASES = {
    # name: (x shape, w shape, stride, pad, dilation, groups, tactic)
    "batch3-c5-im2col": ((3, 5, 9, 7), (7, 5, 3, 3), 1, 1, 1, 1, "im2col-gemm"),
    "groups-dilation-stride": ((2, 6, 11, 10), (4, 3, 3, 3), 2, 2, 2, 2, "im2col-gemm"),
    "depthwise": ((3, 5, 8, 9), (5, 1, 3, 3), 1, 1, 1, 5, "depthwise"),
    "pointwise-1x1": ((3, 7, 5, 6), (9, 7, 1, 1), 1, 0, 1, 1, "1x1-gemm"),
    "shifted": ((2, 3, 7, 9), (5, 3, 3, 3), 1, 1, 1, 1, "shifted-gemm"),
}


def conv_inputs(case, seed=0, levels=8):
    xs, ws, stride, pad, dil, groups, tactic = CONV_CASES[case]
    rng = np.random.default_rng(seed)
    x, xv = operands(rng, xs, 0.125 if levels == 8 else 1, levels=levels)
    w, wv = operands(rng, ws, 8 if levels == 8 else 64, levels=levels)
    b = (rng.integers(-64, 64, ws[0]) / 8).astype(np.float32)
    params = {"kernel_shape": list(ws[2:]), "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [dil] * 2, "groups": groups, "num_output_maps": ws[0]}
    return x, xv, w, wv, b, params, (stride, pad, dil, groups), tactic


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_conv_reduced_fp32_accumulate(case, precision):
    x, xv, w, wv, b, params, geo, tactic = conv_inputs(case)
    got = run("Convolution", tactic, params, {"kernel": w, "bias": b}, [numerics.to_storage(x, precision)], precision)
    assert got.dtype == np.dtype(STORE[precision])
    ref = ref_conv(xv, wv, b.astype(np.float64), *geo)  # operands rounded = the exact multiples (xv, wv)
    np.testing.assert_array_equal(got.astype(np.float32), ref.astype(np.float32).astype(STORE[precision]).astype(np.float32))
    if np.abs(ref).max() > 600:
        assert not np.array_equal(got.astype(np.float64), ref)  # some outputs do round


def test_conv_fp16_accumulate_is_its_own_numerics():
    for case in ("batch3-c5-im2col", "groups-dilation-stride"):
        x, xv, w, wv, b, params, geo, _ = conv_inputs(case, seed=3, levels=64)  # 12-bit products: sums round
        x16 = numerics.to_storage(x, "float16")
        got = run("Convolution", "im2col-gemm-fp16acc", params, {"kernel": w, "bias": b}, [x16], "float16")
        ref = ref_conv_fp16acc(xv, wv, b.astype(np.float64), *geo)
        np.testing.assert_array_equal(got, ref.astype(np.float32).astype(np.float16))
        fp32acc = run("Convolution", "im2col-gemm", params, {"kernel": w, "bias": b}, [x16], "float16")
        assert not np.array_equal(got, fp32acc)  # numerically different from FP32 accumulation


def test_conv_tf32_rounds_operands_only():
    x, xv, w, wv, b, params, geo, tactic = conv_inputs("groups-dilation-stride", seed=1)
    got = run("Convolution", tactic, params, {"kernel": w, "bias": b}, [x], "float32", math="tf32")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref_conv(xv, wv, b.astype(np.float64), *geo).astype(np.float32))
    plain = run("Convolution", tactic, params, {"kernel": w, "bias": b}, [x], "float32")
    assert not np.array_equal(plain, got)  # without TF32 the perturbation survives


def test_conv_fp8_saturates_operands_and_stores_fp16():
    x, xv, w, wv, b, params, geo, tactic = conv_inputs("batch3-c5-im2col", seed=2)
    x = x.copy()
    x.flat[:4] = [500.0, -1000.0, 17.0, 8.5]          # saturate to +-448; 17 -> 16, 8.5 -> 8 (ties to even)
    xv = xv.copy()
    xv.flat[:4] = [448.0, -448.0, 16.0, 8.0]
    x16 = numerics.to_storage(x, "float16")            # an FP8 layer's input arrives in FP16 (its companion)
    got = run("Convolution", tactic, params, {"kernel": w, "bias": b}, [x16], "fp8")
    assert got.dtype == np.float16
    ref = ref_conv(xv, wv, numerics.round_fp16(b).astype(np.float64), *geo)
    np.testing.assert_array_equal(got, ref.astype(np.float32).astype(np.float16))


def ref_matmul(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_matmul_broadcast_reduced(precision):
    rng = np.random.default_rng(4)
    a, av = operands(rng, (3, 1, 5, 7), 0.125)
    bm, bv = operands(rng, (2, 7, 6), 8)
    sa, sb = numerics.to_storage(a, precision), numerics.to_storage(bm, precision)
    got = run("MatrixMultiply", "blas", {}, {}, [sa, sb], precision)
    assert got.shape == (3, 2, 5, 6) and got.dtype == np.dtype(STORE[precision])
    np.testing.assert_array_equal(got, ref_matmul(av, bv).astype(np.float32).astype(STORE[precision]))


def test_matmul_constant_weights_transposed_fp16():
    rng = np.random.default_rng(5)
    a, av = operands(rng, (3, 4, 37), 0.125)
    bm, bv = operands(rng, (11, 37), 8)                 # [N, K] with transpose_b
    got = run("MatrixMultiply", "packed-gemm", {"transpose_b": True}, {"b": bm}, [numerics.to_storage(a, "float16")],
              "float16")
    np.testing.assert_array_equal(got, ref_matmul(av, bv.T).astype(np.float32).astype(np.float16))


def test_matmul_fp16_accumulate_blocks_of_16():
    rng = np.random.default_rng(6)
    a, av = operands(rng, (2, 3, 5, 45), 1, levels=64)     # K = 45: blocks 16 + 16 + 13
    bm, bv = operands(rng, (45, 7), 64, levels=64)
    got = run("MatrixMultiply", "gemm-fp16acc", {}, {"b": bm}, [numerics.to_storage(a, "float16")], "float16")
    acc = np.zeros((2, 3, 5, 7))
    for s in range(0, 45, 16):
        acc = (acc + ref_matmul(av[..., s:s + 16], bv[s:s + 16])).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(got, acc.astype(np.float16))
    fp32acc = run("MatrixMultiply", "blas", {}, {"b": bm}, [numerics.to_storage(a, "float16")], "float16")
    assert not np.array_equal(got, fp32acc)


def test_matmul_tf32():
    rng = np.random.default_rng(7)
    a, av = operands(rng, (3, 5, 9), 0.125)
    bm, bv = operands(rng, (3, 9, 4), 8)
    got = run("MatrixMultiply", "blas", {}, {}, [a, bm], "float32", math="tf32")
    np.testing.assert_array_equal(got, ref_matmul(av, bv).astype(np.float32))


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_pointwise_broadcast_computes_in_fp32_on_rounded_inputs(precision):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((3, 5, 1)).astype(np.float32) * 300
    b = rng.standard_normal((1, 5, 7)).astype(np.float32)
    sa, sb = numerics.to_storage(a, precision), numerics.to_storage(b, precision)
    got = run("ElementWise", "numpy", {"op": "DIV"}, {}, [sa, sb], precision)
    ref = (sa.astype(np.float64) / sb.astype(np.float64)).astype(np.float32)  # float64 division rounds like float32's
    np.testing.assert_array_equal(got, ref.astype(STORE[precision]))
    assert got.shape == (3, 5, 7)


def test_avg_pool_fp16():
    rng = np.random.default_rng(9)
    x = (rng.integers(-200, 200, (3, 5, 7, 9)) / 8).astype(np.float32)
    got = run("Pooling", "strided-taps", {"type": "AVERAGE", "window": [3, 3], "strides": [2, 2]}, {},
              [numerics.to_storage(x, "float16")], "float16")
    ref = np.zeros((3, 5, 3, 4))
    for i, j in itertools.product(range(3), range(3)):
        ref += x[:, :, i:i + 5:2, j:j + 7:2]
    np.testing.assert_array_equal(got, (ref / 9).astype(np.float32).astype(np.float16))
