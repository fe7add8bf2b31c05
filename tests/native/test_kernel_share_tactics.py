"""The tactics that split a layer into two halves run as kernel shares (threads.kernel_shares): stem-direct-shares
(a 3x3 convolution over few input channels), 1x1-gemm-shares (a 1x1 convolution over few pixels), gemv-dot-shares (a
one-row product) and winograd-f2x3-shares (winograd-f2x3-jit's band in two halves of tile rows). Each computes a
float64 reference's values within float32 rounding for any padding, odd sizes, batch and fused post-ops (others
after it), bit for bit the same whichever thread ran a half (both on the caller, one thread, a polling worker);
none is offered without numba, and each refuses what it does not compute."""
import time

import numpy as np
import pytest

from native import config
from native.cpu import jit, threads
from native.cpu.kernels.activations import activation
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(81)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _tactic(kind, name):
    return next(t for t in tactics_for(kind, "cpu") if t.name == name)


def _needs_kit():
    if not jit.available():
        pytest.skip("DEBUGKIT_JIT=0 (not offered: test_not_offered_without_numba covers that case)")


def _alone(fn):
    """fn() with the pool treated as contended: both halves on the caller."""
    saved = threads._SPIN["quiet_after"]
    threads._SPIN["quiet_after"] = float("inf")
    try:
        return fn()
    finally:
        threads._SPIN["quiet_after"] = saved


def _conv_params(m, k, stride, pre, post, post_ops):
    return {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride, stride], "pre_padding": list(pre),
            "post_padding": list(post), "dilations": [1, 1], "groups": 1, "post_ops": post_ops}


def _reference(x, w, b, stride, pre, post):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])])
    return reference_conv(xp, w, np.zeros(w.shape[0]) if b is None else b, stride, 0, 1, 1)


def _post_ops(steps, inputs, want):
    post_ops = []
    for p in steps:
        if p == "add":
            r = RNG.standard_normal(want.shape).astype(np.float32)
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(r)
            want = want + r
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
            want = activation(want, "SILU" if p == "SILU_POLYEXP" else p)
    return post_ops, want


def _conv_run(name, params, weights, inputs):
    """(the tactic's output on the raw weights, on its prepared weights), both halves on the caller."""
    t = _tactic("Convolution", name)
    x = inputs[0]
    assert t.supports(Op("Convolution", "c", params, weights), [list(x.shape)]) is None
    prepared = t.prepare(Op("Convolution", "c", params, dict(weights)))
    return [_alone(lambda ws=ws: t.run(Op("Convolution", "c", params, ws), list(inputs))[0])
            for ws in (weights, prepared)]


# ---- stem-direct-shares


@pytest.mark.parametrize("n,c,m,h,w,stride,pre,post,steps", [
    (1, 3, 16, 24, 24, 2, (1, 1), (1, 1), ["HARD_SWISH"]),       # MobileNetV3's stem, small
    (2, 3, 5, 11, 9, 2, (1, 1), (1, 1), ["RELU"]),
    (1, 1, 4, 10, 13, 2, (1, 0), (0, 1), []),
    (1, 4, 7, 9, 8, 1, (1, 1), (1, 1), ["HARD_SWISH"]),
    (1, 2, 3, 8, 7, 1, (0, 0), (0, 0), ["add", "RELU"]),        # residual: after the kernel (finish)
    (1, 3, 6, 7, 300, 2, (1, 1), (1, 1), ["SIGMOID"]),          # another activation: after the kernel
    (1, 3, 8, 5, 5, 2, (2, 3), (0, 2), ["RELU"]),               # padding wider than the taps' reach
    (1, 3, 16, 32, 40, 2, (1, 1), (1, 1), ["SILU"]),           # yolov8n's stem, small (polyexp's SiLU)
    (2, 2, 5, 9, 11, 1, (1, 1), (1, 1), ["SILU"]),
], ids=lambda v: str(v))
def test_stem_direct_matches_the_reference(n, c, m, h, w, stride, pre, post, steps):
    _needs_kit()
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    inputs = [x, None, None]
    post_ops, want = _post_ops(steps, inputs, _reference(x, k, b, stride, pre, post))
    for got in _conv_run("stem-direct-shares", _conv_params(m, 3, stride, pre, post, post_ops),
                         {"kernel": k, "bias": b}, inputs):
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_stem_direct_hard_swish_is_onnx_hard_swish():
    """HardSwish(v) = v * clip(v / 6 + 1/2, 0, 1): 0 at and below -3, v at and above 3."""
    _needs_kit()
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 1, 1] = 1.0
    k = np.zeros((4, 1, 3, 3), np.float32)
    k[:, 0, 1, 1] = [-3.0, 3.0, 1.5, -7.0]
    params = _conv_params(4, 3, 1, (1, 1), (1, 1), [{"op": "activation", "type": "HARD_SWISH"}])
    got = _conv_run("stem-direct-shares", params, {"kernel": k}, [x])[0]
    assert got[0, :, 1, 1].tolist() == [0.0, 3.0, 1.125, 0.0]       # 1.5 * clip(0.75)


