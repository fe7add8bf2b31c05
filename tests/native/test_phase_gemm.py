"""phase-gemm-s2: a 3x3 stride-2 convolution as four GEMMs over its input's phase planes, bias and a lone RELU / SiLU
or a residual add (+ RELU) applied as the output rows are written: the values of a float64 reference convolution
(within a GEMM's rounding) for any padding, odd sizes, batch, band height and pool size, bit for bit the same at
every pool size; other post-ops after it; not offered without numba; on two threads the same bands as a kernel
share, the same floats."""
import time

import numpy as np
import pytest

from native.cpu import jit, threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import phase_gemm, tuning
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(70)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactic(name="phase-gemm-s2"):
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == name)


def _needs_jit():
    if phase_gemm.kernels() is None:
        pytest.skip("no numba / no 64-bit cblas_sgemm (test_not_offered_without_numba covers that case)")


def _params(m, pre, post, post_ops):
    return {"num_output_maps": m, "kernel_shape": [3, 3], "strides": [2, 2], "pre_padding": list(pre),
            "post_padding": list(post), "dilations": [1, 1], "groups": 1, "post_ops": post_ops}


def _reference(x, w, b, pre, post):
    """float64 stride-2 convolution with asymmetric zero padding."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])])
    return reference_conv(xp, w, b, 2, 0, 1, 1)


def _pool(monkeypatch, pool, band_bytes):
    monkeypatch.setattr(phase_gemm, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)       # parallel_for really splits
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "PHASE_GEMM_BYTES", band_bytes)    # 1: one output row per band


def _post_ops(steps, inputs, want):
    post_ops = []
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
    return post_ops, want


@pytest.mark.parametrize("pool,band_bytes", [(1, 1 << 20), (2, 1 << 20), (3, 1), (2, 6000)])
@pytest.mark.parametrize("n,c,m,h,w,pre,post,steps", [
    (1, 8, 6, 12, 12, (1, 1), (1, 1), ["SILU"]),
    (2, 5, 7, 11, 9, (1, 1), (1, 1), ["RELU"]),
    (1, 4, 3, 10, 13, (1, 0), (0, 1), []),
    (2, 6, 4, 8, 7, (0, 0), (0, 0), ["add", "RELU"]),
    (1, 3, 5, 9, 9, (1, 1), (1, 1), ["CLIP"]),
    (1, 3, 4, 5, 300, (1, 1), (1, 1), ["SILU_POLYEXP"]),     # rows wide enough for the paired phase split
    (1, 2, 3, 6, 301, (0, 1), (1, 0), ["add"]),
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


def test_the_same_floats_at_every_pool_size(monkeypatch):
    """The band cut depends on the shapes only: each output's four GEMM calls are the same whatever the pool."""
    _needs_jit()
    x = RNG.standard_normal((2, 16, 40, 40)).astype(np.float32)
    k = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    params = _params(24, (1, 1), (1, 1), [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}])
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": k})))
    outs = []
    for pool in (1, 2, 3):
        _pool(monkeypatch, pool, 20000)
        outs.append(t.run(op, [x])[0].tobytes())
    assert outs[0] == outs[1] == outs[2]


def test_relu_keeps_nan():
    _needs_jit()
    x = RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan
    k = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    relu = [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]
    got = _tactic().run(Op("Convolution", "c", _params(5, (1, 1), (1, 1), relu), {"kernel": k}), [x])[0]
    # input (4, 4) is padded (5, 5): tap (1, 1) of output (2, 2) only (rows / columns 2o..2o + 2 hold 5 for o = 2)
    assert np.isnan(got[0, :, 2, 2]).all() and not np.isnan(got[0, :, 0, 0]).any()


@pytest.mark.parametrize("h,w,pre", [(7, 8, (1, 1)), (6, 5, (0, 1)), (9, 9, (1, 0)), (4, 300, (1, 1)),
                                     (5, 257, (0, 0)), (6, 10, (2, 2)), (5, 11, (3, 1)), (3, 4, (0, 5))])
