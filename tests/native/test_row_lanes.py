"""native/cpu/jit_rows.py's vector lanes (`_lane_sums8`, `_lane_max8`: one <8 x float> accumulator in place of 8
scalar chains): the compiled softmax and LayerNorm rows keep polyexp's numpy floats bit for bit, at every row length
(whole blocks and tails), with NaN, infinities and signed zeros, and on rows that are not C-contiguous (the scalar
lanes)."""
import numpy as np
import pytest

from native.cpu import polyexp as px

numba = pytest.importorskip("numba")
from native.cpu import jit_rows  # noqa: E402  (imports numba)

RNG = np.random.default_rng(78)


def _bits(a):
    """The bytes with every NaN as one NaN (numpy's NaN rows and the compiled kernel's np.nan differ in sign, as
    they did before the vector lanes)."""
    return np.where(np.isnan(a), np.float32(np.nan), a).tobytes()


def _rows(m, n):
    x = (RNG.standard_normal((m, n)) * 10.0 ** RNG.integers(-3, 4, (m, n))).astype(np.float32)
    if n > 2:
        x[0, :3] = [-0.0, 0.0, -0.0]
    return x


@pytest.mark.parametrize("n", [1, 5, 7, 8, 9, 15, 16, 17, 37, 64, 197, 1024])
def test_softmax_rows_bitwise(n):
    s = _rows(6, n)
    s[1, ::3] = -np.inf                  # masked entries
    s[2, n // 2] = np.nan                # a NaN: the row becomes NaN
    s[3, -1] = np.inf                    # +inf in the tail or a block: NaN row, as numpy's exp(x - max)
    s[4] = -np.inf                       # fully masked
    want = px.softmax_rows(s.copy())
    got = s.copy()
    jit_rows.softmax_rows(got)
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize("n", [1, 7, 8, 13, 192, 256])
def test_layernorm_rows_bitwise(n):
    x = _rows(5, n)
    g, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    want = px.layernorm_rows(x, g, b, 1e-5, np.empty_like(x))
    y, mean, inv = np.empty_like(x), np.empty(5, np.float32), np.empty(5, np.float32)
    jit_rows.layernorm_rows(x, g, b, np.float32(1e-5), np.float32(n), y, mean, inv)
    for a, w in zip((y, mean, inv), want):
        assert a.tobytes() == w.tobytes()


def test_strided_rows_take_the_scalar_lanes():
    """Rows of a non-contiguous 2-D array (numba's 'A' layout): the same floats as their contiguous copy."""
    wide = _rows(4, 2 * 37)
    x = wide[:, ::2]
    assert not x.flags.c_contiguous
    g, b = np.ones(37, np.float32), np.zeros(37, np.float32)
    outs = []
    for a in (x, np.ascontiguousarray(x)):
        y, mean, inv = np.empty((4, 37), np.float32), np.empty(4, np.float32), np.empty(4, np.float32)
        jit_rows.layernorm_rows(a, g, b, np.float32(1e-5), np.float32(37), y, mean, inv)
        outs.append((y.tobytes(), mean.tobytes(), inv.tobytes()))
    assert outs[0] == outs[1]
    s = wide.copy()
    s[1, 4] = np.nan
    strided, dense = s[:, ::2], np.ascontiguousarray(s[:, ::2])
    jit_rows.softmax_rows(strided)
    jit_rows.softmax_rows(dense)
    assert _bits(strided) == _bits(dense)
    assert np.isnan(dense[1]).all() and np.isfinite(dense[0]).all()


def test_softmax_rows_counts_the_rows_it_sets_to_nan():
    s = _rows(5, 12)
    s[1, 3] = np.nan
    s[2] = -np.inf
    s[4, 0] = np.inf
    assert jit_rows.softmax_rows(s) == 3
    assert np.isnan(s[[1, 2, 4]]).all() and np.isfinite(s[[0, 3]]).all()
    assert jit_rows.softmax_rows(_rows(3, 9)) == 0


@pytest.mark.parametrize("masked_row", [True, False])
def test_attention_nan_to_zero_after_the_counted_softmax(masked_row):
    """polyexp-softmax skips its isnan pass when no row became NaN; a fully masked row still comes out 0."""
    from native.cpu.kernels import fused
    from native.tactics import Op
    q, k, v = (RNG.standard_normal((2, 2, 6, 4)).astype(np.float32) for _ in range(3))
    mask = np.zeros((2, 1, 6, 6), np.float32)
    if masked_row:
        mask[1, 0, 2] = -np.inf
    op = Op("Attention", "a", {"mask_kind": "add", "transpose_k": True, "nan_to_zero": True})
    y = fused.attention_polyexp(op, [q, k, v, mask])[0]
    ref = fused.attention(op, [q, k, v, mask])[0]
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    if masked_row:
        assert not y[1, :, 2].any()
