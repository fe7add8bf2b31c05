"""2-D max pooling (the strided-taps tactic): the numpy path against a plain float64 loop, and the optional numba
kernel (native/cpu/jit_pool.py) bit for bit against the numpy path: NaN, -inf, signed-zero ties (np.maximum keeps
its second operand on a tie), padding, strides, dilations, ceil mode, threads, a fused RELU."""
import numpy as np
import pytest

from native import config
from native.cpu import jit
from native.cpu.kernels import pooling
from native.tactics import Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(11)

CASES = [  # (shape, window, strides, dilations, pre, post, ceil_mode)
    ((1, 64, 112, 112), [3, 3], [2, 2], [1, 1], [1, 1], [1, 1], 0),     # resnet18's stem pool
    ((2, 5, 20, 20), [5, 5], [1, 1], [1, 1], [2, 2], [2, 2], 0),         # yolov8n's SPPF
    ((1, 3, 9, 11), [3, 2], [2, 3], [2, 1], [1, 0], [2, 1], 1),
    ((1, 4, 7, 7), [2, 2], [2, 2], [1, 1], [0, 0], [0, 0], 1),
    ((1, 2, 5, 6), [4, 4], [1, 1], [1, 1], [3, 3], [3, 3], 0),           # windows wholly in the padding
    ((1, 3, 13, 17), [3, 5], [1, 2], [1, 1], [1, 2], [1, 2], 0),
    ((1, 2, 12, 12), [5, 3], [2, 1], [1, 2], [0, 2], [2, 2], 1),
    ((1, 1, 4, 40), [1, 7], [1, 3], [1, 1], [0, 3], [0, 3], 0),
    ((1, 48, 2, 96), [2, 2], [2, 2], [1, 1], [0, 0], [0, 0], 0),         # PaddleOCR's classifier: planes stacked
    ((2, 6, 6, 9), [3, 3], [3, 3], [1, 1], [0, 1], [0, 1], 0),           # stacked, column padding
    ((1, 5, 4, 8), [2, 3], [2, 2], [1, 1], [0, 1], [0, 1], 0),
]
STACKED = CASES[-3:]   # windows that tile each plane's rows: pooled as one stacked plane (pooling._max_pool_2d_jit)


