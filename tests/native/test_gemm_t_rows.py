"""packed-gemm-t-rows (+ -polyexp): packed-gemm-t's product with b^T's rows cut over the CPU pool
(native/cpu/kernels/matmul_rows.py): the float64 reference's values with its epilogues, and floats that do not depend
on the path a part takes (the pool's worker through a GEMM share, a Python part, the caller alone)."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels import matmul_rows
from native.tactics import LayerContext, Op, tactics_for

RNG = np.random.default_rng(26)


def _tactic(name):
    return next(t for t in tactics_for("MatrixMultiply", "cpu") if t.name == name)


def _parts(bt, a, edges):
    """numpy's matmul of each part of bt's rows with the transposed copy of a: the floats of every path."""
    at = np.ascontiguousarray(a.T)
    yt = np.empty((bt.shape[0], a.shape[0]), np.float32)
    for r0, r1 in zip(edges[:-1], edges[1:]):
        np.matmul(bt[r0:r1], at, out=yt[r0:r1])
    return yt


def _gelu(z, tanh):
    from math import erf, pi, sqrt
    if tanh:
        return 0.5 * z * (1 + np.tanh(sqrt(2 / pi) * (z + 0.044715 * z ** 3)))
    return 0.5 * z * (1 + np.vectorize(erf)(z / sqrt(2)))


@pytest.mark.parametrize("m,k,n", [(32, 256, 1024), (16, 1024, 256), (32, 256, 768), (5, 40, 300), (1, 256, 1024),
                                   (3, 8, 40)])
def test_the_floats_are_the_parts_floats_on_every_path(monkeypatch, m, k, n):
    """Shares on the pool, Python parts (no shares) and one thread give the same bits: each part's numpy matmul."""
    a = RNG.standard_normal((m, k), np.float32)
    bt = RNG.standard_normal((n, k), np.float32)
    big = m * n * k >= matmul_rows.ROWS_MIN_MACS and n >= matmul_rows.ROW_PARTS * 16
    threads.tune()      # BLAS on one thread (OpenBLAS's own threading changes its floats), as engines run it
    want = _parts(bt, a, matmul_rows.edges_for(n) if big else [0, n]).view(np.int32)
    for _ in range(20):
        assert np.array_equal(matmul_rows.gemm_t_rows(bt, a).view(np.int32), want)
    monkeypatch.setattr(matmul_rows, "_native_shares", lambda *args: False)
    assert np.array_equal(matmul_rows.gemm_t_rows(bt, a).view(np.int32), want)
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    assert np.array_equal(matmul_rows.gemm_t_rows(bt, a).view(np.int32), want)
    np.testing.assert_allclose(want.view(np.float32), bt.astype(np.float64) @ a.T.astype(np.float64), rtol=1e-4,
                               atol=1e-3)


def test_the_cut_is_whole_16_row_blocks_the_callers_part_the_smaller():
    assert matmul_rows.edges_for(1024) == [0, 448, 1024]
    assert matmul_rows.edges_for(300) == [0, 128, 300]
    assert matmul_rows.edges_for(32) == [0, 16, 32]
    for n in (32, 48, 777, 3072):
        e = matmul_rows.edges_for(n)
        assert e[0] == 0 and e[-1] == n and 0 < e[1] < n and e[1] % 16 == 0 and e[1] <= n - e[1]


