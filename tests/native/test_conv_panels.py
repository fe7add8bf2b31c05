"""nhwc-gemm-panels (the convolution's channel-last GEMM by matmul_panels' compiled GEMM on the kernel packed at
build time): the values of a float64 reference for 1x1 and kxk kernels, strides, dilations, pads, output channels
not a multiple of the 32-column panel, bias and post-ops (its polyexp SiLU variant included); the raw-weights run
agrees with the packed one; two threads give one thread's floats; what it refuses, it says why."""
import numpy as np
import pytest

from native.cpu.kernels import conv as C
from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(74)


def _tactic(name="nhwc-gemm-panels"):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _reference(x, w, b, stride, pad, dil):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    z = np.zeros((n, m, ho, wo))
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dil:i * dil + stride * (ho - 1) + 1:stride, j * dil:j * dil + stride * (wo - 1) + 1:stride]
            z += np.einsum("mc,nchw->nmhw", w[:, :, i, j].astype(np.float64), tap)
    return z if b is None else z + b.reshape(1, -1, 1, 1)


def _op(w, b, stride, pad, dil, post=()):
    params = {"kernel_shape": list(w.shape[2:]), "strides": [stride] * 2, "dilations": [dil] * 2,
              "pre_padding": [pad] * 2, "post_padding": [pad] * 2, "num_output_maps": w.shape[0], "groups": 1}
    if post:
        params["post_ops"] = list(post)
    weights = {"kernel": w}
    if b is not None:
        weights["bias"] = b
    return Op("Convolution", "c", params, weights)


@pytest.mark.parametrize("n,c,hw,m,k,stride,pad,dil,bias,act", [
    (1, 16, 20, 32, 1, 1, 0, 1, True, None), (2, 24, 9, 40, 1, 1, 0, 1, False, "RELU"),
    (1, 16, 11, 48, 1, 2, 0, 1, True, None), (1, 8, 13, 33, 3, 1, 1, 1, True, "RELU"),
    (2, 12, 10, 64, 3, 2, 1, 1, True, None), (1, 5, 12, 7, 3, 1, 2, 2, False, None),
    (1, 32, 7, 96, 5, 1, 2, 1, True, "RELU"), (1, 3, 17, 16, 3, 2, 1, 1, True, "RELU")])
