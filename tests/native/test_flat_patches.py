"""im2col-gemm's flat-patches path (native/cpu/kernels/conv/flat_patches.py): conv2d_gemm's floats, bit for bit."""
import numpy as np
import pytest

from native.cpu.kernels.conv import flat_patches, tuning
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(7)
LEAKY_CLIP = [{"op": "activation", "type": "LEAKY_RELU", "alpha": 0.2, "beta": 0.0},
              {"op": "activation", "type": "CLIP", "alpha": -0.4, "beta": np.inf}]


def reference(x, w, b, pre, post, dil, groups):
    """Direct float64 stride-1 convolution with per-axis pads."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])])
    n, m = x.shape[0], w.shape[0]
    kh, kw = w.shape[2:]
    ho = xp.shape[2] - dil[0] * (kh - 1)
    wo = xp.shape[3] - dil[1] * (kw - 1)
    cg, mg = x.shape[1] // groups, m // groups
    y = np.zeros((n, m, ho, wo))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, i * dil[0]:i * dil[0] + ho, j * dil[1]:j * dil[1] + wo]
                y[:, g * mg:(g + 1) * mg] += np.einsum("mc,nchw->nmhw", w[g * mg:(g + 1) * mg, :, i, j], win)
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


def _im2col():
    return next(t for t in tactics_for("Convolution") if t.name == "im2col-gemm")


def _run_both(x, w, b, pre, post, dil, groups, post_ops, extra=()):
    """(flat-patches outputs: two calls and one into a planned buffer, conv2d_gemm's output, the op)."""
    t = _im2col()
    m = w.shape[0]
    params = {"num_output_maps": m, "kernel_shape": list(w.shape[2:]), "strides": [1, 1], "pre_padding": list(pre),
              "post_padding": list(post), "dilations": list(dil), "groups": groups, "post_ops": post_ops}
    weights = {"kernel": w} if b is None else {"kernel": w, "bias": b}
    inputs = [x, *extra]
    op = Op("Convolution", "c", params, dict(weights))
    op.weights = t.prepare(op)
    fast = [t.run(op, inputs)[0].copy() for _ in range(2)]
    dst = np.full(fast[0].shape, np.nan, x.dtype)
    into = t.run(op, inputs, [dst])[0]
    assert np.shares_memory(into, dst)
    general = Op("Convolution", "c", params, dict(weights))
    general.weights = t.prepare(general)
    make = flat_patches.FlatPatches.make
    flat_patches.FlatPatches.make = classmethod(lambda cls, *a: None)
    try:
        want = t.run(general, inputs)[0]
    finally:
        flat_patches.FlatPatches.make = make
    return fast + [into], want, op


@pytest.mark.parametrize("n,c,m,h,w,k,pre,post,dil,groups,bias,post_ops", [
    (1, 24, 24, 14, 8, (1, 3), (0, 1), (0, 1), (1, 1), 1, True, LEAKY_CLIP),    # openWakeWord's 1x3 "same"
    (1, 24, 48, 12, 8, (3, 1), (0, 0), (0, 0), (1, 1), 1, True, LEAKY_CLIP),    # its 3x1 "valid"
    (2, 8, 6, 7, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, True, [{"op": "activation", "type": "RELU"}]),
    (1, 6, 8, 9, 9, (3, 3), (2, 2), (2, 2), (2, 2), 1, False, []),              # dilated, no bias, no epilogue
    (1, 8, 8, 6, 6, (3, 3), (1, 1), (1, 1), (1, 1), 2, True, []),               # grouped: bias in the epilogue
    (1, 4, 5, 5, 4, (2, 3), (1, 2), (0, 0), (1, 1), 1, True, LEAKY_CLIP),       # asymmetric pads
    (1, 3, 4, 3, 2, (1, 5), (0, 2), (0, 2), (1, 1), 1, True, []),               # kernel wider than a half row
    (1, 16, 16, 6, 2, (1, 3), (0, 1), (0, 1), (1, 1), 1, True, [{"op": "activation", "type": "SILU"}]),
])
def test_flat_patches_is_conv2d_gemm_bit_for_bit(n, c, m, h, w, k, pre, post, dil, groups, bias, post_ops):
    """Buffers and views made once, kept: conv2d_gemm's floats, and the reference's."""
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (RNG.standard_normal((m, c // groups) + k) * 0.3).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32) if bias else None
    got, want, op = _run_both(x, wt, b, pre, post, dil, groups, post_ops)
    assert op.__dict__["_flat_patches"][1] is not None
    for y in got:
        np.testing.assert_array_equal(y, want)
    if not post_ops:
        np.testing.assert_allclose(want, reference(x, wt, b, pre, post, dil, groups), rtol=1e-4, atol=1e-4)
    elif post_ops is LEAKY_CLIP:
        r = reference(x, wt, b, pre, post, dil, groups)
        np.testing.assert_allclose(want, np.maximum(np.where(r > 0, r, 0.2 * r), -0.4), rtol=1e-4, atol=1e-4)


def test_flat_patches_bands_and_residual_add(monkeypatch):
    """A patch matrix over COLS_BYTES is cut into conv2d_gemm's bands of rows; a fused residual add rides along."""
    monkeypatch.setattr(tuning, "COLS_BYTES", 4096)
    x = RNG.standard_normal((1, 8, 20, 6)).astype(np.float32)
    wt = (RNG.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    res = RNG.standard_normal((1, 8, 20, 6)).astype(np.float32)
    got, want, op = _run_both(x, wt, b, (1, 1), (1, 1), (1, 1), 1, [{"op": "add", "input": 1}], extra=[res])
    assert len(op.__dict__["_flat_patches"][1].bands) > 1
    for y in got:
        np.testing.assert_array_equal(y, want)
    np.testing.assert_allclose(want, reference(x, wt, b, (1, 1), (1, 1), (1, 1), 1) + res, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,pre,post,stride,held", [((1, 3), (0, 0), (0, 0), 1, 1 << 21),
                                                    ((1, 1), (0, 0), (0, 0), 1, 1 << 21),
                                                    ((3, 3), (1, 1), (1, 1), 2, 1 << 21),
                                                    ((3, 3), (1, 1), (1, 1), 1, 1000)])
def test_flat_patches_declines_where_rows_change_width(monkeypatch, k, pre, post, stride, held):
    """Output rows narrower than the input's (valid 1x3), strided, a 1x1 kernel, or buffers over HELD_BYTES: the
    general path runs (no recipe)."""
    monkeypatch.setattr(flat_patches, "HELD_BYTES", held)
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    wt = RNG.standard_normal((4, 4) + k).astype(np.float32)
    t = _im2col()
    params = {"num_output_maps": 4, "kernel_shape": list(k), "strides": [stride] * 2, "pre_padding": list(pre),
              "post_padding": list(post), "dilations": [1, 1], "groups": 1}
    op = Op("Convolution", "c", params, {"kernel": wt})
    op.weights = t.prepare(op)
    y = t.run(op, [x])[0]
    assert op.__dict__["_flat_patches"][1] is None
    ref = reference(x, wt, None, pre, post, (1, 1), 1)[:, :, ::stride, ::stride]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def _two_threads(monkeypatch):
    """Both paths see a pool of two (their parallel_for still runs inline: the process is not tuned)."""
    from native.cpu.kernels.conv import gemm2d
    monkeypatch.setattr(flat_patches, "num_threads", lambda: 2)
    monkeypatch.setattr(gemm2d, "num_threads", lambda: 2)


@pytest.mark.parametrize("n,h", [(1, 13), (2, 9)])
def test_flat_patches_split_over_the_pool_is_conv2d_gemms_split(monkeypatch, n, h):
    """Above PARALLEL_MIN_MACS both cut the rows into conv2d_gemm's tasks (one per thread and sample)."""
    _two_threads(monkeypatch)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 0)
    x = RNG.standard_normal((n, 12, h, 8)).astype(np.float32)
    wt = (RNG.standard_normal((16, 12, 1, 3)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    got, want, op = _run_both(x, wt, b, (0, 1), (0, 1), (1, 1), 1, LEAKY_CLIP)
    assert op.__dict__["_flat_patches"][1].parts == (2 if n == 1 else n)
    for y in got:
        np.testing.assert_array_equal(y, want)


def test_flat_patches_leaves_channel_splits_to_conv2d_gemm(monkeypatch):
    """A split layer whose map has fewer pixels than output channels: conv2d_gemm cuts it by channels (its floats),
    so the recipe declines it (YOLO's 256-channel 10x10 layers at two threads, here a 3x3 one)."""
    _two_threads(monkeypatch)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 0)
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    wt = (RNG.standard_normal((32, 8, 3, 3)) * 0.3).astype(np.float32)
    got, want, op = _run_both(x, wt, RNG.standard_normal(32).astype(np.float32), (1, 1), (1, 1), (1, 1), 1,
                              [{"op": "activation", "type": "SILU"}])
    assert op.__dict__["_flat_patches"][1] is None
    for y in got:
        np.testing.assert_array_equal(y, want)


def test_flat_patches_keeps_buffers_per_thread():
    """Two threads running the same layer each fill their own kept buffers (contexts may run a layer at once)."""
    import threading
    x = RNG.standard_normal((1, 6, 5, 4)).astype(np.float32)
    wt = (RNG.standard_normal((6, 6, 1, 3)) * 0.3).astype(np.float32)
    got, want, op = _run_both(x, wt, None, (0, 1), (0, 1), (1, 1), 1, [])
    recipe = op.__dict__["_flat_patches"][1]
    mine = recipe.buffers()
    seen = {}
    t = threading.Thread(target=lambda: seen.update(y=_im2col().run(op, [x])[0], kept=recipe.buffers()))
    t.start()
    t.join()
    np.testing.assert_array_equal(seen["y"], want)
    assert seen["kept"][0] is not mine[0] and not np.shares_memory(seen["kept"][0], mine[0])
