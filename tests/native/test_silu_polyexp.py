"""The *-polyexp convolution tactics (native/cpu/kernels/conv/silu_polyexp.py): their SiLU by polyexp's exp, one
compiled pass or the numpy passes with the same floats; closer to the exact SiLU than numpy's tanh form; the base
tactic's GEMM and other post-ops unchanged; offered only for float32 layers with a SiLU post-op and numba."""
import numpy as np
import pytest

from native import config
from native.cpu import jit, threads
from native.cpu.kernels.activations import activation, silu_polyexp_inplace
from native.cpu.kernels.conv import nhwc_bands, silu_polyexp, tuning
from native.cpu.device import CpuDevice
from native.tactics import Op, tactics_for
from tests.native.test_activation_passes import _numpy_path   # the numba kernels off for fn()
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(5)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -86.5, -87.5, -90.0, -200.0, 88.0, 100.0, 1e-30, -1e-30,
                    3e38, -3e38], np.float32)


def _values(n=20011):
    return np.concatenate([SPECIAL, (RNG.standard_normal(n) * 8).astype(np.float32)])


def _need_jit():
    pytest.importorskip("numba")
    config.reload()
    if not jit.available():
        pytest.skip("DEBUGKIT_JIT=0")


def _silu(x, double, monkeypatch=None):
    y = x.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        if monkeypatch is None:
            silu_polyexp_inplace(y, double)
        else:
            _numpy_path(monkeypatch, lambda: silu_polyexp_inplace(y, double))
    return y


@pytest.mark.parametrize("double", [False, True])
def test_numpy_passes_are_close_to_the_exact_silu(monkeypatch, double):
    x = _values()
    got = _silu(x, double, monkeypatch)
    v = x.astype(np.float64) * (2 if double else 1)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = v / (1 + np.exp(-v))
    ok = np.isfinite(v) & (np.abs(v) < 80)
    assert np.max(np.abs(got[ok] - ref[ok]) / np.maximum(np.abs(ref[ok]), 1e-37)) < 1e-6
    # numpy's SILU (h + h * tanh(h)) cancels for negative arguments; this form does not
    if not double:
        with np.errstate(over="ignore", invalid="ignore"):
            numpy_silu = activation(x, "SILU")
        neg = ok & (v < -10)
        assert np.max(np.abs(numpy_silu[neg] - ref[neg]) / np.abs(ref[neg])) > 1e-3
    # specials: NaN stays NaN, +inf stays +inf, -inf gives NaN (-inf * 0, as numpy's SILU), below exp's range -0.0
    sp = got[:len(SPECIAL)]
    assert np.isnan(sp[0]) and sp[1] == np.inf and np.isnan(sp[2])
    assert sp[3] == 0 and sp[4] == 0 and (sp[7:9] == 0).all() and np.signbit(sp[7:9]).all()


@pytest.mark.parametrize("double", [False, True])
def test_the_compiled_pass_gives_the_numpy_passes_floats(monkeypatch, double):
    _need_jit()
    assert jit.kernel("silu_polyexp_inplace") is not None
    x = _values()
    want = _silu(x, double, monkeypatch)
    got = _silu(x, double)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    strided = x.reshape(1, -1)[:, ::2].copy()[:, ::1]
    assert np.array_equal(_silu(strided, double), _silu(strided, double, monkeypatch), equal_nan=True)


def _conv_case(k, stride, pad, post, c=6, m=5, hw=9):
    x = RNG.standard_normal((2, c, hw, hw)).astype(np.float32) * 2
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    z = reference_conv(x, w, b, stride, pad, 1, 1)
    want = z / (1 + np.exp(-z))
    inputs, post_ops = [x, None, None], [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}]
    if "add" in post:
        r = RNG.standard_normal(want.shape).astype(np.float32)
        post_ops.append({"op": "add", "input": len(inputs)})
        inputs.append(r)
        want = want + r
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [1, 1], "groups": 1, "post_ops": post_ops}
    return params, {"kernel": w, "bias": b}, inputs, want


def _tactic(name):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