def test_panels_conv_matches_the_reference(n, c, hw, m, k, stride, pad, dil, bias, act):
    pytest.importorskip("numba")
    x = RNG.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (RNG.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    post = [{"op": "activation", "type": act}] if act else []
    op = _op(w, b, stride, pad, dil, post)
    t = _tactic()
    assert t.supports(op, LayerContext([list(x.shape)], ["float32"])) is None
    raw = t.run(_op(w, b, stride, pad, dil, post), [x])[0]   # the builder's first run: weights not packed yet
    op.weights = t.prepare(op)
    assert "kernel" not in op.weights and op.weights["kernel_panels"].shape == (-(-m // 32), c * k * k, 32)
    y = t.run(op, [x])[0]
    ref = _reference(x, w, b, stride, pad, dil)
    if act == "RELU":
        ref = np.maximum(ref, 0)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6 * np.sqrt(c * k * k))
    assert np.array_equal(raw, y)


def test_polyexp_variant_silu_and_residual_add():
    pytest.importorskip("numba")
    x = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    w = (RNG.standard_normal((24, 16, 3, 3)) / 12).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    r = RNG.standard_normal((1, 24, 12, 12)).astype(np.float32)
    post = [{"op": "activation", "type": "SILU"}, {"op": "add", "input": 3}]
    z = _reference(x, w, b, 1, 1, 1)
    ref = z / (1 + np.exp(-z)) + r
    for name in ("nhwc-gemm-panels", "nhwc-gemm-panels-polyexp"):
        op = _op(w, b, 1, 1, 1, post)
        op.weights = _tactic(name).prepare(op)
        y = _tactic(name).run(op, [x, None, None, r])[0]
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_two_threads_give_one_threads_floats(monkeypatch):
    pytest.importorskip("numba")
    from native.cpu import threads
    from native.cpu.kernels import matmul_panels
    x = RNG.standard_normal((1, 64, 16, 16)).astype(np.float32)
    w = (RNG.standard_normal((128, 64, 1, 1)) / 8).astype(np.float32)
    op = _op(w, None, 1, 0, 1)
    op.weights = _tactic().prepare(op)
    one = _tactic().run(op, [x])[0]
    calls = []
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "gemm_shares", lambda shares: calls.append(len(shares)) and False)
    monkeypatch.setattr(threads, "parallel_for", lambda fn, items: calls.append(items) or [fn(i) for i in items])
    two = _tactic().run(op, [x])[0]
    assert 256 * 64 * 128 >= matmul_panels.PARALLEL_MIN_MACS and calls[:2] == [2, ((0, 2), (2, 4))]
    assert np.array_equal(one, two)


def test_refusals_say_why():
    w = np.zeros((8, 4, 3, 3), np.float32)
    t = _tactic()
    grouped = _op(w[:, :2], None, 1, 1, 1)
    grouped.params["groups"] = 2
    assert "ungrouped" in t.supports(grouped, LayerContext([[1, 4, 8, 8]], ["float32"]))
    assert "float32" in t.supports(_op(w, None, 1, 1, 1), LayerContext([[1, 4, 8, 8]], ["float16"]))
    dynamic = Op("Convolution", "c", {"kernel_shape": [3, 3], "groups": 1}, {})
    assert "constant" in t.supports(dynamic, LayerContext([[1, 4, 8, 8]], ["float32"]))
    assert "2-D" in t.supports(Op("Convolution", "c", {"kernel_shape": [3], "groups": 1}, {"kernel": w[..., 0]}),
                               None)
    assert C.panel_gemm.NhwcGemmPanels.name == "nhwc-gemm-panels"


@pytest.mark.parametrize("n,c,hw,m,stride,bias,act", [
    (1, 16, 20, 32, 1, True, None), (2, 24, 9, 40, 1, False, "RELU"), (1, 16, 11, 48, 2, True, None),
    (1, 7, 8, 5, 1, True, "RELU"), (3, 64, 6, 130, 1, True, None), (1, 8, 33, 16, 3, False, None)])
def test_pointwise_panels_match_the_reference(n, c, hw, m, stride, bias, act):
    """1x1-gemm-panels: pixels not a multiple of the panel (a zero-padded last input panel), output channels not a
    multiple of the kernel's row block, strides, several samples, the planned output buffer written."""
    pytest.importorskip("numba")
    x = RNG.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (RNG.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    post = [{"op": "activation", "type": act}] if act else []
    op = _op(w, b, stride, 0, 1, post)
    t = _tactic("1x1-gemm-panels")
    assert t.supports(op, LayerContext([list(x.shape)], ["float32"])) is None
    raw = t.run(_op(w, b, stride, 0, 1, post), [x])[0]
    op.weights = t.prepare(op)
    ref = _reference(x, w, b, stride, 0, 1)
    if act == "RELU":
        ref = np.maximum(ref, 0)
    out = np.full(ref.shape, np.nan, np.float32)
    y = t.run(op, [x], [out])[0]
    assert y is out and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6 * np.sqrt(c))
    assert np.array_equal(raw, y)


def test_input_panels_pad_with_zeros():
    from native.cpu.kernels.conv.panel_gemm import input_panels
    x = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    p = input_panels(x)
    assert p.shape == (2, 3, 32) and np.array_equal(p[0], x[:, :32])
    assert np.array_equal(p[1, :, :8], x[:, 32:]) and not p[1, :, 8:].any()


def test_pointwise_panels_refuse_padded_and_grouped():
    t = _tactic("1x1-gemm-panels")
    w = np.zeros((8, 4, 1, 1), np.float32)
    assert "pointwise" in t.supports(_op(np.zeros((8, 4, 3, 3), np.float32), None, 1, 1, 1), None)
    assert "pointwise" in t.supports(_op(w, None, 1, 1, 1), None)
    grouped = _op(w[:, :2], None, 1, 0, 1)
    grouped.params["groups"] = 2
    assert "ungrouped" in t.supports(grouped, None)


def test_panels_need_the_jit_and_the_numpy_tactics_stay(monkeypatch):
    """With the JIT off both refuse (saying why), and the numpy tactics still run the layer."""
    from native import config
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((16, 8, 1, 1)).astype(np.float32)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        for name in ("nhwc-gemm-panels", "1x1-gemm-panels"):
            assert "numba" in _tactic(name).supports(_op(w, None, 1, 0, 1), LayerContext([[1, 8, 6, 6]], ["float32"]))
        op = _op(w, None, 1, 0, 1)
        op.weights = _tactic("1x1-gemm").prepare(op)
        np.testing.assert_allclose(_tactic("1x1-gemm").run(op, [x])[0], _reference(x, w, None, 1, 0, 1),
                                   rtol=1e-5, atol=1e-5)
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