# ---- stem-gemm-shares


@pytest.mark.parametrize("n,c,m,h,w,k,stride,pre,post,steps", [
    (1, 3, 64, 40, 40, 7, 2, (3, 3), (3, 3), []),                # resnet18's stem, smaller
    (2, 3, 8, 17, 13, 7, 2, (3, 3), (3, 3), ["RELU"]),
    (1, 3, 16, 24, 24, 3, 2, (1, 1), (1, 1), ["HARD_SWISH"]),
    (1, 1, 5, 11, 9, 5, 1, (2, 2), (2, 2), ["RELU"]),
    (1, 4, 6, 9, 10, 3, 1, (0, 1), (1, 0), ["add"]),             # residual: after the kernel (finish)
    (1, 2, 7, 30, 31, 5, 2, (2, 1), (0, 2), ["SIGMOID"]),        # another activation: after the kernel
    (1, 3, 16, 24, 26, 3, 2, (1, 1), (1, 1), ["SILU"]),          # yolov8n's stem: SiLU after the kernel (finish)
], ids=lambda v: str(v))
def test_stem_gemm_matches_the_reference(monkeypatch, n, c, m, h, w, k, stride, pre, post, steps):
    _needs_kit()
    if not threads.sgemm_address():
        pytest.skip("needs numpy's 64-bit-integer OpenBLAS cblas_sgemm")
    from native.cpu.kernels.conv import stem_gemm
    monkeypatch.setattr(stem_gemm, "num_threads", lambda: 2)     # offered with 2+ threads
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    kern = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    inputs = [x, None, None]
    post_ops, want = _post_ops(steps, inputs, _reference(x, kern, b, stride, pre, post))
    params = dict(_conv_params(m, k, stride, pre, post, post_ops))
    for band_bytes in (2 << 20, 1):          # bands as cut for real; one output row a band
        monkeypatch.setattr(stem_gemm, "BAND_BYTES", band_bytes)
        for got in _conv_run("stem-gemm-shares", params, {"kernel": kern, "bias": b}, inputs):
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_stem_gemm_refuses_what_it_does_not_compute(monkeypatch):
    from native.cpu.kernels.conv import stem_gemm
    monkeypatch.setattr(stem_gemm, "num_threads", lambda: 1)
    t = _tactic("Convolution", "stem-gemm-shares")
    if stem_gemm.kernels() is not None:
        op = Op("Convolution", "c", _conv_params(4, 7, 2, (3, 3), (3, 3), []),
                {"kernel": np.ones((4, 3, 7, 7), np.float32)})
        assert "one thread" in t.supports(op, [[1, 3, 20, 20]])
    k = {"kernel": np.ones((4, 3, 7, 7), np.float32)}
    for change, shape, word in (({"strides": [3, 3]}, [1, 3, 20, 20], "stride"),
                                ({"kernel_shape": [4, 4]}, [1, 3, 20, 20], "odd square"),
                                ({"groups": 3}, [1, 3, 20, 20], "ungrouped"),
                                ({}, [1, 8, 20, 20], "channels")):
        op = Op("Convolution", "c", dict(_conv_params(4, 7, 2, (3, 3), (3, 3), []), **change), k)
        assert word in t.supports(op, [shape]), change


# ---- 1x1-gemm-shares and gemv-dot-shares


