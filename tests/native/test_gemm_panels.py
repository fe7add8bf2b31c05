"""packed-gemm-panels (a compiled GEMM on weights packed in 32-column panels, the numba extra): the values of a
float64 reference for each epilogue and odd shapes (rows not a multiple of the 4-row block, columns not of the
panel); its GELU epilogue is polyexp's floats on its own product; an output's floats do not depend on the panels a
call covers, the threads or the other rows; what it refuses, it says why."""
import numpy as np
import pytest

from native import config
from native.cpu.kernels import rows
from native.cpu.kernels.matmul_panels import pack_panels
from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(23)


def _tactic():
    return next(t for t in tactics_for("MatrixMultiply", "cpu") if t.name == "packed-gemm-panels")


def _op(w, bias=None, act=None, transpose_b=False, **act_params):
    weights = {"b": w.T.copy() if transpose_b else w}
    post = []
    if bias is not None:
        weights["bias"] = bias
        post.append({"op": "bias", "weight": "bias", "axis": -1})
    if act:
        post.append({"op": "activation", "type": act, "alpha": act_params.get("alpha", 0.0), "beta": 0.0})
    params = {"transpose_a": False, "transpose_b": transpose_b}
    if post:
        params["post_ops"] = post
    op = Op("MatrixMultiply", "mm", params, weights)
    op.weights = _tactic().prepare(op)
    return op


def _reference(a, w, bias, act, alpha=0.0):
    from math import erf
    y = a.astype(np.float64) @ w.astype(np.float64)
    if bias is not None:
        y = y + bias
    if act == "RELU":
        y = np.maximum(y, 0)
    elif act == "GELU_ERF":
        y = 0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))
    elif act == "GELU_TANH":
        y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    elif act == "TANH":
        y = np.tanh(y)
    elif act == "LEAKY_RELU":
        y = np.where(y < 0, y * alpha, y)
    return y


@pytest.mark.parametrize("lead,k,n,act,bias,transpose_b", [
    ((32,), 256, 768, None, True, True), ((2, 16), 256, 1024, "GELU_ERF", True, False),
    ((16,), 128, 96, "GELU_TANH", True, True), ((7,), 67, 33, "RELU", True, False),
    ((3,), 1024, 64, "TANH", False, False), ((2, 5), 5, 9, "LEAKY_RELU", True, False), ((), 64, 16, None, False, True),
    ((197,), 192, 576, None, True, True)])
def test_panels_match_the_reference(lead, k, n, act, bias, transpose_b):
    pytest.importorskip("numba")
    a = RNG.standard_normal(lead + (k,)).astype(np.float32)
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32) if bias else None
    op = _op(w, b, act, transpose_b, alpha=0.1)
    assert _tactic().supports(op, LayerContext([list(a.shape)], ["float32"])) is None
    y = _tactic().run(op, [a])[0]
    assert y.dtype == np.float32 and y.shape == lead + (n,)
    np.testing.assert_allclose(y, _reference(a, w, b, act, 0.1), rtol=2e-5, atol=2e-6 * np.sqrt(k))


@pytest.mark.parametrize("kind", ["GELU_ERF", "GELU_TANH"])
def test_gelu_epilogue_is_polyexps_floats_on_the_panels_product(kind):
    """bias + GELU in the kernel = the kernel's product, then rows.gelu_rows (the *-polyexp tactics' floats)."""
    pytest.importorskip("numba")
    a = RNG.standard_normal((11, 96)).astype(np.float32)
    w = (RNG.standard_normal((96, 80)) / 10).astype(np.float32)
    bias = RNG.standard_normal(80).astype(np.float32)
    y = _tactic().run(_op(w, bias, kind), [a])[0]
    plain = _tactic().run(_op(w), [a])[0]
    assert np.array_equal(y, rows.gelu_rows(plain.copy(), bias, kind))
    assert np.array_equal(_tactic().run(_op(w, bias), [a])[0], plain + bias)   # the bias: one rounded add