def test_phase_planes_are_the_padded_input_split_into_phases(h, w, pre):
    """z as the docstring defines it, for any padding and odd or even sizes, wider or narrower than the planes."""
    _needs_jit()
    from native.cpu import jit_phase_gemm as J
    x = RNG.standard_normal((3, h, w)).astype(np.float32)
    for bw in ((w + pre[1] + 1 - 3) // 2 + 2, 2, w):
        for r0, rows in ((0, 3), (1, 2), (2, 1)):
            z = np.full((12, (rows + 1) * bw + 3), 7.0, np.float32)
            J.phase_rows(x, z, r0, rows, bw, pre[0], pre[1])
            padded = np.zeros((3, 2 * (r0 + rows + 1) + 2, 2 * bw + 2), np.float32)
            hh, ww = min(h, padded.shape[1] - pre[0]), min(w, padded.shape[2] - pre[1])
            padded[:, pre[0]:pre[0] + hh, pre[1]:pre[1] + ww] = x[:, :hh, :ww]
            want = np.zeros_like(z)
            for g, (r, s) in enumerate(phase_gemm.PHASES):
                plane = padded[:, 2 * r0 + r::2, s::2][:, :rows + 1, :bw]
                want[3 * g:3 * g + 3, :(rows + 1) * bw] = plane.reshape(3, -1)
            assert z.tobytes() == want.tobytes(), (bw, r0, rows)


def test_packed_weights_hold_every_tap_once():
    k = np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 3, 3)
    packed = phase_gemm.pack(k)
    assert packed.shape == (2, 27) and sorted(packed[0]) == sorted(k[0].reshape(-1))
    ws = phase_gemm.gemm_weights(packed)
    assert [a.shape[1] for a in ws] == [12, 6, 6, 3]
    assert ws[3][0].tolist() == k[0, :, 2, 2].tolist()          # shift (1, 1): tap (2, 2) of phase (0, 0)


def test_not_offered_without_numba(monkeypatch):
    monkeypatch.setattr(jit, "available", lambda: False)
    op = Op("Convolution", "c", _params(4, (1, 1), (1, 1), []), {"kernel": np.ones((4, 3, 3, 3), np.float32)})
    assert "numba" in _tactic().supports(op, [[1, 3, 8, 8]])


def test_refuses_what_it_does_not_compute():
    t = _tactic()
    for change, word in (({"strides": [1, 1]}, "stride 2"), ({"kernel_shape": [5, 5]}, "3x3"),
                         ({"groups": 2}, "ungrouped"), ({"dilations": [2, 2]}, "dilation")):
        op = Op("Convolution", "c", dict(_params(4, (1, 1), (1, 1), []), **change), {})
        assert word in t.supports(op, [[1, 4, 8, 8]])


@pytest.mark.parametrize("ho,bw,most,even,want", [
    (80, 81, 33, True, 20),     # three bands of at most 33 rows -> four of 20 (two threads: two each)
    (80, 81, 33, False, 27),
    (20, 21, 20, True, 10),     # one band -> two of 10 rows (210 GEMM columns each)
    (10, 11, 10, True, 10),     # two bands of 5 rows would have 55 columns: one band stays
    (7, 8, 2, True, 2),         # four bands already
])
def test_band_cut(ho, bw, most, even, want):
    assert phase_gemm.band_cut(ho, bw, most, even) == want


def test_the_kernel_share_runs_the_same_bands_with_the_same_floats(monkeypatch):
    """On two threads an image's two halves of bands run as a kernel share (jit_phase_share): the Python parts'
    floats, bit for bit, both halves on the caller or one on a polling worker."""
    _needs_jit()
    if phase_gemm._share_kit() is None:
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
    monkeypatch.setattr(tuning, "PHASE_GEMM_BYTES", 20000)     # several bands an image
    _pool(monkeypatch, 1, 20000)
    want = [t.run(op, inputs)[0].copy() for op, inputs in cases]
    _pool(monkeypatch, 2, 20000)
    calls = []
    share = threads.kernel_shares
    monkeypatch.setattr(phase_gemm, "kernel_shares", lambda *a: calls.append(1) or share(*a))
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