@pytest.mark.parametrize("n,c,m,hw,steps,bias", [
    (1, 576, 1024, (1, 1), ["HARD_SWISH"], True),      # MobileNetV3-small's conv_head
    (1, 96, 576, (7, 7), ["HARD_SWISH"], True),        # its last block's 1x1
    (2, 40, 37, (1, 1), ["RELU"], True),
    (2, 24, 19, (5, 3), ["RELU"], False),
    (1, 17, 16, (1, 1), [], False),
    (1, 9, 5, (2, 2), ["SIGMOID"], True),              # another activation: after the kernel
    (1, 8, 33, (1, 1), ["add"], True),                 # a residual add: after the kernel
    (1, 8, 33, (4, 4), ["add", "RELU"], True),
    (1, 16, 32, (40, 40), ["SILU"], True),             # YOLO's 1x1s: SiLU by polyexp's exp
    (1, 16, 24, (20, 20), ["SILU_POLYEXP"], False),
], ids=lambda v: str(v))
def test_1x1_gemm_matches_the_reference(monkeypatch, n, c, m, hw, steps, bias):
    _needs_kit()
    from native.cpu.kernels import gemv_shares
    monkeypatch.setattr(gemv_shares, "num_threads", lambda: 2)   # large maps: offered with 2+ threads
    if hw != (1, 1) and not threads.sgemm_address():
        pytest.skip("needs numpy's 64-bit-integer OpenBLAS cblas_sgemm past one pixel")
    x = RNG.standard_normal((n, c) + hw).astype(np.float32)
    k = RNG.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    inputs = [x, None, None]
    want = np.einsum("mc,nchw->nmhw", k[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    want = want + (0 if b is None else b[:, None, None])
    post_ops, want = _post_ops(steps, inputs, want)
    weights = {"kernel": k} if b is None else {"kernel": k, "bias": b}
    for got in _conv_run("1x1-gemm-shares", _conv_params(m, 1, 1, (0, 0), (0, 0), post_ops), weights, inputs):
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def _gemm_op(k, n, bias, act):
    post = []
    weights = {"b": RNG.standard_normal((n, k)).astype(np.float32)}
    if bias:
        weights["bias0"] = RNG.standard_normal(n).astype(np.float32)
        post.append({"op": "bias", "weight": "bias0", "axis": -1})
    if act:
        post.append({"op": "activation", "type": act, "alpha": 0.0, "beta": 0.0})
    return Op("MatrixMultiply", "g", {"transpose_b": True, "post_ops": post}, weights)


@pytest.mark.parametrize("k,n,bias,act", [(1024, 1000, True, None), (64, 48, True, "RELU"), (13, 7, False, None),
                                          (32, 20, True, "TANH"), (40, 24, True, "SIGMOID"),
                                          (40, 24, False, "HARD_SWISH")])
def test_gemv_dot_shares_matches_the_reference(k, n, bias, act):
    _needs_kit()
    t = _tactic("MatrixMultiply", "gemv-dot-shares")
    op = _gemm_op(k, n, bias, act)
    a = RNG.standard_normal((1, k)).astype(np.float32)
    want = a.astype(np.float64) @ op.weights["b"].astype(np.float64).T
    if bias:
        want = want + op.weights["bias0"]
    if act:
        want = activation(want, act)
    assert t.supports(op, [[1, k]]) is None
    prepared = Op("MatrixMultiply", "g", op.params, t.prepare(op))
    got = _alone(lambda: t.run(prepared, [a])[0])
    assert got.shape == (1, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    # gemv-dot's floats: the same dot products, whichever half they fall in
    plain = _tactic("MatrixMultiply", "gemv-dot")
    np.testing.assert_allclose(got, plain.run(Op("MatrixMultiply", "g", op.params, plain.prepare(op)), [a])[0],
                               rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_gemv_dot_shares_refuses_more_rows():
    _needs_kit()
    assert "one row" in _tactic("MatrixMultiply", "gemv-dot-shares").supports(_gemm_op(8, 4, False, None), [[2, 8]])


# ---- winograd-f2x3-shares


@pytest.mark.parametrize("n,c,m,h,w,pre,post,steps", [
    (1, 8, 6, 12, 12, (1, 1), (1, 1), ["RELU"]),
    (2, 5, 7, 11, 9, (1, 1), (1, 1), ["add", "RELU"]),
    (1, 4, 3, 10, 13, (1, 0), (0, 1), []),
    (1, 6, 4, 8, 7, (0, 0), (0, 0), ["add"]),
    (1, 16, 16, 14, 14, (1, 1), (1, 1), ["SILU"]),
    (1, 3, 5, 9, 9, (1, 1), (1, 1), ["SIGMOID"]),        # another activation: after the transform
], ids=lambda v: str(v))
def test_winograd_shares_matches_the_reference(monkeypatch, n, c, m, h, w, pre, post, steps):
    _needs_kit()
    from native.cpu.kernels.conv import tuning, winograd_shares
    monkeypatch.setattr(winograd_shares, "num_threads", lambda: 2)     # offered with 2+ threads
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    k = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    inputs = [x, None, None]
    post_ops, want = _post_ops(steps, inputs, _reference(x, k, b, 1, pre, post))
    for band_bytes in (1 << 21, 1):        # one sub-band a half; one tile row a sub-band
        monkeypatch.setattr(tuning, "WINOGRAD_BYTES", band_bytes)
        for got in _conv_run("winograd-f2x3-shares", _conv_params(m, 3, 1, pre, post, post_ops),
                             {"kernel": k, "bias": b}, inputs):
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=5e-5, atol=5e-5 * np.abs(want).max())


def test_winograd_shares_refuses_a_single_tile_row_and_one_thread(monkeypatch):
    _needs_kit()
    from native.cpu.kernels.conv import winograd_shares
    op = Op("Convolution", "c", _conv_params(4, 3, 1, (1, 1), (1, 1), []), {"kernel": np.ones((4, 4, 3, 3),
                                                                                              np.float32)})
    t = _tactic("Convolution", "winograd-f2x3-shares")
    monkeypatch.setattr(winograd_shares, "num_threads", lambda: 2)
    assert "tile rows" in t.supports(op, [[1, 4, 2, 9]])
    assert t.supports(op, [[1, 4, 9, 9]]) is None
    monkeypatch.setattr(winograd_shares, "num_threads", lambda: 1)
    assert "one thread" in t.supports(op, [[1, 4, 9, 9]])


# ---- max-pool-shares


def _pool_op(window, strides, pre, post, relu, ceil=False, dil=(1, 1)):
    params = {"type": "MAX", "window": list(window), "strides": list(strides), "pre_padding": list(pre),
              "post_padding": list(post), "dilations": list(dil), "ceil_mode": ceil,
              "post_ops": [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}] if relu else []}
    return Op("Pooling", "p", params, {})


@pytest.mark.parametrize("shape,window,strides,pre,post,relu,ceil,dil", [
    ((1, 64, 32, 32), (3, 3), (2, 2), (1, 1), (1, 1), True, False, (1, 1)),    # resnet18's stem pool, smaller
    ((2, 5, 11, 9), (3, 3), (2, 2), (1, 1), (1, 1), False, True, (1, 1)),
    ((1, 6, 10, 10), (5, 5), (1, 1), (2, 2), (2, 2), True, False, (1, 1)),     # SPPF
    ((1, 4, 9, 12), (2, 2), (2, 2), (0, 0), (0, 0), False, False, (1, 1)),
    ((1, 3, 8, 17), (3, 3), (2, 2), (0, 0), (0, 0), True, False, (1, 1)),
    ((1, 3, 7, 4), (3, 3), (2, 2), (0, 1), (1, 2), False, True, (1, 1)),
    ((1, 3, 12, 13), (3, 2), (1, 2), (1, 0), (1, 1), True, False, (2, 1)),
], ids=lambda v: str(v))
def test_max_pool_shares_is_strided_taps_bit_for_bit(shape, window, strides, pre, post, relu, ceil, dil):
    _needs_kit()
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::7] = -0.0
    x.reshape(-1)[5::11] = 0.0
    x.reshape(-1)[3] = np.nan
    x.reshape(-1)[-2] = -np.inf
    op = _pool_op(window, strides, pre, post, relu, ceil, dil)
    t, ref = _tactic("Pooling", "max-pool-shares"), _tactic("Pooling", "strided-taps")
    assert t.supports(op, [list(shape)]) is None
    want = ref.run(op, [x])[0]
    got = _alone(lambda: t.run(op, [x])[0])
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_max_pool_shares_refuses_other_post_ops_and_kinds():
    t = _tactic("Pooling", "max-pool-shares")
    op = _pool_op((3, 3), (2, 2), (1, 1), (1, 1), False)
    op.params["post_ops"] = [{"op": "activation", "type": "SIGMOID"}]
    assert "RELU" in t.supports(op, [[1, 4, 8, 8]])
    avg = _pool_op((3, 3), (2, 2), (1, 1), (1, 1), False)
    avg.params["type"] = "AVERAGE"
    assert "MAX" in t.supports(avg, [[1, 4, 8, 8]])


# ---- all of them: the same floats whichever thread ran a half; not offered without numba


def _cases():
    """(kind, tactic, op, inputs) of one layer each."""
    x3 = RNG.standard_normal((1, 3, 40, 40)).astype(np.float32)
    hs = [{"op": "activation", "type": "HARD_SWISH", "alpha": 0.0, "beta": 0.0}]
    stem = Op("Convolution", "c", _conv_params(16, 3, 2, (1, 1), (1, 1), hs),
              {"kernel": RNG.standard_normal((16, 3, 3, 3)).astype(np.float32),
               "bias": RNG.standard_normal(16).astype(np.float32)})
    silu = [{"op": "activation", "type": "SILU", "alpha": 0.0, "beta": 0.0}]
    stem_silu = Op("Convolution", "c", _conv_params(16, 3, 2, (1, 1), (1, 1), silu),
                   {"kernel": RNG.standard_normal((16, 3, 3, 3)).astype(np.float32),
                    "bias": RNG.standard_normal(16).astype(np.float32)})
    x1 = RNG.standard_normal((1, 96, 1, 1)).astype(np.float32)
    head = Op("Convolution", "c", _conv_params(200, 1, 1, (0, 0), (0, 0), hs),
              {"kernel": RNG.standard_normal((200, 96, 1, 1)).astype(np.float32)})
    x7 = RNG.standard_normal((1, 96, 7, 7)).astype(np.float32)
    few = Op("Convolution", "c", _conv_params(120, 1, 1, (0, 0), (0, 0), hs),
             {"kernel": RNG.standard_normal((120, 96, 1, 1)).astype(np.float32),
              "bias": RNG.standard_normal(120).astype(np.float32)})
    xw = RNG.standard_normal((1, 16, 14, 14)).astype(np.float32)
    res = RNG.standard_normal((1, 24, 14, 14)).astype(np.float32)
    wino = Op("Convolution", "c", _conv_params(24, 3, 1, (1, 1), (1, 1), [{"op": "add", "input": 3},
                                                                          {"op": "activation", "type": "RELU"}]),
              {"kernel": RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)})
    stem7 = Op("Convolution", "c", _conv_params(32, 7, 2, (3, 3), (3, 3), []),
               {"kernel": RNG.standard_normal((32, 3, 7, 7)).astype(np.float32),
                "bias": RNG.standard_normal(32).astype(np.float32)})
    return [("Convolution", "stem-direct-shares", stem, [x3]), ("Convolution", "stem-direct-shares", stem_silu, [x3]),
            ("Convolution", "stem-gemm-shares", stem7, [x3]),
            ("Convolution", "1x1-gemm-shares", head, [x1]),
            ("Convolution", "1x1-gemm-shares", few, [x7]),
            ("MatrixMultiply", "gemv-dot-shares", _gemm_op(300, 130, True, "RELU"),
             [RNG.standard_normal((1, 300)).astype(np.float32)]),
            ("Convolution", "winograd-f2x3-shares", wino, [xw, None, None, res]),
            ("Pooling", "max-pool-shares", _pool_op((3, 3), (2, 2), (1, 1), (1, 1), True),
             [RNG.standard_normal((1, 16, 30, 30)).astype(np.float32)])]