def test_an_outputs_floats_depend_on_its_row_and_column_only():
    """Any panel range, any row count (whole blocks, the last rows padded into one), a panel cut short by N or
    not: the same floats, so neither the thread split nor the batch changes them."""
    pytest.importorskip("numba")
    from native.cpu.jit_panel_gemm import ROWS, panel_gemm
    a = RNG.standard_normal((15, 300)).astype(np.float32)
    w = RNG.standard_normal((300, 100)).astype(np.float32)
    bias = RNG.standard_normal(100).astype(np.float32)
    op = _op(w, bias, "RELU")
    whole = _tactic().run(op, [a])[0]
    for r0, r1 in ((0, 1), (3, 7), (2, 10), (5, 15), (0, 8)):
        assert np.array_equal(_tactic().run(op, [a[r0:r1].copy()])[0], whole[r0:r1])
    a16, bp, pb = np.concatenate([a, a[:1]]), op.weights["b_panels"], op.weights["bias"]
    parts = np.full((16, 100), np.nan, np.float32)
    for p0, p1 in ((0, 1), (1, 3), (3, 4)):
        panel_gemm(a16, bp, pb, True, 1, parts, p0, p1)
    assert ROWS in (4, 8) and np.array_equal(parts[:15], whole)
    wider = np.empty((16, 128), np.float32)   # the columns past 100 in a whole panel, not through the tail
    panel_gemm(a16, pack_panels(np.pad(w, ((0, 0), (0, 28)))), pb, True, 1, wider, 0, 4)
    assert np.array_equal(wider[:15, :100], whole)


def test_two_threads_give_one_threads_floats(monkeypatch):
    pytest.importorskip("numba")
    from native.cpu import threads
    from native.cpu.kernels import matmul_panels
    a = RNG.standard_normal((32, 256)).astype(np.float32)
    w = RNG.standard_normal((256, 512)).astype(np.float32)
    op = _op(w, RNG.standard_normal(512).astype(np.float32), "GELU_TANH")
    one = _tactic().run(op, [a])[0]
    calls = []
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "gemm_shares", lambda shares: calls.append(len(shares)) and False)   # refused:
    monkeypatch.setattr(threads, "parallel_for", lambda fn, items: calls.append(items) or [fn(i) for i in items])
    two = _tactic().run(op, [a])[0]                                                      # Python parts instead
    assert calls == [2, ((0, 8), (8, 16))] and matmul_panels.PARALLEL_MIN_MACS <= 32 * 256 * 512
    assert np.array_equal(one, two)


def test_panels_write_the_planned_buffer_and_keep_nan():
    pytest.importorskip("numba")
    op = _op(np.eye(4, dtype=np.float32), np.zeros(4, np.float32), "RELU")
    out = np.full((2, 4), 7.0, np.float32)
    a = np.array([[np.nan, -1.0, 2.0, -0.0], [1.0, 2.0, -3.0, 4.0]], np.float32)
    y = _tactic().run(op, [a], [out])[0]
    assert y is out
    assert np.isnan(y[0]).all()           # NaN * 0 is NaN: a NaN input reaches every output of its row, as in BLAS
    assert y[1].tolist() == [1.0, 2.0, 0.0, 4.0]


def test_pack_panels_pads_with_zeros():
    w = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    p = pack_panels(w)
    assert p.shape == (2, 3, 32) and p.flags.c_contiguous
    assert np.array_equal(p[0], w[:, :32]) and np.array_equal(p[1, :, :8], w[:, 32:]) and not p[1, :, 8:].any()


@pytest.mark.parametrize("params,shape,dtype,why", [
    ({"transpose_a": True}, [4, 8], "float32", "transposed"),
    ({"post_ops": [{"op": "add", "input": 1}]}, [4, 8], "float32", "post-ops"),
    ({}, [4, 8], "float16", "float32"),
])
def test_panels_refuse_with_a_reason(params, shape, dtype, why):
    op = Op("MatrixMultiply", "mm", {"transpose_a": False, "transpose_b": False, **params},
            {"b": np.ones((8, 4), np.float32)})
    reason = _tactic().supports(op, LayerContext([shape], [dtype]))
    assert isinstance(reason, str) and why in reason
    assert "2-D" in _tactic().supports(Op("MatrixMultiply", "mm", {}, {}), LayerContext([[1, 8]], ["float32"]))


