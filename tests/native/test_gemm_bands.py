"""gemm_bands: a convolution GEMM in two bands of pixel rows (the caller's and the pool worker's cblas_sgemm shares)
gives the unsplit product's floats bit for bit, at any cut, and nhwc-gemm's output does not depend on whether its
GEMM was split (pool or not, numba or not)."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import gemm_bands, tuning
from native.cpu.kernels.conv.nhwc_gemm import row_pieces
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(5)


@pytest.fixture
def kit():
    threads.tune()
    gs, addr = threads._gemm_share()
    if gs is None:
        pytest.skip("needs numba and numpy's 64-bit-integer OpenBLAS")
    return gs, addr


def _shares_here(gs, addr, log):
    """gemm_shares run in one valid order on the caller: the posted (worker) shares, before(), the own share,
    between(); logs the shares' row counts."""
    def run(shares, between=None, before=None):
        for s in list(shares[1:]) + [None, shares[0]]:
            if s is None:
                if before is not None:
                    before()
                continue
            job = np.empty(10, np.int64)
            job[0], job[1:] = addr, s
            gs.run_share(job)
        if between is not None:
            between()
        log.append([int(s[0]) for s in shares])
        return True
    return run


def _gemm(p, kdim, m, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((p, kdim), np.float32), rng.standard_normal((kdim, m), np.float32)


@pytest.mark.parametrize("share", [0.25, 0.42, 0.5, 0.7])
@pytest.mark.parametrize("p,kdim,m", [(102400, 27, 16), (25600, 144, 32), (3136, 576, 64), (1600, 576, 128),
                                      (5043, 144, 32)])
def test_a_banded_gemm_is_the_unsplit_products_floats(kit, monkeypatch, share, p, kdim, m):
    """yolov8n's and resnet18's nhwc-gemm shapes (and an odd one): every band cut the rules allow gives numpy's
    whole product, bit for bit, on the BLAS installed here."""
    gs, addr = kit
    log = []
    monkeypatch.setattr(gemm_bands, "CALLER_SHARE", share)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "gemm_shares", _shares_here(gs, addr, log))
    src, k = _gemm(p, kdim, m, p)
    want = src @ k
    cols = np.full_like(src, np.nan)
    y = np.full((p, m), np.nan, np.float32)
    gathered, done = [], []

    def gather(p0, p1):
        gathered.append((p0, p1))
        cols[p0:p1] = src[p0:p1]

    cut = gemm_bands.band_cut(p, kdim, m)
    split = gemm_bands.banded_gemm(cols, k, y, gather, lambda p0, p1: done.append((p0, p1)))
    assert np.array_equal(y.view(np.int32), want.view(np.int32))
    if cut is None:
        assert not split and not log and gathered == [(0, p)] and done == [(0, p)]
        return
    assert split and cut % gemm_bands.ROW_UNIT == 0
    assert min(cut, p - cut) * kdim * m >= gemm_bands.SHARE_MIN_MACS
    assert log == [[cut, p - cut]]
    assert gathered == [(cut, p), (0, cut)] and done == [(0, cut), (cut, p)]


def test_small_or_single_thread_products_stay_whole(monkeypatch):
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    assert gemm_bands.band_cut(1600, 576, 64) == 96 * 7
    assert gemm_bands.band_cut(96, 27 * 1000, 64) is None                 # one row unit: nothing to cut
    assert gemm_bands.band_cut(64, 27, 16) is None                        # under PARALLEL_MIN_MACS
    assert gemm_bands.band_cut(6400, 27, 16) is None                      # a band under SHARE_MIN_MACS
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    assert gemm_bands.band_cut(1600, 576, 64) is None


@pytest.fixture
def tuned():
    """The engine's process-wide tuning (threads.tune: OpenBLAS on one thread, as when the bands run), undone after
    where this test did it. Without it the whole product's bits depended on whether an earlier test had tuned:
    OpenBLAS's own two threads split the reference product differently (the test failed run alone)."""
    changed = threads.tune()
    yield
    if changed:
        threads.untune()


