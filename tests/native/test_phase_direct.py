"""phase-direct-s2: a 3x3 stride-2 convolution as a direct kernel over its input's phase planes, bias and a lone
RELU / SiLU in the kernel, other post-ops (a residual add, a clip, a bias input) after it: the values of a float64
reference convolution (within float32 rounding) for any padding, odd sizes, batch, channel count (not a multiple of
8), band height and pool size; bit for bit the same at every band cut and whichever thread ran a half (one thread,
both halves on the caller, a polling worker); not offered without numba, and a plan that chose it runs there
through im2col-gemm on the unpacked kernel."""
import time

import numpy as np
import pytest

from native.cpu import jit, threads
from native.cpu.kernels.conv import phase_direct, tuning
from native.tactics import Op, tactics_for
from tests.native.test_phase_gemm import _params, _post_ops, _reference

RNG = np.random.default_rng(86)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "phase-direct-s2")


def _needs_jit():
    if phase_direct._kit() is None:
        pytest.skip("no numba (test_not_offered_without_numba covers that case)")


def _pool(monkeypatch, pool, band_bytes):
    monkeypatch.setattr(phase_direct, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "PHASE_GEMM_BYTES", band_bytes)    # 1: one output row per band


@pytest.mark.parametrize("pool,band_bytes", [(1, 1 << 20), (2, 1 << 20), (2, 1), (2, 6000)])
@pytest.mark.parametrize("n,c,m,h,w,pre,post,steps", [
    (1, 8, 6, 12, 12, (1, 1), (1, 1), ["SILU"]),
    (2, 5, 7, 11, 9, (1, 1), (1, 1), ["RELU"]),
    (1, 4, 3, 10, 13, (1, 0), (0, 1), []),
    (2, 6, 17, 8, 7, (0, 0), (0, 0), ["add", "RELU"]),
    (1, 3, 16, 9, 9, (1, 1), (1, 1), ["CLIP"]),
    (1, 3, 4, 5, 300, (1, 1), (1, 1), ["SILU_POLYEXP"]),     # rows wider than a 32-pixel panel, several panels
    (1, 2, 3, 6, 301, (0, 1), (1, 0), ["add"]),
    (1, 16, 32, 34, 34, (1, 1), (1, 1), ["SILU"]),           # yolov8n's model.1 shape, smaller
], ids=lambda v: str(v))
def test_matches_the_reference(monkeypatch, pool, band_bytes, n, c, m, h, w, pre, post, steps):
    _needs_jit()
    _pool(monkeypatch, pool, band_bytes)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    inputs = [x, None, None]
    post_ops, want = _post_ops(steps, inputs, _reference(x, k, b, pre, post))
    params = _params(m, pre, post, post_ops)
    t = _tactic()
    op = Op("Convolution", "c", params, {"kernel": k, "bias": b})
    assert t.supports(op, [list(x.shape)]) is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), inputs)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_a_bias_input_and_no_bias():
    """A bias given as the third input (applied after the kernel), and none at all."""
    _needs_jit()
    x = RNG.standard_normal((1, 5, 10, 11)).astype(np.float32)
    k = RNG.standard_normal((9, 5, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(9).astype(np.float32)
    silu = [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}]
    params = _params(9, (1, 1), (1, 1), silu)
    t = _tactic()
    for inputs, bias in (([x, None, b], b), ([x], np.zeros(9))):
        want = _post_ops(["SILU"], [], _reference(x, k, bias, (1, 1), (1, 1)))[1]
        got = t.run(Op("Convolution", "c", params, {"kernel": k}), inputs)[0]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_same_floats_at_every_band_cut_and_pool_size(monkeypatch):
    """An output's chain of FMAs depends only on its pixel and channel: any band cut and pool give the same floats."""
    _needs_jit()
    x = RNG.standard_normal((2, 16, 40, 40)).astype(np.float32)
    k = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    params = _params(24, (1, 1), (1, 1), [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}])
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": k})))
    outs = set()
    for pool, band_bytes in ((1, 1 << 20), (2, 1 << 20), (1, 1), (2, 20000), (3, 6000)):
        _pool(monkeypatch, pool, band_bytes)
        outs.add(t.run(op, [x])[0].tobytes())
    assert len(outs) == 1


def test_relu_keeps_nan():
    _needs_jit()
    x = RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan
    k = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    relu = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    got = _tactic().run(Op("Convolution", "c", _params(5, (1, 1), (1, 1), relu), {"kernel": k}), [x])[0]
    # input (4, 4) is padded (5, 5): tap (1, 1) of output (2, 2) only
    assert np.isnan(got[0, :, 2, 2]).all() and np.isnan(got).sum() == 5


def test_offsets_address_each_tap_in_its_phase_plane():
    """Tap (c, i, j) reads phase (i % 2, j % 2)'s plane of channel c, shifted by (i // 2) rows of B and j // 2."""
    offs = phase_direct.offsets(2, 1000, 7)
    assert offs.dtype == np.uint64 and offs.shape == (18,)
    # phase groups (1, 0) 0, (0, 0) 1, (0, 1) 2, (1, 1) 3; C = 2
    assert offs[0] == (1 * 2 + 0) * 1000                    # c 0, tap (0, 0): phase (0, 0)
    assert offs[1] == (2 * 2 + 0) * 1000                    # tap (0, 1): phase (0, 1)
    assert offs[9 + 4] == (3 * 2 + 1) * 1000                # c 1, tap (1, 1): phase (1, 1)
    assert offs[9 + 8] == (1 * 2 + 1) * 1000 + 7 + 1        # c 1, tap (2, 2): phase (0, 0), one row and column on


