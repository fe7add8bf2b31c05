"""direct-panels (a stride-1 convolution by a compiled GEMM that reads the NCHW input in place): the values of a
float64 reference for 1x1 / 1x3 / 3x1 / 3x3 / 2x3 / 2x5 / 3x5 kernels, H padding (both sides, top only), W padding
that keeps the width (symmetric and not), less (masks and the wide scratch map, cropped) or none, maps of 1 to
1,000+ pixels (edge panels, a panel cut short), output channels not a multiple of the 8-channel block, several
samples, bias, LeakyRelu + clip / RELU in the kernel and other post-ops after it; the raw-weights run agrees with the
packed one and the planned buffer is written; the two halves of the kernel-share path give the one-call path's
floats; what it refuses, it says why; without numba it refuses."""
import numpy as np
import pytest

from native.cpu.kernels.conv import direct_panels
from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(80)
LEAKY_CLIP = ({"op": "activation", "type": "LEAKY_RELU", "alpha": 0.20000000298023224, "beta": 0.0},
              {"op": "activation", "type": "CLIP", "alpha": -0.4000000059604645, "beta": np.inf})


def _tactic(name="direct-panels"):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _reference(x, w, b, pl, pr, pt=0, pb=0):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ho, wo = h + pt + pb - kh + 1, wd + pl + pr - kw + 1
    z = np.zeros((n, m, ho, wo))
    for i in range(kh):
        for j in range(kw):
            z += np.einsum("mc,nchw->nmhw", w[:, :, i, j].astype(np.float64), xp[:, :, i:i + ho, j:j + wo])
    return z if b is None else z + b.reshape(1, -1, 1, 1)


def _op(w, b, post=(), pads=(0, 0), hpads=(0, 0), **extra):
    params = {"kernel_shape": list(w.shape[2:]), "strides": [1, 1], "dilations": [1, 1],
              "pre_padding": [hpads[0], pads[0]], "post_padding": [hpads[1], pads[1]], "num_output_maps": w.shape[0],
              "groups": 1}
    params.update(extra)
    if post:
        params["post_ops"] = [dict(st) for st in post]
    weights = {"kernel": w}
    if b is not None:
        weights["bias"] = b
    return Op("Convolution", "c", params, weights)


def _post(ref, post):
    for st in post:
        if st["type"] == "LEAKY_RELU":
            ref = np.where(ref < 0, ref * np.float32(st["alpha"]), ref)
        elif st["type"] == "CLIP":
            ref = np.clip(ref, st["alpha"], st["beta"])
        elif st["type"] == "RELU":
            ref = np.maximum(ref, 0)
        else:
            ref = 1 / (1 + np.exp(-ref))
    return ref


@pytest.mark.parametrize("n,c,h,w,m,k,pads,bias,post", [
    (1, 24, 20, 32, 24, (1, 3), (1, 1), True, LEAKY_CLIP),       # oww_embedding's 1x3 layers
    (1, 48, 18, 16, 48, (3, 1), (0, 0), True, LEAKY_CLIP),       # ... and its 3x1 layers
    (2, 5, 9, 7, 13, (3, 1), (0, 0), True, ({"op": "activation", "type": "RELU"},)),
    (1, 1, 12, 10, 24, (3, 3), (0, 0), False, ({"op": "activation", "type": "RELU"},)),   # wide scratch map
    (1, 3, 6, 5, 9, (2, 5), (2, 2), True, ()),
    (1, 4, 5, 3, 16, (2, 5), (1, 3), True, ({"op": "activation", "type": "SIGMOID"},)),  # the common epilogue
    (1, 96, 3, 1, 96, (3, 1), (0, 0), False, ()),                # one pixel: one panel, cut short
    (1, 7, 40, 33, 8, (1, 3), (1, 1), True, LEAKY_CLIP),         # panels across rows, edge panels at both ends
    (1, 16, 30, 28, 16, (3, 3), (1, 1, 1, 1), True, ({"op": "activation", "type": "RELU"},)),   # "same" 3x3
    (2, 3, 7, 6, 10, (2, 3), (1, 1, 1, 0), False, ()),          # H padded at the top only
    (1, 4, 11, 9, 12, (3, 5), (1, 1, 2, 2), True, LEAKY_CLIP),   # W pads under kw - 1: masks and the crop
    (1, 64, 12, 12, 40, (1, 1), (0, 0), True, ())])              # pointwise