def test_panels_need_the_jit(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        op = Op("MatrixMultiply", "mm", {}, {"b": np.ones((8, 4), np.float32)})
        assert "numba" in _tactic().supports(op, LayerContext([[4, 8]], ["float32"]))
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()


def test_a_panel_share_served_by_the_pools_poll_gives_the_kernels_floats():
    """The two-thread path: panel ranges as GEMM shares (jit_gemm_share.serve / run_share, no GIL) give the floats
    of one kernel call over every panel."""
    pytest.importorskip("numba")
    import threading

    from native.cpu import threads
    threads.tune()
    gs, addr = threads._gemm_share()
    if gs is None:
        pytest.skip("needs numba and numpy's 64-bit-integer OpenBLAS")
    from native.cpu.jit_panel_gemm import panel_descriptors, panel_gemm_gelu
    a = RNG.standard_normal((24, 200)).astype(np.float32)
    bp = pack_panels(RNG.standard_normal((200, 150)).astype(np.float32))
    bias = np.zeros(160, np.float32)
    bias[:150] = RNG.standard_normal(150)
    whole = np.empty((24, 150), np.float32)
    panel_gemm_gelu(a, bp, bias, True, False, whole, 0, 5)
    flags, job = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    job[0] = addr
    got = {}
    server = threading.Thread(target=lambda: got.setdefault("r", gs.serve(flags, job, 1, 0, 0, 0, 1 << 40, 3, 2,
                                                                           1 << 40)))
    server.start()
    y = np.full((24, 150), np.nan, np.float32)
    shares = np.empty((2, 9), np.int64)
    panel_descriptors(a, bp, bias, True, 2, y, np.array([0, 2, 5], np.int64), shares)
    assert shares[1].tolist() == [-25, 150, 200, a.ctypes.data, bp.ctypes.data, bias.ctypes.data, y.ctypes.data,
                                  2 + (5 << 32), 2 + (1 << 8)]
    try:
        gs.post(flags, job, shares[1], 1)
        own = np.empty(gs.JOB_WORDS, np.int64)
        own[0], own[1:] = addr, shares[0]
        gs.run_share(own)
        assert gs.finish(flags, job, 1, 1 << 40) in (0, 1)   # the server ran it, or the caller took it over
    finally:
        flags[0] = 1
        server.join(10)
    assert np.array_equal(y, whole)


def test_the_tactic_on_a_tuned_pool_gives_one_threads_floats():
    pytest.importorskip("numba")
    from native.cpu import threads
    a = RNG.standard_normal((32, 256)).astype(np.float32)
    op = _op(RNG.standard_normal((256, 1024)).astype(np.float32), RNG.standard_normal(1024).astype(np.float32),
             "GELU_ERF")
    from native.cpu.jit_panel_gemm import panel_gemm_gelu
    want = np.empty((32, 1024), np.float32)
    panel_gemm_gelu(a, op.weights["b_panels"], op.weights["bias"], True, False, want, 0, 32)
    threads.tune()
    try:
        for _ in range(20):
            assert np.array_equal(_tactic().run(op, [a])[0], want)
    finally:
        threads.untune()


def test_gemm_for_other_layers_matches_the_reference():
    """matmul_panels.gemm (what a convolution's patch GEMM would call): packed once, any M, bias and RELU."""
    pytest.importorskip("numba")
    from native.cpu.kernels.matmul_panels import gemm, kernels
    a = RNG.standard_normal((100, 27)).astype(np.float32)
    w = RNG.standard_normal((27, 40)).astype(np.float32)
    bias = np.zeros(64, np.float32)
    bias[:40] = RNG.standard_normal(40)
    y = gemm(a, pack_panels(w), bias, True, 1, np.empty((100, 40), np.float32), *kernels(1))
    np.testing.assert_allclose(y, np.maximum(a.astype(np.float64) @ w + bias[:40], 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(0, 8, 40), (3, 0, 40), (5, 8, 0), (0, 0, 0)])
def test_zero_sizes(m, k, n):
    """No rows, an empty sum (the bias alone), no columns: numpy's results."""
    pytest.importorskip("numba")
    a, w, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32), np.arange(n, dtype=np.float32)
    y = _tactic().run(_op(w, b, "RELU"), [a])[0]
    assert y.shape == (m, n) and np.array_equal(y, np.maximum(a @ w + b, 0))
