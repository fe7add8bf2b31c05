"""native.numerics, bit for bit against small references that share none of its code paths.

The float references round in exact float64 arithmetic (a float32 value divided by a power-of-two quantum is exact,
and np.rint rounds half to even); the INT8 references round element by element with Python's `decimal`.
"""
import decimal

import ml_dtypes
import numpy as np
import pytest

from native import numerics
from native.errors import UsageError


def _ref_round(x, mant_bits, emin, max_finite, saturate):
    """RNE of float32 values to a binary format with `mant_bits` explicit mantissa bits and minimum exponent `emin`."""
    x64 = np.asarray(x, np.float32).astype(np.float64)
    out = np.empty_like(x64)
    for i, v in enumerate(x64.ravel()):
        if np.isnan(v):
            out.flat[i] = np.nan
            continue
        if np.isinf(v):
            out.flat[i] = np.copysign(max_finite, v) if saturate else v
            continue
        if v == 0:
            out.flat[i] = v
            continue
        e = max(int(np.frexp(abs(v))[1]) - 1, emin)
        quantum = 2.0 ** (e - mant_bits)
        r = np.rint(v / quantum) * quantum  # exact: v/quantum has <= 24 significant bits
        if r == 0:
            r = np.copysign(0.0, v)
        if abs(r) > max_finite:
            r = np.copysign(max_finite if saturate else np.inf, v)
        out.flat[i] = r
    return out.astype(np.float32).reshape(np.shape(x))


def _bits_equal(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.shape == b.shape
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b)), "NaN positions differ"
    diff = np.flatnonzero(a.view(np.uint32)[~nan] != b.view(np.uint32)[~nan])
    assert diff.size == 0, f"{diff.size} values differ, first: {a[~nan][diff[:5]]} vs {b[~nan][diff[:5]]}"


def _probe_values(mant_bits, emin, max_finite, rng):
    """Random float32 bit patterns over every exponent, plus exact ties, near-ties, subnormals and overflow edges."""
    random_bits = rng.integers(0, 2 ** 32, size=3001, dtype=np.uint64).astype(np.uint32).view(np.float32)
    random_bits = random_bits[np.isfinite(random_bits)]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, max_finite, -max_finite, 1.0, -1.0, 1e-45, -1e-45]
    ties = []
    for e in range(emin - mant_bits - 2, min(int(np.log2(max_finite)) + 2, 127)):
        quantum = 2.0 ** (e - mant_bits)
        for k in (1, 2, 3, 2 ** mant_bits - 1):
            base = (2 ** mant_bits + k) * quantum if e >= emin else k * 2.0 ** (emin - mant_bits)
            tie = base + quantum / 2 if e >= emin else base + 2.0 ** (emin - mant_bits) / 2
            ties += [tie, -tie, np.nextafter(np.float32(tie), np.float32(0)), np.nextafter(np.float32(tie), np.float32(np.inf))]
    top_ulp = 2.0 ** (int(np.log2(max_finite)) - mant_bits)
    ties += [max_finite + top_ulp / 2, max_finite + top_ulp / 2 * 0.999, max_finite * 1.5]
    with np.errstate(over="ignore"):
        vals = np.concatenate([random_bits, np.array(specials + ties, np.float64).astype(np.float32)])
    return vals.astype(np.float32)


