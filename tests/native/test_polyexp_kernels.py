"""native/cpu/polyexp.py: the polynomial exp and the row kernels built on it (bias + GELU, softmax, LayerNorm; run by
native/cpu/kernels/rows.py), their
tactics (packed-gemm[-t]-polyexp, Attention polyexp-softmax, Normalization lane-stats): within their error bounds of
float64 references, different computations from the numpy tactics, and with the numba extra bit for bit the floats
of the numpy passes."""
import math

import numpy as np
import pytest

from native import config
from native.cpu import jit
from native.cpu import polyexp as px
from native.cpu.kernels import rows
from native.tactics import LayerContext, Op, tactics_for

RNG = np.random.default_rng(11)
_erf = np.vectorize(math.erf)


@pytest.fixture(params=["numpy", "jit"])
def path(request, monkeypatch):
    """Each kernel once through its numpy passes (DEBUGKIT_JIT=0) and once compiled (needs numba)."""
    if request.param == "jit":
        pytest.importorskip("numba")
    monkeypatch.setenv("DEBUGKIT_JIT", "0" if request.param == "numpy" else "1")
    config.reload()
    yield request.param
    monkeypatch.delenv("DEBUGKIT_JIT")
    config.reload()


def _gelu_ref(x, kind):
    x = x.astype(np.float64)
    if kind == "GELU_TANH":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def test_exp_relative_error_and_range():
    v = np.concatenate([np.linspace(-87, 88, 200001), [0.0, -1e-30, 1e-30]]).astype(np.float32)
    e = px.exp(v)
    ref = np.exp(v.astype(np.float64))
    assert np.max(np.abs(e - ref) / ref) < 4e-7
    assert e[-3] == 1.0
    assert np.all(px.exp(np.array([-200, 200], np.float32)) == px.exp(np.array([px.EXP_LO, px.EXP_HI])))


@pytest.mark.parametrize("kind", px.ACTIVATIONS)
def test_gelu_rows_within_bound_and_not_numpys(path, kind):
    from native.cpu.kernels.activations import activation
    x = (RNG.standard_normal((7, 300)) * 3).astype(np.float32)
    x[0, :5] = [0.0, -0.0, 9.0, -9.0, 30.0]
    bias = RNG.standard_normal(300).astype(np.float32)
    y = rows.gelu_rows(x.copy(), bias, kind)
    ref = _gelu_ref(x + bias, kind)
    assert np.max(np.abs(y - ref) / np.maximum(1.0, np.abs(ref))) < 1e-6
    assert rows.gelu_rows(x[:1, :2].copy(), None, kind).tolist() == [[0.0, 0.0]]
    assert not np.array_equal(y, activation(x + bias, kind))   # another exp: another computation


def test_softmax_rows(path):
    s = (RNG.standard_normal((6, 77)) * 4).astype(np.float32)
    s[1, ::3] = -np.inf              # masked entries
    s[2, :] = -np.inf                # a fully masked row
    s[3, 5] = np.nan
    y = rows.softmax_rows(s.copy())
    for i in (0, 1, 4, 5):
        r = np.exp(s[i].astype(np.float64) - s[i].max())
        r /= r.sum()
        assert np.max(np.abs(y[i] - r)) < 1e-6 * r.max() + 1e-12
    assert np.all(y[1, ::3] == 0)
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()


def test_layernorm_rows(path):
    x = (RNG.standard_normal((9, 192)) * 2 + 5).astype(np.float32)
    g, b = RNG.standard_normal(192).astype(np.float32), RNG.standard_normal(192).astype(np.float32)
    y, mean, inv = rows.layernorm_rows(x, g, b, 1e-5, np.empty_like(x))
    xd = x.astype(np.float64)
    mu = xd.mean(-1)
    iv = 1 / np.sqrt(xd.var(-1) + 1e-5)
    ref = (xd - mu[:, None]) * iv[:, None] * g + b
    assert np.max(np.abs(y - ref)) < 1e-5
    assert np.max(np.abs(mean - mu)) < 1e-5 and np.max(np.abs(inv - iv) / iv) < 1e-6


