"""patch-gemm-panels (a convolution whose kernel tiles its input, kernel == stride: its patches by one copy, one panel
GEMM): the values of a float64 reference for square and oblong patches, inputs that do not divide (cropped), several
samples, output channels not a multiple of the 32-column panel, bias, RELU in the kernel and other post-ops after it;
the raw-weights run agrees with the packed one and the planned buffer is written; two threads give one thread's
floats; what it refuses, it says why; the numpy tactics run the layer without numba."""
import numpy as np
import pytest

from native.cpu.kernels.conv import patch_panels
from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(78)


def _tactic(name="patch-gemm-panels"):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _reference(x, w, b):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    ho, wo = h // kh, wd // kw
    t = x[:, :, :ho * kh, :wo * kw].astype(np.float64).reshape(n, c, ho, kh, wo, kw)
    z = np.einsum("mcij,nchiwj->nmhw", w.astype(np.float64), t)
    return z if b is None else z + b.reshape(1, -1, 1, 1)


def _op(w, b, post=(), **extra):
    ks = list(w.shape[2:])
    params = {"kernel_shape": ks, "strides": list(ks), "dilations": [1, 1], "pre_padding": [0, 0],
              "post_padding": [0, 0], "num_output_maps": w.shape[0], "groups": 1}
    params.update(extra)
    if post:
        params["post_ops"] = list(post)
    weights = {"kernel": w}
    if b is not None:
        weights["bias"] = b
    return Op("Convolution", "c", params, weights)


@pytest.mark.parametrize("n,c,h,w,m,k,bias,act", [
    (1, 3, 64, 64, 40, (16, 16), True, None), (2, 3, 18, 22, 33, (4, 4), True, "RELU"),
    (1, 5, 12, 10, 8, (2, 5), False, None), (1, 1, 9, 9, 64, (3, 3), False, "RELU"),
    (3, 8, 8, 8, 7, (2, 2), True, "SIGMOID")])
def test_patch_panels_match_the_reference(n, c, h, w, m, k, bias, act):
    pytest.importorskip("numba")
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (RNG.standard_normal((m, c) + k) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    post = [{"op": "activation", "type": act}] if act else []
    op = _op(wt, b, post)
    t = _tactic()
    assert t.supports(op, LayerContext([list(x.shape)], ["float32"])) is None
    raw = t.run(_op(wt, b, post), [x])[0]   # the builder's first run: weights not packed yet
    op.weights = t.prepare(op)
    assert "kernel" not in op.weights and op.weights["kernel_panels"].shape == (-(-m // 32), c * k[0] * k[1], 32)
    ref = _reference(x, wt, b)
    if act == "RELU":
        ref = np.maximum(ref, 0)
    elif act == "SIGMOID":
        ref = 1 / (1 + np.exp(-ref))
    out = np.full(ref.shape, np.nan, np.float32)
    y = t.run(op, [x], [out])[0]
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert y is out or act == "SIGMOID"      # the common epilogue may hand back its own array
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6 * np.sqrt(c * k[0] * k[1]))
    assert np.array_equal(raw, y)


def test_patches_are_the_im2col_matrix():
    x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(2, 3, 5, 7)
    p = patch_panels.patches(x, 2, 3)
    assert p.shape == (2 * 2 * 2, 3 * 2 * 3)
    # row (n, oy, ox), column (c, i, j) = x[n, c, 2 oy + i, 3 ox + j]
    assert p[1 * 4 + 1 * 2 + 0, 2 * 6 + 1 * 3 + 2] == x[1, 2, 3, 2]


def test_two_threads_give_one_threads_floats(monkeypatch):
    pytest.importorskip("numba")
    from native.cpu import threads
    from native.cpu.kernels import matmul_panels
    x = RNG.standard_normal((1, 3, 128, 128)).astype(np.float32)
    w = (RNG.standard_normal((96, 3, 8, 8)) / 14).astype(np.float32)
    assert 256 * 192 * 96 >= matmul_panels.PARALLEL_MIN_MACS
    op = _op(w, RNG.standard_normal(96).astype(np.float32))
    op.weights = _tactic().prepare(op)
    one = _tactic().run(op, [x])[0]
    calls = []
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "gemm_shares", lambda shares: calls.append(len(shares)) and False)
    monkeypatch.setattr(threads, "parallel_for", lambda fn, items: calls.append(items) or [fn(i) for i in items])
    two = _tactic().run(op, [x])[0]
    assert calls[:2] == [2, ((0, 1), (1, 3))]
    assert np.array_equal(one, two)


def test_refusals_say_why():
    w = np.zeros((8, 3, 4, 4), np.float32)
    t = _tactic()
    shapes = LayerContext([[1, 3, 16, 16]], ["float32"])
    assert "kernel == stride" in t.supports(_op(w, None, strides=[2, 2]), shapes)
    assert "kernel == stride" in t.supports(_op(np.zeros((8, 3, 1, 1), np.float32), None), shapes)
    assert "padding" in t.supports(_op(w, None, pre_padding=[1, 1]), shapes)
    assert "padding" in t.supports(_op(w, None, auto_pad="SAME_UPPER"), shapes)
    assert "dilation" in t.supports(_op(w, None, dilations=[2, 2]), shapes)
    assert "ungrouped" in t.supports(_op(w[:, :1], None, groups=3), shapes)
    assert "float32" in t.supports(_op(w, None), LayerContext([[1, 3, 16, 16]], ["float16"]))
    dynamic = Op("Convolution", "c", {"kernel_shape": [4, 4], "strides": [4, 4], "groups": 1}, {})
    assert "constant" in t.supports(dynamic, shapes)
    assert "2-D" in t.supports(Op("Convolution", "c", {"kernel_shape": [4], "strides": [4]}, {"kernel": w[..., 0]}),
                               None)


def test_without_numba_it_refuses_and_im2col_gemm_runs_the_layer(monkeypatch):
    from native import config
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 3, 4, 4)).astype(np.float32)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert "numba" in _tactic().supports(_op(w, None), LayerContext([[1, 3, 16, 16]], ["float32"]))
        op = _op(w, None)
        op.weights = _tactic("im2col-gemm").prepare(op)
        np.testing.assert_allclose(_tactic("im2col-gemm").run(op, [x])[0], _reference(x, w, None),
                                   rtol=1e-5, atol=1e-5)
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
