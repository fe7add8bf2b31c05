"""padded-direct-s1: a 3x3 stride-1 convolution by phase-direct-s2's kernel over bands of the zero-padded input:
the values of a float64 reference convolution (within float32 rounding) for any padding (asymmetric, none, wider
than the kernel), odd sizes, batch, channel count, band height and pool size, fused bias + RELU / SiLU and other
post-ops after it; bit for bit the same at every band cut and whichever thread ran a half; refuses what it does not
compute."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.conv import padded_direct, phase_direct, tuning
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv
from tests.native.test_phase_gemm import _post_ops

RNG = np.random.default_rng(861)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "padded-direct-s1")


def _needs_jit():
    if phase_direct._kit() is None:
        pytest.skip("no numba (phase-direct-s2's test_not_offered_without_numba covers that case)")


def _params(m, pre, post, post_ops):
    return {"num_output_maps": m, "kernel_shape": [3, 3], "strides": [1, 1], "pre_padding": list(pre),
            "post_padding": list(post), "dilations": [1, 1], "groups": 1, "post_ops": post_ops}


def _reference(x, w, b, pre, post):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])])
    return reference_conv(xp, w, b, 1, 0, 1, 1)


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
    (1, 3, 16, 9, 9, (2, 3), (1, 2), ["CLIP"]),
    (1, 3, 4, 5, 70, (1, 1), (1, 1), ["SILU_POLYEXP"]),      # rows wider than a 32-pixel panel
    (1, 16, 16, 20, 20, (1, 1), (1, 1), ["SILU"]),           # yolov8n's model.2 bottleneck shape, smaller
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


def test_the_same_floats_at_every_band_cut_pool_and_thread(monkeypatch):
    """Any band cut and pool, and the kernel share (both halves on the caller), give the one-thread floats."""
    _needs_jit()
    x = RNG.standard_normal((1, 16, 24, 24)).astype(np.float32)
    k = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
    params = _params(24, (1, 1), (1, 1), [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}])
    t = _tactic()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": k})))
    calls = []
    share = threads.kernel_shares
    monkeypatch.setattr(phase_direct, "kernel_shares", lambda *a: calls.append(1) or share(*a))
    outs = set()
    saved = threads._SPIN["quiet_after"]
    threads._SPIN["quiet_after"] = float("inf")    # contended: both halves on the caller
    try:
        for pool, band_bytes in ((1, 1 << 20), (2, 1 << 20), (1, 1), (2, 20000), (3, 6000)):
            _pool(monkeypatch, pool, band_bytes)
            outs.add(t.run(op, [x])[0].tobytes())
    finally:
        threads._SPIN["quiet_after"] = saved
    assert len(outs) == 1
    assert len(calls) == (3 if threads.sgemm_address() else 0)


def test_band_rows_fit_the_budget():
    """A band's padded rows and product fit tuning.PHASE_GEMM_BYTES (at least one row)."""
    rows = padded_direct.PaddedDirectS1._rows(None, 16, 16, 80, 80, False)
    assert 4 * (16 * (rows + 2) + 16 * rows) * 82 <= tuning.PHASE_GEMM_BYTES
    assert padded_direct.PaddedDirectS1._rows(None, 1024, 1024, 80, 80, False) == 1


def test_refuses_what_it_does_not_compute():
    t = _tactic()
    kernel = {"kernel": np.ones((4, 4, 3, 3), np.float32)}
    for change, word in (({"strides": [2, 2]}, "stride 1"), ({"kernel_shape": [5, 5]}, "3x3"),
                         ({"groups": 2}, "ungrouped"), ({"dilations": [2, 2]}, "dilation"),
                         ({"pre_padding": [-1, 0]}, "negative")):
        op = Op("Convolution", "c", dict(_params(4, (1, 1), (1, 1), []), **change), kernel)
        assert word in t.supports(op, [[1, 4, 8, 8]])
    assert "constant kernels" in t.supports(Op("Convolution", "c", _params(4, (1, 1), (1, 1), []), {}),
                                            [[1, 4, 8, 8]])