@pytest.mark.parametrize("base", ["im2col-gemm", "1x1-gemm", "nhwc-gemm", "nhwc-gemm-bands"])
@pytest.mark.parametrize("post", [[], ["add"]])
def test_variant_runs_its_base_with_the_polyexp_silu(monkeypatch, base, post):
    _need_jit()
    monkeypatch.setattr(nhwc_bands, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    k, stride, pad = (1, 1, 0) if base == "1x1-gemm" else (3, 2, 1)
    params, weights, inputs, want = _conv_case(k, stride, pad, post)
    t, b = _tactic(base + "-polyexp"), _tactic(base)
    op = Op("Convolution", "c", params, dict(weights))
    assert t.supports(op, [list(inputs[0].shape)]) is None
    poly_params = dict(params, post_ops=[dict(params["post_ops"][0], type="SILU_POLYEXP")] + params["post_ops"][1:])
    device = CpuDevice()
    for ws in (dict(weights), t.prepare(op)):
        layer = Op("Convolution", "c", params, ws)
        fn, full = device.bind(t, layer)    # as the engine calls it (the short style: no adapter)
        got = (fn(layer, inputs, None) if full else fn(layer, inputs))[0]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        # bit for bit the base tactic's code with the SiLU step as SILU_POLYEXP: the same GEMM and other steps
        same = b.run(Op("Convolution", "c", poly_params, ws), inputs)[0]
        assert got.tobytes() == same.tobytes()
        # and not numpy's SiLU: other floats, hence a tactic of its own
        assert got.tobytes() != b.run(Op("Convolution", "c", params, ws), inputs)[0].tobytes()


def test_offered_only_for_float32_silu_layers_with_numba(monkeypatch):
    t = _tactic("1x1-gemm-polyexp")
    relu = Op("Convolution", "c", {"kernel_shape": [1, 1], "post_ops": [
        {"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]})
    assert "no SiLU" in t.supports(relu, [[1, 4, 8, 8]])
    params, weights, _, _ = _conv_case(1, 1, 0, [])
    assert "float32" in t.supports(Op("Convolution", "c", params, weights, precision="float16"), [[1, 6, 9, 9]])
    if jit.available():
        assert "pointwise" in _tactic("nhwc-gemm-polyexp").supports(Op("Convolution", "c", params, weights),
                                                                    [[1, 6, 9, 9]])
    monkeypatch.setattr(jit, "available", lambda: False)
    assert "numba" in t.supports(Op("Convolution", "c", params, weights), [[1, 6, 9, 9]])


def test_the_derived_layer_is_made_once_per_weights():
    params, weights, _, _ = _conv_case(1, 1, 0, [])
    op = Op("Convolution", "c", params, dict(weights))
    d = silu_polyexp.polyexp_op(op)
    assert silu_polyexp.polyexp_op(op) is d and d.weights is op.weights
    assert d.params["post_ops"][0]["type"] == "SILU_POLYEXP" and op.params["post_ops"][0]["type"] == "SILU"
    op.weights = dict(weights)
    assert silu_polyexp.polyexp_op(op) is not d


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("with_bias,with_add", [(True, False), (True, True), (False, True)])
@pytest.mark.parametrize("sel", [(slice(None), slice(None)), (slice(None), slice(1, 4))])
def test_the_one_pass_epilogue_gives_the_numpy_passes_floats(monkeypatch, half, with_bias, with_add, sel):
    """bias (+ the halved GEMM's doubling) + SILU_POLYEXP (+ residual) as bias_steps_inplace's codes 6 / 7: the
    floats of region_epilogue's numpy passes; a region that is not contiguous, or float64, runs those passes."""
    _need_jit()
    from native.cpu.kernels.conv.epilogue import compiled_steps, region_epilogue
    y0 = _values(2 * 5 * 7 * 9 - len(SPECIAL)).reshape(2, 5, 7, 9)
    bias = RNG.standard_normal(5).astype(np.float32) if with_bias else None
    res = RNG.standard_normal(y0.shape).astype(np.float32)
    post = [{"op": "activation", "type": "SILU_POLYEXP", "alpha": 0.0, "beta": 0.0}]
    if with_add:
        post.append({"op": "add", "input": 1})
    op = Op("Convolution", "c", {"post_ops": post})
    rows, _ = compiled_steps(post, half)
    assert rows[0, 0] == (7.0 if half else 6.0)
    with np.errstate(over="ignore", invalid="ignore"):
        got = y0.copy()
        region_epilogue(got, sel, op, [None, res], bias, half)
        want = y0.copy()
        _numpy_path(monkeypatch, lambda: region_epilogue(want, sel, op, [None, res], bias, half))
        got64 = y0.astype(np.float64)
        region_epilogue(got64, sel, op, [None, res.astype(np.float64)], None if bias is None else
                        bias.astype(np.float64), half)   # float64: numpy's SILU passes, not the float32 formula
    assert got.tobytes() == want.tobytes()
    assert np.isfinite(got64).any()
    from native.cpu.kernels.conv.epilogue import _bias_and_steps
    with np.errstate(over="ignore", invalid="ignore"):
        assert _bias_and_steps(y0.copy()[sel], None if bias is None else bias[sel[1]], post, [None, res], sel,
                               half) == (sel[1] == slice(None))
    # non-poly steps under half are not compiled (the base tactics' numpy tanh form)
    assert compiled_steps([{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}], True) is None


@pytest.mark.parametrize("half,post", [(False, ["silu"]), (True, ["silu"]), (False, ["silu", "add"]),
                                       (True, ["silu", "add"]), (False, ["add", "silu"]), (True, ["silu", "silu"])])
@pytest.mark.parametrize("s", [16 * 4 * 2 + 16 * 3 + 5, 64, 15])
def test_bias_steps_silu_rows_in_vectors_give_the_numpy_passes_floats(monkeypatch, half, post, s):
    """bias_steps_inplace's SiLU rows (jit_act._silu_row: whole vectors four at a time, then one at a time, then the
    n % 16 tail element by element; the bias added in the first SiLU's own pass) against region_epilogue's numpy
    passes, bit for bit: specials (NaN, infinities, -0.0, below exp's range) at the start, the end and past the
    vectors of a row, a -0.0 bias, rows of every loop's length."""
    _need_jit()
    from native.cpu.kernels.conv.epilogue import compiled_steps, region_epilogue
    c = 6
    y0 = (RNG.standard_normal((2, c, s)) * 8).astype(np.float32)
    for i, at in enumerate((0, s - 1, (s // 16) * 16, s // 2)):
        y0[i % 2, i % c, at:at + 1] = SPECIAL[i::4][:1]
    y0[1, 2, :min(s, len(SPECIAL))] = SPECIAL[:s]
    y0[0, 3, -min(s, len(SPECIAL)):] = SPECIAL[:s]
    bias = RNG.standard_normal(c).astype(np.float32)
    bias[2] = -0.0
    res = (RNG.standard_normal(y0.shape) * 4).astype(np.float32)
    steps = [{"op": "activation", "type": "SILU_POLYEXP", "alpha": 0.0, "beta": 0.0} if p == "silu" else
             {"op": "add", "input": 1} for p in post]
    op = Op("Convolution", "c", {"post_ops": steps})
    assert compiled_steps(steps, half) is not None
    for b in (bias, None):
        with np.errstate(over="ignore", invalid="ignore"):
            got = y0.copy()
            region_epilogue(got.reshape(2, c, 1, s), (slice(None), slice(None)), op,
                            [None, res.reshape(2, c, 1, s)], b, half)
            want = y0.copy()
            _numpy_path(monkeypatch, lambda: region_epilogue(want.reshape(2, c, 1, s), (slice(None), slice(None)),
                                                             op, [None, res.reshape(2, c, 1, s)], b, half))
        assert got.tobytes() == want.tobytes()
        assert np.isnan(got).any() and (post[-1] != "silu" or (got == 0).any())


@pytest.mark.parametrize("c,m,h,w", [(8, 6, 20, 20), (5, 3, 9, 13), (4, 7, 40, 41)])
def test_winograd_jit_silu_is_the_silu_pass_over_its_plain_output(monkeypatch, c, m, h, w):
    """winograd-f2x3-jit's fused SiLU (jit_winograd.wino_out: a band's four output phases as one `_silu_row` run) is,
    bit for bit, the tactic without it followed by silu_polyexp_inplace's numpy passes; a NaN input included, band
    runs not a multiple of 16 and long enough for the four-vector loop."""
    _need_jit()
    from tests.native.test_winograd_jit import _params
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1 << 60)
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32) * 3
    x[0, 1, 3, 4] = np.nan
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    t = _tactic("winograd-f2x3-jit")
    silu = [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}]
    runs = {}
    for name, post in (("fused", silu), ("plain", [])):
        op = Op("Convolution", "c", _params(m, (1, 1), (1, 1), post), {"kernel": k, "bias": b})
        runs[name] = t.run(Op("Convolution", "c", op.params, t.prepare(op)), [x])[0].copy()
    with np.errstate(over="ignore", invalid="ignore"):
        want = _numpy_path(monkeypatch, lambda: silu_polyexp_inplace(runs["plain"].copy()))
    assert np.isnan(want).any() and not np.isnan(want).all()
    assert runs["fused"].tobytes() == want.tobytes()


@pytest.mark.parametrize("double", [False, True])
def test_every_row_length_gives_the_numpy_passes_floats(monkeypatch, double):
    """Rows of 1..200 elements (jit_act._silu_blocks: four vectors a step, single vectors, the last 16 elements as
    one vector overlapping the ones before where n % 16 is not 0, element by element below 16), specials at the
    ends: the element loop's bits, the numpy passes' floats (-0.0 included), elements past the row untouched."""
    _need_jit()
    import numba
    from native.cpu.jit_act import _silu_poly

    @numba.njit(error_model="numpy")
    def element_loop(x, double):   # the loop before the vectors: the same bits, NaN signs included
        for k in range(x.shape[0]):
            v = x[k]
            x[k] = _silu_poly(v + v if double else v)
    fn = jit.kernel("silu_polyexp_inplace")
    for n in range(1, 201):
        buf = (RNG.standard_normal(n + 8) * 8).astype(np.float32)
        buf[0], buf[n - 1] = SPECIAL[n % len(SPECIAL)], SPECIAL[(3 * n) % len(SPECIAL)]
        want, ref = buf.copy(), buf.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            _numpy_path(monkeypatch, lambda: silu_polyexp_inplace(want[:n], double))
            fn(buf[:n], double)
            element_loop(ref[:n], double)
        assert buf.tobytes() == ref.tobytes(), n    # the element loop's bits (NaN signs too); past n untouched
        # the numpy passes' floats (a NaN's sign bit is not part of that contract: numpy sets it otherwise)
        got, ok = buf.view(np.uint32), ~np.isnan(want)
        assert np.array_equal(np.isnan(buf), ~ok) and np.array_equal(got[ok], want.view(np.uint32)[ok]), n
