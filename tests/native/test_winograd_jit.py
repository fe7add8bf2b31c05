"""winograd-f2x3-jit: Winograd F(2x2, 3x3) with compiled transforms in bands of tile rows over the CPU pool, bias and a
lone RELU / SiLU applied as the output is written: the values of a float64 reference convolution (within Winograd's
rounding), whatever the pool size, band height, padding and odd output sizes; other post-ops after the transform;
not offered without numba, where the numpy winograd-f2x3 runs it instead."""
import numpy as np
import pytest

from native.cpu import jit, threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import tuning, winograd
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(65)


def _tactic(name="winograd-f2x3-jit"):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _needs_jit():
    if not jit.available():
        pytest.skip("DEBUGKIT_JIT=0 (the tactic is not offered; test_not_offered_without_numba covers that case)")


def _params(m, pre, post, post_ops):
    return {"num_output_maps": m, "kernel_shape": [3, 3], "strides": [1, 1], "pre_padding": list(pre),
            "post_padding": list(post), "dilations": [1, 1], "groups": 1, "post_ops": post_ops}


def _reference(x, w, b, pre, post):
    """float64 convolution with asymmetric zero padding."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])])
    return reference_conv(xp, w, b, 1, 0, 1, 1)


@pytest.mark.parametrize("pool,band_bytes", [(1, 1 << 21), (2, 1 << 21), (3, 1), (2, 40000)])
@pytest.mark.parametrize("n,c,m,h,w,pre,post,steps", [
    (1, 8, 6, 12, 12, (1, 1), (1, 1), ["SILU"]),
    (2, 5, 7, 11, 9, (1, 1), (1, 1), ["RELU"]),
    (1, 4, 3, 10, 13, (1, 0), (2, 1), []),
    (2, 6, 4, 7, 8, (0, 2), (0, 0), ["add", "RELU"]),
    (1, 3, 5, 9, 9, (1, 1), (1, 1), ["CLIP"]),
    (1, 16, 8, 6, 6, (1, 1), (1, 1), ["SILU_POLYEXP"]),
], ids=lambda v: str(v))
def test_matches_the_reference(monkeypatch, pool, band_bytes, n, c, m, h, w, pre, post, steps):
    _needs_jit()
    monkeypatch.setattr(winograd, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)       # parallel_for really splits
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "WINOGRAD_BYTES", band_bytes)       # 1: one tile row per band step
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = _reference(x, k, b, pre, post)
    inputs, post_ops = [x, None, None], []
    for p in steps:
        if p == "add":
            r = RNG.standard_normal(want.shape).astype(np.float32)
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(r)
            want = want + r
        elif p == "CLIP":
            post_ops.append({"op": "activation", "type": "CLIP", "alpha": -0.5, "beta": 0.5})
            want = np.clip(want, -0.5, 0.5)
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
            want = activation(want, "SILU" if p == "SILU_POLYEXP" else p)
    params = _params(m, pre, post, post_ops)
    t = _tactic()
    op = Op("Convolution", "c", params, {"kernel": k, "bias": b})
    assert t.supports(op, [list(x.shape)]) is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), inputs)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_split_or_not_within_a_gemm_rounding(monkeypatch):
    """Bands of tile rows give each output its own tile's transforms and GEMM columns: the same values split or not,
    up to BLAS rounding a narrower GEMM's edge columns otherwise (OpenBLAS's Haswell kernels do, by an ulp)."""
    _needs_jit()
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    x = RNG.standard_normal((1, 16, 20, 20)).astype(np.float32)
    k = RNG.standard_normal((12, 16, 3, 3)).astype(np.float32)
    params = _params(12, (1, 1), (1, 1), [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}])
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": k})))
    outs = []
    for pool, band_bytes in ((1, 1 << 30), (2, 1 << 30), (3, 1), (2, 50000)):
        monkeypatch.setattr(winograd, "num_threads", lambda pool=pool: pool)
        monkeypatch.setattr(threads, "num_threads", lambda pool=pool: pool)
        monkeypatch.setattr(tuning, "WINOGRAD_BYTES", band_bytes)
        outs.append(t.run(op, [x])[0])
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-6, atol=1e-6 * np.abs(outs[0]).max())


def test_relu_keeps_nan_and_the_unfused_path_matches(monkeypatch):
    """A NaN input reaches the outputs it touches through the fused RELU (as numpy's clip keeps it), and the fused
    bias + RELU gives the values of the transform followed by the numpy epilogue."""
    _needs_jit()
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    x[0, 1, 3, 3] = np.nan
    k = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    relu = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    t = _tactic()
    got = t.run(Op("Convolution", "c", _params(5, (1, 1), (1, 1), relu), {"kernel": k, "bias": b}), [x])[0]
    assert np.isnan(got[0, :, 2:5, 2:5]).all() and not np.isnan(got[0, :, 6:, 6:]).any()
    plain = t.run(Op("Convolution", "c", _params(5, (1, 1), (1, 1), []), {"kernel": k, "bias": b}), [x])[0]
    want = activation(plain, "RELU")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_not_offered_without_numba_and_the_numpy_winograd_runs_instead(monkeypatch):
    monkeypatch.setattr(winograd, "_kernels", lambda: None)
    t = _tactic()
    params = _params(4, (1, 1), (1, 1), [])
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    k = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    op = Op("Convolution", "c", params, {"kernel": k})
    assert "numba" in t.supports(op, [list(x.shape)])
    want = _tactic("winograd-f2x3").run(op, [x])[0]
    assert t.run(op, [x])[0].tobytes() == want.tobytes()


def test_refuses_what_it_does_not_compute():
    t = _tactic()
    op = Op("Convolution", "c", dict(_params(4, (1, 1), (1, 1), []), strides=[2, 2]), {})
    assert "stride 1" in t.supports(op, [[1, 3, 8, 8]])
    op = Op("Convolution", "c", dict(_params(4, (1, 1), (1, 1), []), kernel_shape=[5, 5]), {})
    assert "3x3" in t.supports(op, [[1, 3, 8, 8]])


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("h,w,pre", [(7, 8, (1, 1)), (6, 5, (0, 2)), (9, 9, (2, 0)), (4, 4, (0, 0))])
def test_phase_planes_are_the_padded_input_split_into_phases(h, w, pre, compiled):
    if compiled:
        _needs_jit()
    x = RNG.standard_normal((2, 3, h, w)).astype(np.float32)
    nh, wh = (h + pre[0] + 3) // 2, (w + pre[1] + 1) // 2
    got = winograd.phase_planes(x, pre, nh, wh, winograd._kernels()[2] if compiled else None)
    padded = np.zeros((2, 3, 2 * nh, 2 * wh), np.float32)
    hh, ww = min(h, 2 * nh - pre[0]), min(w, 2 * wh - pre[1])
    padded[:, :, pre[0]:pre[0] + hh, pre[1]:pre[1] + ww] = x[:, :, :hh, :ww]
    want = padded.reshape(2, 3, nh, 2, wh, 2).transpose(0, 1, 3, 5, 2, 4)
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_residual_add_then_relu_fused_are_the_epilogue_floats():
    """post-ops [add, RELU] applied as the output is written: bit for bit the transform's biased output, + the
    residual, then RELU (the epilogue's order); a residual that only broadcasts runs through the epilogue."""
    _needs_jit()
    x = RNG.standard_normal((2, 6, 10, 9)).astype(np.float32)
    k = RNG.standard_normal((5, 6, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    r = RNG.standard_normal((2, 5, 10, 9)).astype(np.float32)
    t = _tactic()
    steps = [{"op": "add", "input": 3}, {"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    op = Op("Convolution", "c", _params(5, (1, 1), (1, 1), steps), {"kernel": k, "bias": b})
    got = t.run(op, [x, None, None, r])[0]
    plain = t.run(Op("Convolution", "c", _params(5, (1, 1), (1, 1), []), {"kernel": k, "bias": b}), [x])[0]
    assert got.tobytes() == np.maximum(plain + r, np.float32(0)).tobytes()
    rb = RNG.standard_normal((1, 5, 1, 9)).astype(np.float32)
    got = t.run(op, [x, None, None, rb])[0]
    want = np.maximum(_reference(x, k, b, (1, 1), (1, 1)) + rb, 0)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("steps,want", [
    ([], (0, None, True)), (["RELU"], (1, None, True)), (["SILU"], (2, None, True)), (["add"], (0, 3, True)),
    (["add", "RELU"], (1, 3, True)), (["RELU", "add"], (0, None, False)), (["add", "SILU"], (0, None, False)),
    (["CLIP"], (0, None, False)), (["RELU", "RELU"], (0, None, False))])
def test_which_post_ops_the_output_transform_applies(steps, want):
    post = [{"op": "add", "input": 3} if s == "add" else {"op": "activation", "type": s, "alpha": 0.0, "beta": 0.0}
            for s in steps]
    assert winograd.fused_epilogue(Op("Convolution", "c", _params(4, (1, 1), (1, 1), post), {})) == want


def test_the_bands_variant_is_offered_to_multi_band_layers_only_and_matches_the_reference(monkeypatch):
    """winograd-f2x3-jit-bands: offered where winograd-f2x3-jit would cut the layer into bands, cuts smaller ones
    (tuning.WINOGRAD_LARGE_BYTES) and computes the same convolution."""
    _needs_jit()
    t = _tactic("winograd-f2x3-jit-bands")
    params = _params(6, (1, 1), (1, 1), [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}])
    x = RNG.standard_normal((1, 8, 30, 30)).astype(np.float32)
    k = RNG.standard_normal((6, 8, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    op = Op("Convolution", "c", params, {"kernel": k, "bias": b})
    whole = 16 * (8 + 6) * 16 * 4 * 15   # the layer's transformed input and product: 15 tile rows of 16
    monkeypatch.setattr(tuning, "WINOGRAD_BYTES", whole)
    assert "one band" in t.supports(op, [list(x.shape)])
    monkeypatch.setattr(tuning, "WINOGRAD_BYTES", whole - 1)
    monkeypatch.setattr(tuning, "WINOGRAD_LARGE_BYTES", whole // 4)   # 3 tile rows a band
    assert t.supports(op, [list(x.shape)]) is None and "needs the input shape" in t.supports(op, [None])
    got = t.run(Op("Convolution", "c", params, t.prepare(op)), [x])[0]
    want = np.maximum(_reference(x, k, b, (1, 1), (1, 1)), 0)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_kept_plan_follows_the_op():
    """The per-layer plan is rebuilt when the op's post-ops change in place or its weights are replaced."""
    _needs_jit()
    t = _tactic()
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    k = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    op = Op("Convolution", "c", _params(5, (1, 1), (1, 1), []), {"kernel": k, "bias": b})
    op = Op("Convolution", "c", op.params, t.prepare(op))
    plain = t.run(op, [x])[0]
    op.params["post_ops"].append({"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0})
    assert t.run(op, [x])[0].tobytes() == np.maximum(plain, np.float32(0)).tobytes()
    op.weights = t.prepare(Op("Convolution", "c", op.params, {"kernel": -k, "bias": -b}))
    np.testing.assert_allclose(t.run(op, [x])[0], np.maximum(-plain, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool,band_bytes", [(2, 1 << 21), (2, 40000), (3, 1)])
@pytest.mark.parametrize("n,c,m,h,w,pre,post,steps", [
    (1, 8, 6, 12, 12, (1, 1), (1, 1), ["SILU_POLYEXP"]),
    (2, 5, 7, 11, 9, (1, 1), (1, 1), ["RELU"]),
    (1, 4, 3, 10, 13, (1, 0), (2, 1), []),
    (2, 6, 4, 7, 8, (0, 2), (0, 0), ["add", "RELU"]),
    (1, 1, 4, 9, 9, (1, 1), (1, 1), ["RELU"]),      # one input channel: numpy's matmul runs no GEMM, the bands stay
    (1, 3, 1, 9, 9, (1, 1), (1, 1), []),            # one output channel: likewise
], ids=lambda v: str(v))
def test_the_compiled_band_gives_the_python_bands_floats(monkeypatch, pool, band_bytes, n, c, m, h, w, pre, post,
                                                         steps):
    """jit_winograd.wino_band (a band in one call outside the GIL, its GEMMs through numpy's own cblas_sgemm; run
    where the pool splits the layer) and the bands as Python calls of the three kernels and numpy's matmul: the same
    floats, bit for bit, at every pool size and band height."""
    _needs_jit()
    real = winograd._band_kernel()
    if real is None:
        pytest.skip("numpy's OpenBLAS has no 64-bit cblas_sgemm to call")
    calls = []
    monkeypatch.setattr(winograd, "_band_kernel", lambda: ((lambda *a: calls.append(a[7:9]) or real[0](*a)), real[1]))
    monkeypatch.setattr(winograd, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "WINOGRAD_BYTES", band_bytes)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    inputs, post_ops = [x, None, None], []
    for p in steps:
        if p == "add":
            ho, wo = h + pre[0] + post[0] - 2, w + pre[1] + post[1] - 2
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(RNG.standard_normal((n, m, ho, wo)).astype(np.float32))
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
    params = _params(m, pre, post, post_ops)
    t = _tactic()
    ws = t.prepare(Op("Convolution", "c", params, {"kernel": k, "bias": b}))
    outs = {}
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(winograd, "_band_kernel", lambda: None)
        outs[compiled] = t.run(Op("Convolution", "c", params, ws), inputs)[0]
    th = -(-(h + pre[0] + post[0] - 2) // 2)
    assert sorted(calls) == ([] if min(c, m) < 2 else sorted(threads.split(th, -(-pool // n)) * n))
    assert outs[True].tobytes() == outs[False].tobytes()