def _prepared(kind, name, op):
    t = _tactic(kind, name)
    return t, Op(kind, op.name, op.params, t.prepare(Op(kind, op.name, op.params, dict(op.weights))))


def test_a_polling_worker_runs_halves_with_the_same_floats(monkeypatch):
    _needs_kit()
    if not threads.sgemm_address():
        pytest.skip("needs numpy's 64-bit-integer OpenBLAS cblas_sgemm (kernel shares)")
    from tests.backends.test_ir_share import _polling_worker, _stop
    cases = [(_prepared(kind, name, op), inputs) for kind, name, op, inputs in _cases()]
    w = _polling_worker(monkeypatch)     # (tunes the process: one BLAS thread, as the engine runs its GEMMs then)
    try:
        alone = [_alone(lambda t=t, op=op, i=i: t.run(op, list(i))[0]).copy() for (t, op), i in cases]
        for ((t, op), inputs), want in zip(cases, alone):
            before = int(w.flags[6])
            deadline = time.perf_counter() + 20
            while int(w.flags[6]) == before and time.perf_counter() < deadline:
                threads._SPIN["quiet_after"] = 0.0      # a busy machine may make the pool back off: ask again
                assert np.array_equal(t.run(op, list(inputs))[0].view(np.int32), want.view(np.int32)), t.name
                time.sleep(0.001)
            assert int(w.flags[6]) > before, t.name    # the worker ran (or the caller took over) posted halves
            for _ in range(10):
                assert np.array_equal(t.run(op, list(inputs))[0].view(np.int32), want.view(np.int32)), t.name
    finally:
        _stop(w, monkeypatch)