def test_without_shares_the_bands_run_as_python_parts(monkeypatch, tuned):
    """gemm_shares refused (no numba, or the worker not polling): the same two bands as parallel_for parts, the
    worker's band gathered once; numpy's whole product, bit for bit."""
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(threads, "gemm_shares", lambda shares, between=None, before=None: False)
    src, k = _gemm(1600, 576, 64, 1)
    cols, y, calls = np.empty_like(src), np.empty((1600, 64), np.float32), []

    def gather(p0, p1):
        calls.append(("gather", p0, p1))
        cols[p0:p1] = src[p0:p1]
    assert gemm_bands.banded_gemm(cols, k, y, gather, lambda p0, p1: calls.append(("after", p0, p1))) is True
    assert calls[0] == ("gather", 672, 1600)
    assert sorted(calls[1:]) == [("after", 0, 672), ("after", 672, 1600), ("gather", 0, 672)]
    assert np.array_equal(y.view(np.int32), (src @ k).view(np.int32))


def test_other_dtypes_stay_whole(monkeypatch):
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    src, k = _gemm(1600, 576, 64, 1)
    src, k = src.astype(np.float64), k.astype(np.float64)
    cols, y, calls = np.empty_like(src), np.empty((1600, 64)), []

    def gather(p0, p1):
        calls.append((p0, p1))
        cols[p0:p1] = src[p0:p1]
    assert gemm_bands.banded_gemm(cols, k, y, gather, lambda p0, p1: None) is False
    assert calls == [(0, 1600)] and np.array_equal(y, src @ k)


@pytest.mark.parametrize("wo", [1, 3, 7])
def test_row_pieces_cover_a_pixel_range_in_order(wo):
    for a in range(30):
        for e in range(a + 1, 31):
            px = []
            for r0, w0, r1, w1 in row_pieces(a, e, wo):
                assert r0 < r1 and w0 < w1 and (r1 - r0 == 1 or (w0, w1) == (0, wo))
                px += [r * wo + c for r in range(r0, r1) for c in range(w0, w1)]
            assert px == list(range(a, e))


def _nhwc_case(n, c, m, hw, k, stride, pad, post):
    x = RNG.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = reference_conv(x, w, b, stride, pad, 1, 1)
    inputs, post_ops = [x, None, None], []
    for p in post:
        if p == "add":
            r = RNG.standard_normal(want.shape).astype(np.float32)
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(r)
            want = want + r
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
            want = activation(want, p)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [1, 1], "groups": 1, "post_ops": post_ops}
    op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
    return Op("Convolution", "c", params, _tactic().prepare(op)), inputs, want


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "nhwc-gemm")


@pytest.mark.parametrize("n,c,m,hw,k,stride,pad,post", [
    (3, 16, 32, 41, 3, 1, 1, ["SILU"]), (2, 32, 64, 40, 3, 1, 1, ["add", "RELU"]), (1, 16, 32, 160, 3, 2, 1, []),
    (1, 8, 48, 60, 5, 1, 2, ["RELU"])])