@pytest.fixture
def no_jit(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    yield
    monkeypatch.delenv("DEBUGKIT_JIT")
    config.reload()


def _input(shape, dtype):
    x = np.round(RNG.standard_normal(shape), 1).astype(dtype)   # rounded: many ties
    f = x.reshape(-1)
    f[RNG.integers(0, f.size, 40)] = -0.0
    f[RNG.integers(0, f.size, 40)] = 0.0
    f[RNG.integers(0, f.size, 3)] = np.nan
    f[RNG.integers(0, f.size, 3)] = -np.inf
    return x


def _params(window, strides, dil, pre, post, ceil):
    return {"type": "MAX", "window": window, "strides": strides, "dilations": dil, "pre_padding": pre,
            "post_padding": post, "ceil_mode": ceil}


def _reference(x, window, strides, dil, pre, out):
    """Max pooling by a loop over every output: the max of the window's taps inside the input (NaN wins)."""
    n, c, h, w = x.shape
    y = np.full((n, c) + tuple(out), -np.inf)
    for p in range(out[0]):
        for q in range(out[1]):
            rows = [p * strides[0] + i * dil[0] - pre[0] for i in range(window[0])]
            cols = [q * strides[1] + j * dil[1] - pre[1] for j in range(window[1])]
            taps = [x[:, :, a, b].astype(np.float64) for a in rows for b in cols if 0 <= a < h and 0 <= b < w]
            for t in taps:
                y[:, :, p, q] = np.where(np.isnan(t) | (t > y[:, :, p, q]), t, y[:, :, p, q])
    return y


def _pool(x, case):
    _, window, strides, dil, pre, post, ceil = case
    return pooling._max_pool(x, _params(window, strides, dil, pre, post, ceil), False)[0]


@pytest.mark.parametrize("case", CASES[1:])
def test_numpy_max_pool_matches_a_loop(no_jit, case):
    assert jit.kernel("max_pool_2d") is None
    x = _input(case[0], np.float32)
    y = _pool(x, case)
    _, window, strides, dil, pre, post, ceil = case
    out = pooling.pool_geometry(_params(window, strides, dil, pre, post, ceil), list(x.shape[2:]))[-1]
    assert list(y.shape[2:]) == out
    np.testing.assert_array_equal(y, _reference(x, window, strides, dil, pre, out).astype(np.float32))


def _both(monkeypatch, fn):
    """fn() with the numba kernel, then with the numpy path."""
    config.reload()
    assert jit.kernel("max_pool_2d") is not None
    got = fn()
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert jit.kernel("max_pool_2d") is None
        want = fn()
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    return got, want


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_jit_max_pool_is_bit_identical_to_numpy(monkeypatch, case, dtype, threads):
    pytest.importorskip("numba")
    monkeypatch.setenv("DEBUGKIT_THREADS", threads)
    x = _input(case[0], dtype)
    got, want = _both(monkeypatch, lambda: _pool(x, case))
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_ties_keep_numpys_operand(monkeypatch):
    """np.maximum keeps its second operand on a tie (signed zeros) and its first when both are NaN (NaN payloads);
    the kernel combines the taps in the numpy path's order with the same choices."""
    pytest.importorskip("numba")
    n1, n2 = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(np.float32)
    x = np.array([[[[-0.0, 0.0, 0.0, -0.0, n1, n2, n2, n1, n1, 1.0, 2.0, n2]]]], np.float32)
    got, want = _both(monkeypatch, lambda: _pool(x, ((1, 1, 1, 12), [1, 2], [1, 2], [1, 1], [0, 0], [0, 0], 0)))
    assert got.tobytes() == want.tobytes()
    assert want.view(np.uint32).ravel().tolist() == [0, 0x80000000, 0x7FC00001, 0xFFC00002, 0x7FC00001, 0xFFC00002]


def test_jit_max_pool_tactic_with_relu(monkeypatch):
    """The tactic's run (the stem pool with the RELU moved past it) gives the numpy path's bytes."""
    pytest.importorskip("numba")
    x = _input((1, 16, 30, 30), np.float32)
    params = dict(_params([3, 3], [2, 2], [1, 1], [1, 1], [1, 1], 0),
                  post_ops=[{"op": "activation", "type": "RELU"}])
    t = next(t for t in tactics_for("Pooling", "cpu") if t.name == "strided-taps")

    def run():
        return t.run(Op("Pooling", "p", params), [x])[0]
    got, want = _both(monkeypatch, run)
    assert got.tobytes() == want.tobytes()
    assert np.isnan(want).sum() == np.isnan(got).sum() > 0 and (np.nan_to_num(want) >= 0).all()


@pytest.mark.parametrize("case", STACKED + [CASES[3]])
def test_small_planes_pool_as_one_stacked_plane(monkeypatch, case):
    """Small planes whose windows tile their rows exactly (no row padding, none reaching past a plane) run as one
    tall plane in one kernel call: the per-plane loop's bytes; other geometries keep the per-plane calls."""
    pytest.importorskip("numba")
    monkeypatch.setenv("DEBUGKIT_THREADS", "1")
    config.reload()
    real = jit.kernel("max_pool_2d")
    calls = []
    monkeypatch.setattr(jit, "kernel", lambda name: (lambda x, *a: calls.append(x.shape) or real(x, *a))
                        if name == "max_pool_2d" else None)
    x = _input(case[0], np.float32)
    got = _pool(x, case)
    n, c, h, w = x.shape
    assert calls == ([(1, n * c * h, w)] if case in STACKED else [(n * c, h, w)])
    monkeypatch.setattr(pooling, "STACK_MAX_PLANE", 0)
    calls.clear()
    want = _pool(x, case)
    assert calls == [(n * c, h, w)] and got.tobytes() == want.tobytes()


NARROW = [  # many planes, output rows under pooling.CL_MAX_WIDTH: pooled channel-last (jit_pool.max_pool_2d_cl)
    ((1, 128, 10, 10), [5, 5], [1, 1], [1, 1], [2, 2], [2, 2], 0),       # yolov8n's SPPF at 320x320
    ((2, 40, 7, 9), [3, 3], [2, 2], [1, 1], [1, 1], [1, 1], 1),
    ((1, 64, 6, 13), [3, 5], [1, 2], [1, 2], [1, 2], [1, 2], 0),
    ((1, 64, 5, 6), [4, 4], [1, 1], [1, 1], [3, 3], [3, 3], 0),          # windows wholly in the padding
]


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("case", NARROW)
def test_narrow_planes_pool_channel_last_with_numpys_bytes(monkeypatch, case, threads):
    """Planes whose output rows are too short for the per-plane loops to vectorise pool channel-last: the numpy
    path's bytes (NaN payloads, signed-zero ties, -inf, padding-only windows), at one and two threads."""
    pytest.importorskip("numba")
    monkeypatch.setenv("DEBUGKIT_THREADS", threads)
    real = pooling._channel_last()
    assert real is not None
    calls = []
    monkeypatch.setattr(pooling, "_channel_last", lambda: (lambda x, *a: calls.append(a[1:3]) or real(x, *a)))
    x = _input(case[0], np.float32)
    got, want = _both(monkeypatch, lambda: _pool(x, case))
    n, c = x.shape[:2]
    assert calls and sum(r1 - r0 for r0, r1 in calls) == n * c
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