def test_one_thread_runs_both_halves_with_the_same_floats(monkeypatch):
    _needs_kit()
    cases = [(_prepared(kind, name, op), inputs) for kind, name, op, inputs in _cases()]
    alone = [_alone(lambda t=t, op=op, i=i: t.run(op, list(i))[0]).copy() for (t, op), i in cases]
    monkeypatch.setenv("DEBUGKIT_THREADS", "1")
    config.reload()
    try:
        for ((t, op), inputs), want in zip(cases, alone):
            assert np.array_equal(t.run(op, list(inputs))[0].view(np.int32), want.view(np.int32)), t.name
    finally:
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()


def test_not_offered_without_numba(monkeypatch):
    from native.cpu.kernels import gemv_shares
    from native.cpu.kernels.conv import stem_gemm, winograd_shares
    for mod in (winograd_shares, stem_gemm, gemv_shares):
        monkeypatch.setattr(mod, "num_threads", lambda: 2)
    monkeypatch.setattr(jit, "available", lambda: False)
    monkeypatch.setattr(threads, "_gemm_share", lambda: (None, 0))   # as without numba: no cblas_sgemm address
    for kind, name, op, inputs in _cases():
        assert "numba" in _tactic(kind, name).supports(op, [list(inputs[0].shape)]), name