def test_unpack_gives_the_kernel_back():
    k = RNG.standard_normal((11, 3, 3, 3)).astype(np.float32)
    t = _tactic()
    ws = t.prepare(Op("Convolution", "c", _params(11, (1, 1), (1, 1), []), {"kernel": k}))
    assert ws["kernel_direct"].shape == (2, 27, 8)
    assert phase_direct.unpack(ws).tobytes() == k.tobytes()


def test_a_plan_runs_without_numba(monkeypatch):
    """Prepared (packed) weights, run where numba is off: im2col-gemm on the unpacked kernel, the reference's values."""
    x = RNG.standard_normal((1, 4, 9, 10)).astype(np.float32)
    k = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    relu = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    params = _params(6, (1, 1), (1, 1), relu)
    t = _tactic()
    ws = t.prepare(Op("Convolution", "c", params, {"kernel": k, "bias": b}))
    monkeypatch.setattr(phase_direct, "_kit", lambda: None)
    got = t.run(Op("Convolution", "c", params, ws), [x])[0]
    want = np.maximum(_reference(x, k, b, (1, 1), (1, 1)), 0)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_not_offered_without_numba(monkeypatch):
    monkeypatch.setattr(jit, "available", lambda: False)
    monkeypatch.setattr(jit, "_OFFERED", {})
    op = Op("Convolution", "c", _params(4, (1, 1), (1, 1), []), {"kernel": np.ones((4, 3, 3, 3), np.float32)})
    assert "numba" in _tactic().supports(op, [[1, 3, 8, 8]])


def test_refuses_what_it_does_not_compute():
    t = _tactic()
    kernel = {"kernel": np.ones((4, 4, 3, 3), np.float32)}
    for change, word in (({"strides": [1, 1]}, "stride 2"), ({"kernel_shape": [5, 5]}, "3x3"),
                         ({"groups": 2}, "ungrouped"), ({"dilations": [2, 2]}, "dilation")):
        op = Op("Convolution", "c", dict(_params(4, (1, 1), (1, 1), []), **change), kernel)
        assert word in t.supports(op, [[1, 4, 8, 8]])
    assert "constant kernels" in t.supports(Op("Convolution", "c", _params(4, (1, 1), (1, 1), []), {}),
                                            [[1, 4, 8, 8]])


@pytest.mark.parametrize("band_bytes", [20000, 1 << 20])
def test_the_kernel_share_gives_the_same_floats(monkeypatch, band_bytes):
    """On two threads an image's two halves of bands (several bands an image), or of its output channels (a map
    of one band), run as a kernel share (jit_phase_direct_share.direct_stage): the one-thread floats, bit for bit,
    both halves on the caller or one on a polling worker."""
    _needs_jit()
    if not threads.sgemm_address():
        pytest.skip("needs numpy's 64-bit-integer cblas_sgemm (kernel shares)")
    from tests.backends.test_ir_share import _polling_worker, _stop
    x = RNG.standard_normal((2, 16, 40, 40)).astype(np.float32)
    k = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    res = RNG.standard_normal((2, 24, 20, 20)).astype(np.float32)
    t = _tactic()
    cases = []
    for steps, inputs in ((["add", "RELU"], [x, None, None, res]), (["SILU"], [x])):
        post = [{"op": "add", "input": 3} if p == "add" else {"op": "activation", "type": p} for p in steps]
        params = _params(24, (1, 1), (1, 1), post)
        op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": k, "bias": b})))
        cases.append((op, inputs))
    _pool(monkeypatch, 1, band_bytes)
    want = [t.run(op, inputs)[0].copy() for op, inputs in cases]
    _pool(monkeypatch, 2, band_bytes)
    kit = phase_direct._kit()
    for op, _ in cases:      # one band of all 20 rows: the halves are channels 0..8 and 8..24
        assert [(lay.args[kit.BY_CHANNELS], lay.args[kit.SPLIT]) for lay, _ in
                op.__dict__["_phase_direct_layers"].values()] == [(1, 8) if band_bytes > 20000 else (0, 8)]
    calls = []
    share = threads.kernel_shares
    monkeypatch.setattr(phase_direct, "kernel_shares", lambda *a: calls.append(1) or share(*a))
    saved = threads._SPIN["quiet_after"]
    threads._SPIN["quiet_after"] = float("inf")    # contended: both halves on the caller
    try:
        for (op, inputs), w in zip(cases, want):
            assert t.run(op, inputs)[0].tobytes() == w.tobytes()
    finally:
        threads._SPIN["quiet_after"] = saved
    assert len(calls) == 4                          # two images, two cases
    w_ = _polling_worker(monkeypatch)
    try:
        for (op, inputs), w in zip(cases, want):
            before = int(w_.flags[6])
            deadline = time.perf_counter() + 20
            while int(w_.flags[6]) == before and time.perf_counter() < deadline:
                threads._SPIN["quiet_after"] = 0.0
                assert t.run(op, inputs)[0].tobytes() == w.tobytes()
                time.sleep(0.001)
            assert int(w_.flags[6]) > before
    finally:
        _stop(w_, monkeypatch)