def test_direct_panels_match_the_reference(n, c, h, w, m, k, pads, bias, post):
    pads, hpads = pads[:2], pads[2:] or (0, 0)
    pytest.importorskip("numba")
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (RNG.standard_normal((m, c) + k) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    op = _op(wt, b, post, pads, hpads)
    t = _tactic()
    assert t.supports(op, LayerContext([list(x.shape)], ["float32"])) is None
    raw = t.run(_op(wt, b, post, pads, hpads), [x])[0]   # the builder's first run: weights not packed yet
    op.weights = t.prepare(op)
    assert "kernel" not in op.weights and op.weights["kernel_blocks"].shape == (-(-m // 8), c * k[0] * k[1], 8)
    ref = _post(_reference(x, wt, b, *pads, *hpads), post)
    out = np.full(ref.shape, np.nan, np.float32)
    y = t.run(op, [x], [out])[0]
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert y is out or any(st["type"] == "SIGMOID" for st in post)   # the common epilogue may hand back its own
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6 * np.sqrt(c * k[0] * k[1]))
    assert np.array_equal(raw, y)


def test_in_kernel_epilogue_is_the_numpy_passes_floats():
    """bias, LeakyRelu, clip in the kernel: bit for bit the floats of adding the bias and running the steps as the
    numpy passes do on the kernel's own (unbiased) product."""
    pytest.importorskip("numba")
    x = RNG.standard_normal((1, 16, 10, 8)).astype(np.float32)
    w = RNG.standard_normal((24, 16, 1, 3)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    plain = _op(w, None, (), (1, 1))
    plain.weights = _tactic().prepare(plain)
    z = _tactic().run(plain, [x])[0]
    fused = _op(w, b, LEAKY_CLIP, (1, 1))
    fused.weights = _tactic().prepare(fused)
    y = _tactic().run(fused, [x])[0]
    v = z + b.reshape(1, -1, 1, 1)
    v = np.where(v < 0, v * np.float32(0.2), v)
    v = np.maximum(v, np.float32(-0.4))
    assert np.array_equal(y, v)


@pytest.mark.parametrize("shape,m,k,pads,by_channels", [
    ((2, 24, 30, 16), 40, (3, 1), (0, 0), 0),     # cut by panels (the input outweighs the weights)
    ((1, 96, 10, 2), 96, (1, 3), (1, 1), 1),      # cut by output channels (a small map, one panel)
    ((1, 8, 3, 3), 20, (1, 3), (1, 1), 1)])       # channels, not a multiple of 8 (a cut short block)
def test_kernel_share_halves_give_the_one_call_floats(monkeypatch, shape, m, k, pads, by_channels):
    pytest.importorskip("numba")
    from native.cpu import jit_conv_panels, threads
    if not threads.sgemm_address():
        pytest.skip("kernel shares need numpy's 64-bit-integer cblas_sgemm")
    x = RNG.standard_normal(shape).astype(np.float32)
    w = (RNG.standard_normal((m, shape[1]) + k) / 8).astype(np.float32)
    op = _op(w, RNG.standard_normal(m).astype(np.float32), LEAKY_CLIP, pads)
    op.weights = _tactic().prepare(op)
    monkeypatch.setattr(direct_panels, "num_threads", lambda: 1)
    one = _tactic().run(op, [x])[0]
    calls = []
    real = direct_panels.kernel_shares
    monkeypatch.setattr(direct_panels, "num_threads", lambda: 2)
    monkeypatch.setattr(direct_panels, "kernel_shares", lambda *a: calls.append(a[4]) or real(*a))
    two = _tactic().run(op, [x])[0]
    assert calls == list(range(shape[0]))
    (args, *_), = [v[0] for v in op.__dict__["_direct_panels"].values()]
    assert args[jit_conv_panels.BY_CHANNELS] == by_channels
    assert np.array_equal(one, two)
    np.testing.assert_allclose(two, _post(_reference(x, w, op.weights["bias"], *pads), LEAKY_CLIP), rtol=2e-5,
                               atol=1e-5)


def test_in_kernel_takes_leaky_then_clip_only():
    leaky, relu = LEAKY_CLIP[0], {"op": "activation", "type": "RELU"}
    assert direct_panels.in_kernel([]) == (1.0, -np.inf, np.inf)
    assert direct_panels.in_kernel([relu]) == (1.0, 0.0, np.inf)
    assert direct_panels.in_kernel(list(LEAKY_CLIP)) == (leaky["alpha"], LEAKY_CLIP[1]["alpha"], np.inf)
    assert direct_panels.in_kernel([LEAKY_CLIP[1], leaky]) is None      # clip first: the common epilogue
    assert direct_panels.in_kernel([{"op": "activation", "type": "SIGMOID"}]) is None
    assert direct_panels.in_kernel([{"op": "add", "input": 1}]) is None


def test_refusals_say_why():
    w = np.zeros((8, 3, 1, 3), np.float32)
    t = _tactic()
    shapes = LayerContext([[1, 3, 16, 16]], ["float32"])
    assert "stride" in t.supports(_op(w, None, strides=[1, 2]), shapes)
    assert "stride" in t.supports(_op(w, None, dilations=[2, 2]), shapes)
    assert "negative" in t.supports(_op(np.zeros((8, 3, 3, 1), np.float32), None, pre_padding=[-1, 0]), shapes)
    assert "kw - 1" in t.supports(_op(w, None, (), (2, 1)), shapes)
    assert "explicit pads" in t.supports(_op(w, None, auto_pad="SAME_UPPER"), shapes)
    assert "ungrouped" in t.supports(_op(w[:, :1], None, groups=3), shapes)
    assert "float32" in t.supports(_op(w, None), LayerContext([[1, 3, 16, 16]], ["float16"]))
    dynamic = Op("Convolution", "c", {"kernel_shape": [1, 3], "strides": [1, 1], "groups": 1}, {})
    assert "constant" in t.supports(dynamic, shapes)
    assert "2-D" in t.supports(Op("Convolution", "c", {"kernel_shape": [3], "strides": [1]}, {"kernel": w[:, :, 0]}),
                               None)


def test_without_numba_it_refuses_and_a_packed_layer_runs_by_numpy(monkeypatch):
    """Without numba (or DEBUGKIT_JIT=0) the builder never picks it; a plan that did, loaded there, runs the layer by
    im2col-gemm on the unpacked kernel."""
    from native import config
    x = RNG.standard_normal((1, 3, 9, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 3, 1, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    op = _op(w, b, LEAKY_CLIP, (1, 1))
    op.weights = _tactic().prepare(op)
    assert np.array_equal(direct_panels.unpack(op.weights), w)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert "numba" in _tactic().supports(_op(w, None, (), (1, 1)), LayerContext([[1, 3, 16, 16]], ["float32"]))
        y = _tactic().run(op, [x])[0]
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    np.testing.assert_allclose(y, _post(_reference(x, w, b, 1, 1), LEAKY_CLIP), rtol=2e-5, atol=1e-5)