def test_1x1_gemm_shares_refuses_large_maps_and_strides(monkeypatch):
    from native.cpu.kernels import gemv_shares
    t = _tactic("Convolution", "1x1-gemm-shares")
    if gemv_shares.kernels() is not None and threads.sgemm_address():
        monkeypatch.setattr(gemv_shares, "num_threads", lambda: 1)
        op = Op("Convolution", "c", _conv_params(4, 1, 1, (0, 0), (0, 0), []),
                {"kernel": np.ones((4, 8, 1, 1), np.float32)})
        assert "one thread" in t.supports(op, [[1, 8, 20, 20]]) and t.supports(op, [[1, 8, 16, 16]]) is None
    k = {"kernel": np.ones((4, 8, 1, 1), np.float32)}
    plain, strided = (Op("Convolution", "c", _conv_params(4, 1, s, (0, 0), (0, 0), []), k) for s in (1, 2))
    assert "pixels" in t.supports(plain, [[1, 8, 129, 128]])
    assert "stride-1" in t.supports(strided, [[1, 8, 4, 4]])


def test_stem_direct_refuses_what_it_does_not_compute():
    t = _tactic("Convolution", "stem-direct-shares")
    k = {"kernel": np.ones((4, 3, 3, 3), np.float32)}
    for change, shape, word in (({"strides": [3, 3]}, [1, 3, 8, 8], "stride"),
                                ({"kernel_shape": [5, 5]}, [1, 3, 8, 8], "3x3"),
                                ({"groups": 3}, [1, 3, 8, 8], "ungrouped"),
                                ({"dilations": [2, 2]}, [1, 3, 8, 8], "dilation"),
                                ({}, [1, 5, 8, 8], "channels")):
        op = Op("Convolution", "c", dict(_conv_params(4, 3, 2, (1, 1), (1, 1), []), **change), k)
        assert word in t.supports(op, [shape]), change


def test_a_planned_output_over_an_input_is_not_written():
    """A residual the epilogue adds after the kernel must still be there: a planned output buffer that overlaps an
    input is replaced by a new one."""
    _needs_kit()
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    k = RNG.standard_normal((6, 8, 1, 1)).astype(np.float32)
    res = RNG.standard_normal((1, 6, 4, 4)).astype(np.float32)
    params = _conv_params(6, 1, 1, (0, 0), (0, 0), [{"op": "add", "input": 3}])
    t = _tactic("Convolution", "1x1-gemm-shares")
    want = np.einsum("mc,nchw->nmhw", k[:, :, 0, 0], x) + res
    planned = res.copy()
    got = _alone(lambda: t.run(Op("Convolution", "c", params, {"kernel": k}), [x, None, None, planned],
                               outputs=[planned])[0])
    assert got is not planned
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
