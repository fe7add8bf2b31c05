"""DLA numerics and formats: each against an independent numpy statement of the documented model."""
import numpy as np
import pytest

from native.dla.formats import pack, packed_shape, unpack
from native.dla.numerics import activation_dla, dla_weights, fake_quant, softmax_dla, staged_pool

RNG = np.random.default_rng(1)


def test_int8_rounding_ties_away_from_zero():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49], np.float32)
    assert fake_quant(x, 1.0).tolist() == [1, 2, 3, -1, -2, -3, 0]
    assert np.rint(x).tolist() != fake_quant(x, 1.0).tolist()   # the GPU rule (ties to even) differs here
    assert fake_quant(np.array([300.0, -300.0], np.float32), 1.0).tolist() == [127, -128]


def test_weights_fp16_for_conv_fp19_for_other_layers_on_orin():
    w = np.array([1 + 2 ** -11 + 2 ** -13, 70000.0, 1e-6], np.float32)   # FP19: 10-bit mantissa, FP32 exponent
    with np.errstate(over="ignore"):
        conv = dla_weights("Convolution", {"kernel": w}, "float16", "orin")["kernel"]
        assert conv.tolist() == np.float32(w.astype(np.float16)).tolist()     # FP16: 70000 overflows to inf
    scale = dla_weights("Scale", {"scale": w}, "float16", "orin")["scale"]
    assert scale[1] == 70016.0 and scale[0] == np.float32(1 + 2 ** -10) and scale[2] != 0   # FP19 keeps the range
    with np.errstate(over="ignore"):
        xavier = dla_weights("Scale", {"scale": w}, "float16", "xavier")["scale"]
    assert np.isinf(xavier[1])


def test_hard_swish_and_silu_decomposed_with_fp16_between_ops():
    x = RNG.uniform(-6, 6, 1000).astype(np.float32)
    hs = np.float16(x * np.clip(np.float16(x / 6 + 0.5).astype(np.float32), 0, 1)).astype(np.float32)
    np.testing.assert_array_equal(activation_dla(np.float16(x).astype(np.float32), "HARD_SWISH", 0, 0),
                                  np.float16(np.float16(x).astype(np.float32) * np.clip(
                                      np.float16(np.float16(x).astype(np.float32) * np.float32(1 / 6) + 0.5)
                                      .astype(np.float32), 0, 1)).astype(np.float32))
    assert np.abs(hs - x * np.clip(x / 6 + 0.5, 0, 1)).max() < 1e-2
    s = activation_dla(x, "SILU", 0, 0)
    np.testing.assert_array_equal(s, np.float16(x * np.float16(1 / (1 + np.exp(-x))).astype(np.float32)))


def test_softmax_optimized_error_grows_with_axis_length_accurate_does_not():
    def err(n, mode):
        x = RNG.standard_normal((1, n, 2, 1)).astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        return np.abs(softmax_dla(x, 1, mode) / ref - 1).max()
    short, long = err(16, "optimized"), err(1024, "optimized")
    assert long > 4 * short and long < 1024 * 2 ** -11
    assert err(1024, "accurate") < 2 ** -9


def test_staged_global_pooling_equals_one_pool_up_to_fp16():
    x = np.float16(RNG.uniform(0, 1, (1, 4, 56, 56))).astype(np.float32)
    avg = staged_pool(x, "AVERAGE")
    assert avg.shape == (1, 4, 1, 1)
    np.testing.assert_allclose(avg, x.mean(axis=(2, 3), keepdims=True), rtol=2 ** -9)
    np.testing.assert_array_equal(staged_pool(x, "MAX"), x.max(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("fmt,dtype,shape,packed", [
    ("dla_linear", "float16", (1, 3, 5, 7), (1, 3, 5, 32)),     # W padded to 64 bytes = 32 FP16
    ("dla_linear", "int8", (2, 3, 5, 65), (2, 3, 5, 128)),      # 64 INT8
    ("chw16", "float16", (1, 17, 2, 3), (1, 2, 2, 3, 16)),      # C padded to 32 bytes
    ("chw32", "int8", (1, 3, 2, 3), (1, 1, 2, 3, 32)),
    ("dla_hwc4", "float16", (1, 3, 4, 5), (1, 4, 8, 4)),        # C 3 -> 4, W stride 64 B on Orin: 64/4/2 = 8
])
def test_formats_pack_unpack_with_padding(fmt, dtype, shape, packed):
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    a = pack(x, fmt, dtype, scale=1 / 127 if dtype == "int8" else None)
    assert a.shape == packed == packed_shape(shape, fmt, dtype)
    back = unpack(a, fmt, shape, dtype, scale=1 / 127 if dtype == "int8" else None)
    ref = fake_quant(x, 1 / 127) if dtype == "int8" else np.float16(x).astype(np.float32)
    np.testing.assert_array_equal(back, ref)
    assert np.count_nonzero(a) == np.count_nonzero(ref)          # every pad element is zero
    if fmt == "dla_linear":
        np.testing.assert_array_equal(a[..., :shape[-1]].astype(np.float32) if dtype != "int8" else
                                      a[..., :shape[-1]], ref if dtype != "int8" else np.round(ref * 127))
    if fmt == "dla_hwc4":
        assert a[0, 1, 2, 0] == np.float16(x[0, 0, 1, 2]) and a[0, 1, 2, 3] == 0
