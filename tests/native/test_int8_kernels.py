"""INT8 conv / matmul tactics bit-for-bit against small independent references (loops over taps in int64,
quantization written out with np.rint / floor)."""
import numpy as np
import pytest

from native.tactics import Op, tactics_for, unsupported_reason


def ref_quant(x, s, rounding="half_even", lo=-128):
    v = np.asarray(x, np.float32) / np.asarray(s, np.float32)
    r = np.rint(v) if rounding == "half_even" else np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(r, lo, 127).astype(np.int64)


def ref_conv_int(xq, wq, stride, pad, dil, groups):
    n, c, h, w = xq.shape
    m, cg, kh, kw = wq.shape
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), np.int64)
    xp[:, :, pad:pad + h, pad:pad + w] = xq
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, m, ho, wo), np.int64)
    mg = m // groups
    for o in range(m):
        gi = o // mg
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * dil:i * dil + stride * (ho - 1) + 1:stride,
                           j * dil:j * dil + stride * (wo - 1) + 1:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, wq[o, :, i, j].astype(np.int64))
    return out


def _run(kind, params, weights, x, precision="int8"):
    op = Op(kind, "l", params, weights, {}, precision)
    tac = [t for t in tactics_for(kind) if "int8" in t.precisions]
    assert tac and unsupported_reason(tac[0], op, [list(x.shape)]) is None
    op.weights = tac[0].prepare(op)
    return tac[0].run(op, [x])[0]


@pytest.mark.parametrize("groups,stride,dil,pad,relu,out_scale,rounding", [
    (1, 1, 1, 1, False, None, "half_even"),
    (3, 2, 1, 1, True, 0.05, "half_even"),
    (5, 1, 2, 2, False, 0.05, "half_away"),
    (15, 1, 1, 1, True, None, "half_away"),      # depthwise
])
def test_int8_conv_bit_exact(groups, stride, dil, pad, relu, out_scale, rounding):
    rng = np.random.default_rng(7)
    n, c, m = 2, 15, 15                         # batch > 1, channels not a multiple of 8
    x = (rng.standard_normal((n, c, 9, 11)) * 2).astype(np.float32)
    x.flat[:6] = [0.5 * 0.03, 1.5 * 0.03, -2.5 * 0.03, 1000, -1000, 0]  # ties and saturation
    w = rng.standard_normal((m, c // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    s_x = np.float32(0.03)
    params = {"num_output_maps": m, "kernel_shape": [3, 3], "strides": [stride] * 2, "dilations": [dil] * 2,
              "pre_padding": [pad] * 2, "post_padding": [pad] * 2, "groups": groups,
              "post_ops": [{"op": "activation", "type": "RELU"}] if relu else [],
              "int8": {"input_scale": float(s_x), "output_scale": out_scale, "rounding": rounding,
                       "narrow_weights": True}}
    y = _run("Convolution", params, {"kernel": w, "bias": b}, x)

    s_w = (np.abs(w).reshape(m, -1).max(1) / np.float32(127)).astype(np.float32)
    wq = ref_quant(w, s_w.reshape(-1, 1, 1, 1), "half_even", lo=-127)
    xq = ref_quant(x, s_x, rounding)
    acc = ref_conv_int(xq, wq, stride, pad, dil, groups)
    acc += np.rint(b.astype(np.float64) / (np.float64(s_x) * s_w.astype(np.float64))).astype(np.int64)[None, :, None, None]
    comb = (s_x * s_w).astype(np.float32)[None, :, None, None]
    if out_scale is not None and True:
        # requantization straight from the accumulator: round(acc * (s_x s_w / s_y)) in float32
        q = ref_quant(acc.astype(np.float32) * (comb / np.float32(out_scale)), 1.0, rounding)
        if relu:
            q = np.maximum(q, 0)
        want = q.astype(np.float32) * np.float32(out_scale)
    else:
        want = acc.astype(np.float32) * comb
        if relu:
            want = np.maximum(want, 0)
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_array_equal(y, want)


def test_int8_conv_residual_epilogue_requantizes_after_fp32_add():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6, 5, 5)).astype(np.float32)
    r = rng.standard_normal((3, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 6, 1, 1)).astype(np.float32)
    params = {"num_output_maps": 4, "kernel_shape": [1, 1], "groups": 1,
              "post_ops": [{"op": "add", "input": 3}, {"op": "activation", "type": "RELU"}],
              "int8": {"input_scale": 0.02, "output_scale": 0.04}}
    op = Op("Convolution", "l", params, {"kernel": w}, {}, "int8")
    tac = next(t for t in tactics_for("Convolution") if t.name == "int8-im2col-gemm")
    op.weights = tac.prepare(op)
    y = tac.run(op, [x, None, None, r])[0]
    s_w = (np.abs(w).reshape(4, -1).max(1) / np.float32(127)).astype(np.float32)
    acc = np.einsum("nchw,mc->nmhw", ref_quant(x, 0.02), ref_quant(w[:, :, 0, 0], s_w[:, None], lo=-127))
    f = acc.astype(np.float32) * (np.float32(0.02) * s_w)[None, :, None, None]
    f = np.maximum(f + r, 0)
    np.testing.assert_array_equal(y, ref_quant(f, np.float32(0.04)).astype(np.float32) * np.float32(0.04))