def test_lane_sum_order():
    """Lane k holds elements k, k+8, ... summed in order; lanes added pairwise; the tail added last, in order."""
    x = (RNG.standard_normal((3, 37)) * 10.0 ** RNG.integers(-3, 4, (3, 37))).astype(np.float32)
    want = []
    for row in x:
        lanes = [np.float32(0)] * 8
        for j in range(32):
            lanes[j % 8] = np.float32(lanes[j % 8] + row[j])
        s = np.float32(np.float32(lanes[0] + lanes[1]) + np.float32(lanes[2] + lanes[3]))
        s = np.float32(s + np.float32(np.float32(lanes[4] + lanes[5]) + np.float32(lanes[6] + lanes[7])))
        for j in range(32, 37):
            s = np.float32(s + row[j])
        want.append(s)
    assert px.lane_sum(x).tobytes() == np.array(want, np.float32).tobytes()


@pytest.mark.parametrize("shape", [(32, 1024), (5, 13), (197, 192)])
def test_jit_row_kernels_are_bit_identical_to_numpy(monkeypatch, shape):
    pytest.importorskip("numba")
    y = (RNG.standard_normal(shape) * 3).astype(np.float32)
    bias, g = RNG.standard_normal(shape[1]).astype(np.float32), RNG.standard_normal(shape[1]).astype(np.float32)
    y[0, :2] = [-0.0, 0.0]
    y[1, -1] = -0.0                  # in a row's tail too (numpy's vector loops and their scalar tails)
    s = y.copy()
    s[0, ::2] = -np.inf

    def results():
        out = [rows.gelu_rows(y.copy(), bias, k) for k in px.ACTIVATIONS]
        out += [rows.gelu_rows(y.copy(), None, "GELU_ERF"), rows.softmax_rows(s.copy())]
        out += list(rows.layernorm_rows(y, g, bias, 1e-5, np.empty_like(y)))
        return out
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    assert jit.kernel("gelu_rows") is None
    plain = results()
    monkeypatch.setenv("DEBUGKIT_JIT", "1")
    config.reload()
    assert jit.kernel("gelu_rows") is not None
    compiled = results()
    config.reload()
    for a, b in zip(plain, compiled):
        assert a.tobytes() == b.tobytes()


# the tactics ---------------------------------------------------------------------------------------------------

def _tactic(kind, name):
    return next(t for t in tactics_for(kind) if t.name == name)