def test_nhwc_gemm_floats_do_not_depend_on_the_split(kit, monkeypatch, n, c, m, hw, k, stride, pad, post):
    """nhwc-gemm one thread (whole GEMM), split by shares at several cuts, and on the real pool (whoever runs the
    worker's band), and without numba: the same bits, and the reference's values."""
    gs, addr = kit
    tactic = _tactic()
    op, inputs, want = _nhwc_case(n, c, m, hw, k, stride, pad, post)
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    whole = tactic.run(op, inputs)[0]
    np.testing.assert_allclose(whole, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    real = threads.gemm_shares
    log = []
    monkeypatch.setattr(threads, "gemm_shares", _shares_here(gs, addr, log))
    for share in (0.38, 0.42, 0.55):
        monkeypatch.setattr(gemm_bands, "CALLER_SHARE", share)
        assert np.array_equal(tactic.run(op, inputs)[0].view(np.int32), whole.view(np.int32))
    assert len(log) == 3
    monkeypatch.setattr(threads, "gemm_shares", real)
    for _ in range(20):
        assert np.array_equal(tactic.run(op, inputs)[0].view(np.int32), whole.view(np.int32))
    monkeypatch.setitem(threads._STATE, "gemm_share", (None, 0))   # no numba: nothing split
    assert np.array_equal(tactic.run(op, inputs)[0].view(np.int32), whole.view(np.int32))


def test_nhwc_gemm_without_the_jit_keeps_the_floats(monkeypatch):
    """No numba (or no 64-bit cblas_sgemm): nhwc-gemm on two threads (Python parts) gives the one-thread product's
    bits, the reference's values."""
    op, inputs, want = _nhwc_case(3, 16, 32, 41, 3, 1, 1, ["SILU"])
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    whole = _tactic().run(op, inputs)[0]
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setitem(threads._STATE, "gemm_share", (None, 0))
    got = _tactic().run(op, inputs)[0]
    assert np.array_equal(got.view(np.int32), whole.view(np.int32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _conv_case(n, c, m, hw, k, stride, post, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    pad = k // 2
    post_ops = [{"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0} for p in post]
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [1, 1], "groups": 1, "post_ops": post_ops}
    return params, {"kernel": w, "bias": b}, x, reference_conv(x, w, b, stride, pad, 1, 1)


@pytest.mark.parametrize("name,n,c,m,hw,k,stride,post", [
    ("1x1-gemm", 1, 64, 128, 40, 1, 1, ["SILU"]), ("1x1-gemm", 1, 64, 96, 80, 1, 2, []),
    ("im2col-gemm", 1, 32, 64, 80, 3, 2, ["RELU"]), ("im2col-gemm", 1, 64, 64, 40, 3, 1, ["SILU"]), ("im2col-gemm", 1, 3, 16, 640, 3, 2, ["SILU"]),
    ("im2col-gemm", 2, 16, 32, 40, 3, 2, [])])
def test_conv2d_gemm_two_bands_as_shares_keep_the_python_parts_floats(kit, monkeypatch, name, n, c, m, hw, k, stride,
                                                                      post):
    """conv2d_gemm's two-thread bands of a 1x1 convolution as GEMM shares give the floats its parallel_for parts
    give, bit for bit: shares run here in order, on the real pool, and refused; bands with patch matrices (im2col-gemm,
    a strided 1x1) stay parallel_for parts."""
    gs, addr = kit
    from native.cpu.kernels.activations import activation
    params, weights, x, want = _conv_case(n, c, m, hw, k, stride, post)
    for p in post:
        want = activation(want, p)
    tactic = next(t for t in tactics_for("Convolution", "cpu") if t.name == name)
    op = Op("Convolution", "c", params, tactic.prepare(Op("Convolution", "c", params, dict(weights))))
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(tuning, "DIRECT_SPLIT_MIN_MACS", 0)   # (these small 1x1 layers would run both bands here)
    real = threads.gemm_shares
    refused = []
    monkeypatch.setattr(threads, "gemm_shares", lambda shares, between=None, before=None: refused.append(1) and False)
    parts = tactic.run(op, [x, None, None])[0].copy()
    np.testing.assert_allclose(parts, want, rtol=1e-4, atol=1e-4)
    log = []
    monkeypatch.setattr(threads, "gemm_shares", _shares_here(gs, addr, log))
    here = tactic.run(op, [x, None, None])[0].copy()
    assert len(refused) == len(log) == (1 if name == "1x1-gemm" and stride == 1 else 0)
    assert np.array_equal(here.view(np.int32), parts.view(np.int32))
    monkeypatch.setattr(threads, "gemm_shares", real)
    for _ in range(10):
        assert np.array_equal(tactic.run(op, [x, None, None])[0].view(np.int32), parts.view(np.int32))


def test_conv2d_gemm_small_1x1_bands_run_here(monkeypatch):
    """A small stride-1 1x1 convolution runs its two bands on the caller, neither as GEMM shares nor as parallel_for
    parts (the hand-off cost more than the split saved), with the split's floats bit for bit; from
    tuning.DIRECT_SPLIT_MIN_MACS the bands go to the pool as before."""
    from native.cpu.kernels.conv import gemm2d
    params, weights, x, want = _conv_case(1, 48, 32, 80, 1, 1, ["SILU"])
    tactic = next(t for t in tactics_for("Convolution", "cpu") if t.name == "1x1-gemm")
    op = Op("Convolution", "c", params, tactic.prepare(Op("Convolution", "c", params, dict(weights))))
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(gemm2d, "num_threads", lambda: 2)
    shares, parts = [], []
    monkeypatch.setattr(threads, "gemm_shares", lambda s, between=None, before=None: shares.append(1) and False)
    real_pf = gemm2d.parallel_for
    monkeypatch.setattr(gemm2d, "parallel_for", lambda fn, items: parts.append(len(items)) or real_pf(fn, items))
    here = tactic.run(op, [x, None, None])[0].copy()
    assert 80 * 80 * 48 * 32 < tuning.DIRECT_SPLIT_MIN_MACS and shares == parts == []
    monkeypatch.setattr(tuning, "DIRECT_SPLIT_MIN_MACS", 0)
    split = tactic.run(op, [x, None, None])[0].copy()
    assert shares == [1] and parts == [2]      # offered as shares, refused, run as parts
    assert np.array_equal(here.view(np.int32), split.view(np.int32))