@pytest.mark.parametrize("shares", [True, False])
def test_each_parts_epilogue_runs_once_after_its_product(monkeypatch, shares):
    """The epilogue sees each part once, its rows already computed (the caller's part between its own product and
    the wait, the worker's after), whichever path ran; an epilogue that raises still lets the worker finish."""
    threads.tune()
    if not shares:
        monkeypatch.setattr(matmul_rows, "_native_shares", lambda *args: False)
    a = RNG.standard_normal((32, 256), np.float32)
    bt = RNG.standard_normal((1024, 256), np.float32)
    want = _parts(bt, a, matmul_rows.edges_for(1024))
    seen = []

    def epilogue(yt, r0, r1):
        seen.append((r0, r1, np.array_equal(yt[r0:r1], want[r0:r1])))
    for _ in range(10):
        seen.clear()
        yt = matmul_rows.gemm_t_rows(bt, a, epilogue)
        assert sorted(seen) == [(0, 448, True), (448, 1024, True)]
        assert np.array_equal(yt.view(np.int32), want.view(np.int32))

    def fails(yt, r0, r1):
        raise RuntimeError("epilogue")
    with pytest.raises(RuntimeError, match="epilogue"):
        matmul_rows.gemm_t_rows(bt, a, fails)
    assert np.array_equal(matmul_rows.gemm_t_rows(bt, a).view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("post", ["bias", "bias_relu", "none", "leaky"])
def test_packed_gemm_t_rows_matches_the_reference(post):
    a = RNG.standard_normal((2, 16, 256)).astype(np.float32)
    w = (RNG.standard_normal((256, 384)) / 16).astype(np.float32)
    bias = RNG.standard_normal(384).astype(np.float32)
    steps = {"bias": [{"op": "bias", "weight": "bias", "axis": -1}],
             "bias_relu": [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": "RELU"}],
             "none": [],
             "leaky": [{"op": "activation", "type": "LEAKY_RELU", "alpha": 0.1}]}[post]
    op = Op("MatrixMultiply", "m", {"post_ops": steps}, {"b": w, "bias": bias})
    t = _tactic("packed-gemm-t-rows")
    assert t.supports(op, LayerContext([list(a.shape)], ["float32"])) is None
    op.weights = t.prepare(op)
    threads.tune()      # BLAS on one thread before both products below
    y = t.run(op, [a])[0]
    z = a.astype(np.float64) @ w
    if post.startswith("bias"):
        z = z + bias
    if post == "bias_relu":
        z = np.maximum(z, 0)
    if post == "leaky":
        z = np.where(z >= 0, z, 0.1 * z)
    assert y.shape == (2, 16, 384) and y.dtype == np.float32
    np.testing.assert_allclose(y, z, rtol=1e-4, atol=1e-4)
    # the same floats as packed-gemm-t's epilogue on these parts' product
    yt = _parts(w.T.copy(), a.reshape(-1, 256), matmul_rows.edges_for(384))
    base = _tactic("packed-gemm-t")
    from native.cpu.kernels.matmul import transposed_back
    want = transposed_back(Op("MatrixMultiply", "m", {"post_ops": steps}, base.prepare(op)), [a], yt, (2, 16),
                           np.dtype(np.float32), np.dtype(np.float32))
    assert np.array_equal(y.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("kind", ["GELU_ERF", "GELU_TANH"])
def test_packed_gemm_t_rows_polyexp_matches_the_reference(kind):
    a = RNG.standard_normal((32, 256)).astype(np.float32)
    w = (RNG.standard_normal((256, 1024)) / 16).astype(np.float32)
    bias = RNG.standard_normal(1024).astype(np.float32)
    post = [{"op": "bias", "weight": "bias", "axis": -1}, {"op": "activation", "type": kind}]
    op = Op("MatrixMultiply", "m", {"post_ops": post}, {"b": w, "bias": bias})
    t = _tactic("packed-gemm-t-rows-polyexp")
    ctx = LayerContext([list(a.shape)], ["float32"])
    assert t.supports(op, ctx) is None
    op.weights = t.prepare(op)
    threads.tune()
    y = t.run(op, [a])[0]
    ref = _gelu(a.astype(np.float64) @ w + bias, kind == "GELU_TANH")
    assert y.shape == (32, 1024) and np.max(np.abs(y - ref)) < 1e-4
    relu = Op("MatrixMultiply", "m", {"post_ops": [{"op": "activation", "type": "RELU"}]}, {"b": w})
    assert "GELU" in t.supports(relu, ctx)
    assert "float32" in t.supports(op, LayerContext([list(a.shape)], ["float16"]))


def test_float64_weights_are_refused():
    op = Op("MatrixMultiply", "m", {}, {"b": np.zeros((8, 8))})
    assert "float32" in _tactic("packed-gemm-t-rows").supports(op, [[2, 8]])