FORMATS = {
    # name: (function, mantissa bits, emin, max finite, saturates)
    "fp16": (numerics.round_fp16, 10, -14, 65504.0, False),
    "bf16": (numerics.round_bf16, 7, -126, numerics.BF16_MAX, False),
    "tf32": (numerics.round_tf32, 10, -126, float(np.finfo(np.float32).max), False),
    "fp8": (numerics.round_fp8_e4m3, 3, -6, 448.0, True),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_float_rounding_bit_exact(fmt):
    fn, mant, emin, top, sat = FORMATS[fmt]
    x = _probe_values(mant, emin, top, np.random.default_rng(8))
    got = fn(x)
    assert got.dtype == np.float32
    _bits_equal(got, _ref_round(x, mant, emin, top, sat))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_float_rounding_odd_shape(fmt):
    fn, mant, emin, top, sat = FORMATS[fmt]
    x = (np.random.default_rng(3).standard_normal((3, 5, 7)) * 40).astype(np.float32)
    got = fn(x)
    assert got.shape == (3, 5, 7)
    _bits_equal(got, _ref_round(x, mant, emin, top, sat))
    _bits_equal(fn(got), got)  # idempotent: rounded values are representable


def test_tf32_is_not_fp16():
    # 1 + 2**-10 fits both; 98304 overflows fp16 only; 2**-30 flushes to zero in fp16 but is a normal tf32
    x = np.array([1 + 2 ** -10, 98304.0, 2 ** -30, 1 + 2 ** -11], np.float32)
    assert numerics.round_tf32(x).tolist() == [1 + 2 ** -10, 98304.0, 2 ** -30, 1.0]
    assert numerics.round_fp16(x)[1] == np.inf and numerics.round_fp16(x)[2] == 0


def test_fp8_saturates_instead_of_nan():
    x = np.array([464.0, 1e6, -np.inf, 0.0009, 17.0, np.nan], np.float32)  # 0.0009 < half the smallest subnormal 2**-9
    got = numerics.round_fp8_e4m3(x)
    assert got[:5].tolist() == [448.0, 448.0, -448.0, 0.0, 16.0]  # 17 ties between 16 and 18 -> even mantissa (16)
    assert np.isnan(got[5])


def test_fp16_from_float64_rounds_once():
    # 1 + 2**-11 + 2**-30 is just above the fp16 tie; via float32 it becomes the tie itself and rounds to even (1.0)
    v = 1 + 2 ** -11 + 2 ** -30
    assert numerics.round_fp16(np.array([v]))[0] == np.float32(1 + 2 ** -10)
    assert numerics.to_storage(np.array([v]), "float16")[0] == np.float16(1 + 2 ** -10)


@pytest.mark.parametrize("dtype,np_dtype,fn", [
    ("float16", np.float16, numerics.round_fp16), ("bfloat16", ml_dtypes.bfloat16, numerics.round_bf16),
    ("fp8", ml_dtypes.float8_e4m3fn, numerics.round_fp8_e4m3), ("float32", np.float32, lambda v: v)])
def test_storage_roundtrip(dtype, np_dtype, fn):
    x = (np.random.default_rng(1).standard_normal((2, 3, 5)) * 300).astype(np.float32)
    stored = numerics.to_storage(x, dtype)
    assert stored.dtype == np.dtype(np_dtype) and stored.shape == x.shape
    back = numerics.from_storage(stored)
    assert back.dtype == np.float32
    _bits_equal(back, fn(x))


def test_storage_rejects_unknown_dtype():
    with pytest.raises(UsageError, match="float8"):
        numerics.to_storage(np.ones(3), "float8")


# ---- INT8 -------------------------------------------------------------------------------------------------------

def _ref_round_int(v, rounding):
    mode = decimal.ROUND_HALF_EVEN if rounding == "half_even" else decimal.ROUND_HALF_UP  # HALF_UP = ties away
    if abs(v) > 1e6:  # far outside int8 either way; decimal's default context cannot hold it as an integer
        return int(np.sign(v)) * 10 ** 6
    return int(decimal.Decimal(float(v)).quantize(decimal.Decimal(1), rounding=mode))


def _ref_quantize(x, scale, axis, rounding, narrow):
    x = np.asarray(x, np.float32)
    out = np.empty(x.shape, np.int8)
    low = -127 if narrow else -128
    for idx in np.ndindex(x.shape):
        s = np.float32(scale if axis is None else scale[idx[axis]])
        v = np.float32(x[idx]) / s
        if np.isnan(v):
            out[idx] = 0
        elif np.isinf(v):
            out[idx] = 127 if v > 0 else low
        else:
            out[idx] = min(max(_ref_round_int(v, rounding), low), 127)
    return out


def _int8_probe(shape, rng, scale):
    x = (rng.standard_normal(shape) * 60).astype(np.float32)
    flat = x.reshape(-1)
    # exact ties x = (k + 0.5) * scale for a per-tensor scale that is a power of two; extremes and specials
    n = min(flat.size, 24)
    flat[:n] = (np.arange(n) - n // 2 + 0.5).astype(np.float32) * np.float32(np.ravel(scale)[0])
    flat[-6:] = [np.inf, -np.inf, np.nan, 1e30, -1e30, -128.6 * np.ravel(scale)[0]]
    return x


@pytest.mark.parametrize("rounding", ["half_even", "half_away"])
@pytest.mark.parametrize("narrow", [False, True])
def test_quantize_per_tensor_bit_exact(rounding, narrow):
    rng = np.random.default_rng(5)
    scale = np.float32(0.5)
    x = _int8_probe((3, 5, 7), rng, scale)
    got = numerics.quantize(x, scale, rounding=rounding, narrow=narrow)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, _ref_quantize(x, scale, None, rounding, narrow))


@pytest.mark.parametrize("rounding", ["half_even", "half_away"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_channel_bit_exact(rounding, axis):
    rng = np.random.default_rng(6)
    shape = (5, 3, 7)
    scale = (rng.random(shape[axis]) * 0.3 + 0.01).astype(np.float32)
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    # ties of each channel's own scale
    moved = np.moveaxis(x, axis, 0)
    for c in range(moved.shape[0]):
        moved[c].flat[:4] = np.float32(np.array([2.5, -2.5, 3.5, -0.5]) * scale[c])
    got = numerics.quantize(x, scale, axis=axis, rounding=rounding)
    np.testing.assert_array_equal(got, _ref_quantize(x, scale, axis if axis >= 0 else axis + 3, rounding, False))


def test_rounding_modes_differ_only_on_ties():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 2.4, -2.6], np.float32)
    assert numerics.quantize(x, 1.0).tolist() == [0, 2, 2, 0, -2, 0, 2, -3]
    assert numerics.quantize(x, 1.0, rounding="half_away").tolist() == [1, 2, 3, -1, -3, 0, 2, -3]
    # ties toward +inf: TensorRT's quantization of the weights it derives scales for (spec Q-40)
    assert numerics.quantize(x, 1.0, rounding="half_up").tolist() == [1, 2, 3, 0, -2, 0, 2, -3]


def test_dequantize_per_channel():
    q = np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 4)
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    got = numerics.dequantize(q, scale, axis=1)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, q.astype(np.float32) * scale[None, :, None])
    np.testing.assert_array_equal(numerics.quantize(got, scale, axis=1), q)