@pytest.mark.parametrize("name", ["packed-gemm-polyexp", "packed-gemm-t-polyexp", "packed-gemm-cols-polyexp"])
@pytest.mark.parametrize("kind", px.ACTIVATIONS)
def test_gemm_polyexp_tactics(path, name, kind):
    a = RNG.standard_normal((2, 40, 256)).astype(np.float32)
    w = (RNG.standard_normal((256, 96)) / 16).astype(np.float32)      # 2M MACs: the column split runs
    bias = RNG.standard_normal(96).astype(np.float32)
    post = [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": kind}]
    op = Op("MatrixMultiply", "m", {"post_ops": post}, {"b": w, "bias": bias})
    t = _tactic("MatrixMultiply", name)
    ctx = LayerContext([list(a.shape)], ["float32"])
    assert t.supports(op, ctx) is None
    op.weights = t.prepare(op)
    y = t.run(op, [a])[0]
    ref = _gelu_ref(a.astype(np.float64) @ w + bias, kind)
    assert y.shape == (2, 40, 96) and np.max(np.abs(y - ref)) < 1e-5
    relu = Op("MatrixMultiply", "m", {"post_ops": [{"op": "activation", "type": "RELU"}]}, {"b": w})
    assert "GELU" in t.supports(relu, ctx)
    assert t.supports(Op("MatrixMultiply", "m", {}, {"b": w}), ctx) is not None
    assert "float32" in t.supports(op, LayerContext([list(a.shape)], ["float16"]))


def test_attention_polyexp_softmax_matches_numpy_attention(path):
    b, h, s, d = 2, 3, 20, 16
    q, k, v = (RNG.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
    mask = np.zeros((b, 1, s, s), np.float32)
    mask[0, :, :, 15:] = -np.inf
    mask[1, :, 4, :] = -np.inf       # a fully masked query row: 0 with nan_to_zero
    params = {"scale": 0.25, "mask_kind": "add", "transpose_k": True, "nan_to_zero": True}
    ours = _tactic("Attention", "polyexp-softmax").run(Op("Attention", "a", dict(params)), [q, k, v, mask])[0]
    base = _tactic("Attention", "numpy").run(Op("Attention", "a", dict(params)), [q, k, v, mask])[0]
    assert np.max(np.abs(ours - base)) < 1e-5
    assert np.all(ours[1, :, 4] == 0)
    assert not np.array_equal(ours, base)


def test_layernorm_lane_stats_tactic(path):
    x = (RNG.standard_normal((2, 7, 48)) * 3).astype(np.float32)
    g, b = RNG.standard_normal(48).astype(np.float32), RNG.standard_normal(48).astype(np.float32)
    params = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5, "stash_type": 1}
    ours = _tactic("Normalization", "lane-stats").run(Op("Normalization", "n", dict(params)), [x, g, b])
    base = _tactic("Normalization", "float64-stats").run(Op("Normalization", "n", dict(params)), [x, g, b])
    assert [o.shape for o in ours] == [o.shape for o in base] == [(2, 7, 48), (2, 7, 1), (2, 7, 1)]
    for o, r in zip(ours, base):
        assert np.max(np.abs(o - r)) < 2e-5
    t = _tactic("Normalization", "lane-stats")
    assert t.supports(Op("Normalization", "n", {"mode": "BATCH"}), [[1, 4]]) is not None
    assert t.supports(Op("Normalization", "n", dict(params)), LayerContext([[2, 48]], ["float16"])) is not None
    two_axes = dict(params, axes=[1])    # normalize over the last two axes: rows of 7 * 48
    ours = _tactic("Normalization", "lane-stats").run(Op("Normalization", "n", two_axes), [x, g, b])
    base = _tactic("Normalization", "float64-stats").run(Op("Normalization", "n", two_axes), [x, g, b])
    assert ours[1].shape == (2, 1, 1) and np.max(np.abs(ours[0] - base[0])) < 2e-5


def test_packed_gemm_cols_epilogue_and_floats_independent_of_threads(monkeypatch):
    """The column cut is fixed: the pool's threads or the caller alone give the same floats (with BLAS on one
    thread in both, as process tuning sets it: OpenBLAS's own threading changes its floats)."""
    from native.cpu import threads
    from native.cpu.kernels import matmul
    a = RNG.standard_normal((3, 16, 512)).astype(np.float32)
    w = (RNG.standard_normal((512, 200)) / 20).astype(np.float32)
    bias = RNG.standard_normal(200).astype(np.float32)
    post = [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": "LEAKY_RELU", "alpha": 0.1}]
    op = Op("MatrixMultiply", "m", {"post_ops": post}, {"b": w, "bias": bias})
    t = _tactic("MatrixMultiply", "packed-gemm-cols")
    assert t.supports(op, LayerContext([list(a.shape)], ["float32"])) is None
    residual = Op("MatrixMultiply", "m", {"post_ops": [{"op": "add", "input": 1}]}, {"b": w})
    assert "bias / activation" in t.supports(residual, [list(a.shape), list(a.shape)])
    op.weights = t.prepare(op)
    assert a.shape[1] * a.shape[0] * 512 * 200 >= matmul.COLUMNS_MIN_MACS
    tuned = threads.tune()
    try:
        pooled = t.run(op, [a])[0]
        monkeypatch.setattr(threads, "num_threads", lambda: 1)
        one = t.run(op, [a])[0]
    finally:
        if tuned:
            threads.untune()
    z = a.astype(np.float64) @ w + bias
    assert np.max(np.abs(one - np.where(z > 0, z, 0.1 * z))) < 1e-4
    assert one.tobytes() == pooled.tobytes()