@pytest.mark.parametrize("explicit_scale", [False, True])
def test_int8_gemm_bit_exact(explicit_scale):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 3, 37)).astype(np.float32)   # batched rows, K not a multiple of 8
    b = rng.standard_normal((37, 13)).astype(np.float32)
    bias = rng.standard_normal(13).astype(np.float32)
    weights = {"b": b, "bias0": bias}
    s_b = (np.abs(b).max(0) / np.float32(127)).astype(np.float32)
    if explicit_scale:   # Q/DQ weights: the model's own scale, full [-128, 127]
        s_b = (s_b * np.float32(1.01)).astype(np.float32)
        weights["b_scale"] = s_b
    params = {"transpose_a": False, "transpose_b": False,
              "post_ops": [{"op": "bias", "weight": "bias0", "axis": -1}],
              "int8": {"input_scale": 0.025, "output_scale": None, "narrow_weights": not explicit_scale}}
    y = _run("MatrixMultiply", params, weights, a)
    bq = ref_quant(b, s_b[None], lo=-128 if explicit_scale else -127)
    acc = ref_quant(a, 0.025).reshape(-1, 37) @ bq
    acc += np.rint(bias.astype(np.float64) / (np.float64(np.float32(0.025)) * s_b.astype(np.float64))).astype(np.int64)
    want = (acc.astype(np.float32) * (np.float32(0.025) * s_b)).reshape(2, 3, 13)
    np.testing.assert_array_equal(y, want)


def test_int8_accumulation_exact_beyond_float32_mantissa():
    """K = 4608 (a 3x3x512 conv): float32 sums would round; the float64 path must give the int64 answer."""
    from native.cpu.kernels.conv_int8 import exact_int_gemm
    a = np.full((1, 4608), -128, np.int8)
    b = np.full((4608, 2), -128, np.int8)
    b[0, 1] = 1
    got = exact_int_gemm(a, b, 4608)
    assert got[0, 0] == 4608 * 16384 and got[0, 1] == 4607 * 16384 - 128


@pytest.mark.parametrize("weight_rounding,want", [("half_up", [127, 1, 0, 3, -2]), ("half_away", [127, 1, -1, 3, -3]),
                                                  ("half_even", [127, 0, 0, 2, -2])])
def test_int8_weights_round_ties_as_the_build_mode_says(weight_rounding, want):
    """Implicit mode (the builder's own weight scales): ties toward +inf on GPUs and the CPU, away from zero on the
    DLA; Q/DQ weights: ties to even (spec Q-40)."""
    w = np.zeros((1, 5, 1, 1), np.float32)
    w[0, :, 0, 0] = np.array([127, 0.5, -0.5, 2.5, -2.5], np.float32) * np.float32(2 ** -7)   # s_w = 2^-7 exactly
    params = {"num_output_maps": 1, "kernel_shape": [1, 1], "groups": 1,
              "int8": {"input_scale": 0.5, "output_scale": None, "narrow_weights": True,
                       "weight_rounding": weight_rounding}}
    op = Op("Convolution", "l", params, {"kernel": w}, {}, "int8")
    tac = [t for t in tactics_for("Convolution") if "int8" in t.precisions][0]
    packed = tac.prepare(op)
    assert packed["kernel_q"].ravel().tolist() == want