@pytest.mark.parametrize("rounding", ["half_even", "half_away"])
def test_requantize_bit_exact(rounding):
    rng = np.random.default_rng(7)
    acc = rng.integers(-40000, 40000, size=(2, 5, 3), dtype=np.int32)
    acc[0, 0, :] = [100, -100, 300]  # channel 0 (scale 1/8): exact ties 12.5, -12.5, 37.5
    acc[1, 1, 0] = 2 ** 30  # saturates
    scale = np.array([2 ** -3, 2 ** -9, 2 ** -2, 3e-3, 1e-4], np.float32)  # per output channel (axis 1)
    got = numerics.requantize(acc, scale, axis=1, rounding=rounding)
    ref = np.empty(acc.shape, np.int8)
    for idx in np.ndindex(acc.shape):
        v = np.float32(acc[idx]) * scale[idx[1]]
        ref[idx] = min(max(_ref_round_int(v, rounding), -128), 127)
    np.testing.assert_array_equal(got, ref)


def test_quantize_bad_inputs_name_the_problem():
    with pytest.raises(UsageError, match="rounding"):
        numerics.quantize(np.ones(3), 1.0, rounding="up")
    with pytest.raises(UsageError, match="positive"):
        numerics.quantize(np.ones(3), 0.0)
    with pytest.raises(UsageError, match="axis"):
        numerics.quantize(np.ones((2, 3)), np.ones(3), axis=4)
    with pytest.raises(UsageError, match="per-tensor"):
        numerics.quantize(np.ones((2, 3)), np.ones(3))
    with pytest.raises(UsageError, match="integer"):
        numerics.requantize(np.ones(3, np.float32), 1.0)
