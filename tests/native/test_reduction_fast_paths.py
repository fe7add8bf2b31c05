"""Kernels that call numpy's reduction ufuncs directly (LayerNorm's mean, softmax's max / sum, global average
pooling's mean, attention's fully-masked rows) give exactly the floats of the np.mean / np.max / np.sum /
np.nan_to_num forms they replace: checked bit for bit against those forms, and against float64 references."""
import numpy as np
import pytest

from native.cpu.kernels import fused, norm, pooling, reduce
from native.tactics import Op

RNG = np.random.default_rng(7)


def _layernorm_wrapped(x, gamma, beta, axis, eps):
    """The float32 LayerNorm as written with np.prod / ndarray.mean (the form before the fast path)."""
    lead = x.shape[:axis]
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    x2 = x.reshape(lead + (n,))
    mean = x2.mean(axis=-1, keepdims=True)
    d = np.subtract(x2, mean)
    var = np.einsum("...i,...i->...", d, d)[..., None]
    var /= np.float32(n)
    var += np.float32(eps)
    inv = np.sqrt(var, out=var)
    np.divide(np.float32(1), inv, out=inv)
    d *= inv
    y = d.reshape(x.shape)
    y *= gamma
    y += beta
    return y, mean, inv


@pytest.mark.parametrize("shape,axis", [((2, 16, 256), 2), ((1, 197, 192), 2), ((3, 4, 5, 6), 2), ((7, 33), 1)])
def test_layernorm_float32_bits_equal_the_wrapped_form(shape, axis):
    x = (RNG.standard_normal(shape) * 3 + 50).astype(np.float32)
    gamma = RNG.standard_normal(shape[axis:]).astype(np.float32)
    beta = RNG.standard_normal(shape[axis:]).astype(np.float32)
    y, mean, inv = norm._layer_f32(x, [x, gamma, beta], tuple(range(axis, len(shape))), 1e-5)
    ry, rm, ri = _layernorm_wrapped(x, gamma, beta, axis, 1e-5)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_array_equal(y, ry)
    np.testing.assert_array_equal(mean.reshape(-1), rm.reshape(-1))
    np.testing.assert_array_equal(inv.reshape(-1), ri.reshape(-1))
    xf = x.astype(np.float64)
    mf = xf.reshape(shape[:axis] + (-1,)).mean(-1).reshape(shape[:axis] + (1,) * (len(shape) - axis))
    np.testing.assert_allclose(mean.reshape(mf.shape), mf, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", [((2, 4, 16, 16), 3), ((1, 3, 50, 50), 1), ((7, 5), 1)])
def test_softmax_bits_equal_the_wrapped_form(dtype, shape, axis):
    x = (RNG.standard_normal(shape) * 5).astype(dtype)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    want = e / np.sum(e, axis=axis, keepdims=True)
    np.testing.assert_array_equal(reduce._softmax_last(x, axis, False, False), want)
    lse = np.log(np.sum(np.exp(x - np.max(x, axis=axis, keepdims=True)), axis=axis, keepdims=True))
    np.testing.assert_array_equal(reduce._softmax_last(x, axis, True, False),
                                  x - np.max(x, axis=axis, keepdims=True) - lse)
    np.testing.assert_allclose(want.sum(axis=axis), 1.0, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(1, 88, 3, 96), (2, 576, 7, 7), (1, 4, 1, 1)])
def test_global_average_pool_bits_equal_np_mean(dtype, shape):
    x = RNG.standard_normal(shape).astype(dtype)
    y = pooling._global(x, {"type": "AVERAGE"})[0]
    assert y.dtype == x.dtype and y.shape == shape[:2] + (1, 1)
    np.testing.assert_array_equal(y, np.mean(x, axis=(2, 3), keepdims=True, dtype=np.float64).astype(dtype))
    np.testing.assert_allclose(y.astype(np.float64).reshape(-1),
                               x.astype(np.float64).reshape(shape[0] * shape[1], -1).mean(-1), rtol=2e-3, atol=1e-3)


def test_attention_fully_masked_rows_are_zero_and_others_unchanged():
    q, k, v = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[..., 1, :] = -np.inf                        # query row 1 sees no key: softmax gives NaN there
    op = Op("Attention", "att", {"transpose_k": True, "nan_to_zero": True})
    y = fused._attention(op, q, k, v, mask)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[:, :, 1], 0)
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(8)) + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
    ref = np.nan_to_num(p) @ v
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes,keep", [((1, 96, 14, 14), (2, 3), True), ((2, 5, 7), (1,), False),
                                             ((3, 4, 5), (0, 2), True), ((2, 1, 3), (1,), True)])
def test_reduce_mean_bits_equal_np_mean(dtype, shape, axes, keep):
    x = (RNG.standard_normal(shape) * 4 + 1).astype(dtype)
    y = reduce._avg(x, axes, keep)
    want = np.mean(x, axis=axes, keepdims=keep, dtype=dtype)
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_array_equal(y, want)
    np.testing.assert_allclose(y, x.astype(np.float64).mean(axis=axes, keepdims=keep), rtol=1e-5)


@pytest.mark.parametrize("scale", [1e-44, 1e-39, 1e-20, 1.0, 3e4, 1e36])
def test_float32_mean_divides_in_float32_with_np_means_floats(scale):
    """A float32 mean divides by the count in float32 (correctly rounded, as np.mean's float64 division rounded
    back to float32 is): the same bits over subnormal, ordinary and near-overflow sums, odd counts included."""
    for shape, axes in (((1, 1), (1,)), ((3, 129, 7), (1, 2)), ((2, 12345), (1,)), ((5, 97, 3), (0, 2))):
        x = (RNG.standard_normal(shape) * scale).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            y = reduce._avg(x, axes, False)
            want = np.mean(x, axis=axes, dtype=np.float32)
        np.testing.assert_array_equal(y.view(np.uint32), np.asarray(want).view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes,keep", [((1, 1), [1], False), ((2, 3, 4), [2], True), ((2, 3, 4), [0, 2], False),
                                            ((5, 7), [0, 1], True), ((5, 7), [0, 1], False), ((1, 128, 3), [1], True)])
def test_held_mean_gives_np_means_bits(dtype, shape, axes, keep):
    """ReduceMean at a shape seen before runs its held two ufunc calls: np.mean's floats, every axis without
    keepdims too (a 0-d result, which the first path once failed on); axes given as an input are held by identity."""
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    want = np.mean(x, axis=tuple(axes), keepdims=keep, dtype=x.dtype)
    for by_input in (False, True):
        params = {"op": "AVG", "keep_dims": keep} if by_input else {"op": "AVG", "axes": axes, "keep_dims": keep}
        op = Op("Reduce", "r", params)
        ins = [x, np.array(axes, np.int64)] if by_input else [x]
        for _ in range(3):
            got = reduce.reduce(op, ins)[0]
            assert got.dtype == x.dtype and got.shape == np.shape(want)
            assert got.tobytes() == np.asarray(want).tobytes()
        held = op.__dict__.get("_reduce_avg")
        assert (held is not None) == (keep or len(axes) < len(shape))
        if by_input and held is not None:   # another axes array: not the held recipe
            other = np.array(axes[:1], np.int64)
            got = reduce.reduce(op, [x, other])[0]
            assert got.tobytes() == np.mean(x, axis=tuple(axes[:1]), keepdims=keep, dtype=x.dtype).tobytes()
