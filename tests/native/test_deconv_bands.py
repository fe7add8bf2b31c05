"""The gemm-col2im-bands tactic (native/cpu/kernels/conv/deconv.py: kernel == stride, batch 1, in bands of input rows
over the pool): a float64 reference's values, gemm-col2im's within rounding, on one thread and two, NaN / inf as
gemm-col2im carries them, and what it declines."""
import numpy as np
import pytest

from native import config
from native.cpu import threads
from native.cpu.kernels.conv import deconv, tuning
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(5)
CASES = [  # (C, M, H, W, kernel == stride, post-op activations, bias): each band's GEMM above BAND_MIN_MACS
    (24, 24, 64, 160, (2, 2), ["RELU"], True),       # ppocr_v4_det's 24->24 upsampler, fewer rows
    (24, 1, 480, 200, (2, 2), ["SIGMOID"], True),    # its 24->1 probability map
    (48, 5, 90, 97, (3, 2), [], False),
    (64, 6, 80, 111, (1, 3), ["CLIP", "RELU"], True),
    (3, 5, 7, 9, (2, 2), ["RELU"], True),            # below the band size: one band
]


def _op(c, m, ks, acts, bias):
    w = RNG.standard_normal((c, m) + ks).astype(np.float32) * 0.3
    weights = {"kernel": w}
    if bias:
        weights["bias"] = RNG.standard_normal(m).astype(np.float32)
    steps = [{"op": "activation", "type": a, "alpha": -0.5 if a == "CLIP" else 0.0,
              "beta": 0.75 if a == "CLIP" else 0.0} for a in acts]
    params = {"num_output_maps": m, "kernel_shape": list(ks), "strides": list(ks), "pre_padding": [0, 0],
              "post_padding": [0, 0], "dilations": [1, 1], "groups": 1, "output_padding": [0, 0],
              "post_ops": steps}
    return Op("Deconvolution", "d", params, weights)


def _reference(x, op):
    """Transposed convolution with kernel == stride in float64: each input pixel's kernel tile, + bias, then the
    activations."""
    w = op.weights["kernel"].astype(np.float64)
    c, m, kh, kw = w.shape
    _, _, h, wd = x.shape
    t = np.einsum("chw,cmij->mhiwj", x[0].astype(np.float64), w).reshape(1, m, h * kh, wd * kw)
    if "bias" in op.weights:
        t = t + op.weights["bias"].reshape(1, -1, 1, 1)
    for st in op.params["post_ops"]:
        if st["type"] == "RELU":
            t = np.maximum(t, 0)
        elif st["type"] == "CLIP":
            t = np.clip(t, st["alpha"], st["beta"])
        else:
            t = 1 / (1 + np.exp(-t))
    return t


def _tactic(name):
    return next(t for t in tactics_for("Deconvolution", "cpu") if t.name == name)


def _run(monkeypatch, pool, cols_bytes, op, x):
    """(y, the band ranges parallel_for got) from gemm-col2im-bands on `pool` threads."""
    monkeypatch.setattr(tuning, "COLS_BYTES", cols_bytes)
    monkeypatch.setenv("DEBUGKIT_THREADS", str(pool))
    config.reload()
    changed = threads.tune()
    bands = []
    real = deconv.parallel_for
    monkeypatch.setattr(deconv, "parallel_for", lambda fn, items: bands.append(list(items)) or real(fn, bands[-1]))
    try:
        with np.errstate(all="ignore"):
            return _tactic("gemm-col2im-bands").run(op, [x])[0], bands
    finally:
        monkeypatch.setattr(deconv, "parallel_for", real)
        if changed:
            threads.untune()
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()


@pytest.mark.parametrize("cols_bytes", [1 << 10, 1 << 20])
@pytest.mark.parametrize("case", CASES)
def test_bands_match_the_reference_and_gemm_col2im(monkeypatch, cols_bytes, case):
    c, m, h, w, ks, acts, bias = case
    op = _op(c, m, ks, acts, bias)
    assert _tactic("gemm-col2im-bands").supports(op, [[1, c, h, w]]) is None
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32)
    one, _ = _run(monkeypatch, 1, cols_bytes, op, x)
    two, bands = _run(monkeypatch, 2, cols_bytes, op, x)
    assert one.shape == (1, m, h * ks[0], w * ks[1]) and one.dtype == np.float32
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-5)   # (bytes may differ: OpenBLAS threads a GEMM
    # itself on one pool thread, and its Haswell kernels round a GEMM split differently)
    if cols_bytes < 1 << 20 and h > 10:   # several bands, split over the two threads
        assert bands[0][-1][1] > 1 and len(bands[0]) == 2
    with np.errstate(all="ignore"):
        whole = _tactic("gemm-col2im").run(op, [x])[0]
    np.testing.assert_allclose(one, whole, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(one, _reference(x, op), rtol=2e-5, atol=2e-5)


def test_bands_carry_nan_and_inf_as_gemm_col2im(monkeypatch):
    op = _op(4, 3, (2, 2), [], True)
    op.weights["kernel"][:] = 1.0
    op.weights["bias"][:] = 0.0
    x = np.zeros((1, 4, 40, 300), np.float32)
    x[0, :, 0, :4] = [[np.nan, np.inf, -0.0, 1.0]] * 4
    x[0, 1:, 0, 2] = 0.0
    got, _ = _run(monkeypatch, 2, 1 << 10, op, x)
    with np.errstate(all="ignore"):
        want = _tactic("gemm-col2im").run(op, [x])[0]
    assert got.tobytes() == want.tobytes()
    assert np.isnan(got[0, :, :2, :2]).all() and np.isposinf(got[0, :, :2, 2:4]).all()


@pytest.mark.parametrize("params,shape,why", [
    ({"strides": [1, 1]}, [1, 4, 8, 8], "kernel == stride"),
    ({"pre_padding": [1, 0]}, [1, 4, 8, 8], "kernel == stride"),
    ({"groups": 2}, [1, 4, 8, 8], "one group"),
    ({"post_ops": [{"op": "add", "input": 1}]}, [1, 4, 8, 8], "activation post-ops"),
    ({}, [2, 4, 8, 8], "batch 1"),
])
def test_bands_decline(params, shape, why):
    op = _op(4, 3, (2, 2), [], True)
    op.params.update(params)
    assert why in _tactic("gemm-col2im-bands").supports(op, [shape])


def test_bands_run_a_batch_the_build_did_not_see_as_gemm_col2im():
    op = _op(4, 3, (2, 2), ["RELU"], True)
    x = RNG.standard_normal((2, 4, 6, 5)).astype(np.float32)
    got = _tactic("gemm-col2im-bands").run(op, [x])[0]
    assert got.tobytes() == _tactic("gemm-col2im").run(op, [x])[0].tobytes()
