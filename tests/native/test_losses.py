"""Kernels of the loss, optimiser, BitCast and DeformConv plugins, checked against hand-computed values."""
import numpy as np
import pytest

from native.cpu.kernels.deform_conv import deform_conv
from native.cpu.kernels.losses import log_softmax, nll_loss
from native.errors import ExecutionError
from native.plugins import find_plugin

# the NLL example from the ONNX spec: N, C, d1 = 2, 3, 2
X = np.array([[[1.0, 2.0], [2.0, 2.0], [3.0, 2.0]], [[0.0, 1.0], [2.0, 2.0], [1.0, 2.0]]], np.float32)
T = np.array([[2, 1], [0, 2]], np.int64)
W = np.array([0.2, 0.3, 0.1], np.float32)


def test_nll_reductions_match_spec_examples():
    np.testing.assert_allclose(nll_loss(X, T, reduction="none"), [[-3.0, -2.0], [-0.0, -2.0]])
    np.testing.assert_allclose(nll_loss(X, T, W, reduction="sum"), -1.1, rtol=1e-6)
    np.testing.assert_allclose(nll_loss(X, T, W, reduction="mean"), -1.1 / 0.7, rtol=1e-6)
    assert nll_loss(X, T, reduction="mean").dtype == np.float32


def test_nll_ignore_index_masks_loss_and_weight_even_out_of_range():
    t = np.array([[2, -5], [0, -5]])  # -5 is ignored although it is no class
    loss = nll_loss(X, t, W, reduction="none", ignore_index=-5)
    np.testing.assert_allclose(loss, [[-0.3, 0.0], [-0.0, 0.0]], rtol=1e-6)
    # mean divides by the weights of the kept samples only: (-0.3 - 0) / (0.1 + 0.2)
    np.testing.assert_allclose(nll_loss(X, t, W, ignore_index=-5), -1.0, rtol=1e-6)
    # without weights the mean is over the kept samples: (-3 - 0) / 2
    np.testing.assert_allclose(nll_loss(X, t, ignore_index=-5), -1.5, rtol=1e-6)


def test_nll_rejects_bad_target():
    with pytest.raises(ExecutionError, match="target values"):
        nll_loss(X, np.array([[3, 0], [0, 0]]))


def test_softmax_cross_entropy_plugin_outputs_loss_and_log_prob():
    scores = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], np.float32)
    labels = np.array([2, 0])
    loss, log_prob = find_plugin("SoftmaxCrossEntropyLoss").enqueue(
        [scores, labels], {"reduction": "none", "ignore_index": None, "with_log_prob": True})
    lse = np.log(np.exp(1.0) + np.exp(2.0) + np.exp(3.0))
    np.testing.assert_allclose(log_prob[0], [1 - lse, 2 - lse, 3 - lse], rtol=1e-6)
    np.testing.assert_allclose(loss, [lse - 3.0, np.log(3.0)], rtol=1e-6)
    np.testing.assert_allclose(np.exp(log_softmax(scores)).sum(1), 1.0, rtol=1e-6)
    (mean,) = find_plugin("SoftmaxCrossEntropyLoss").enqueue([scores, labels], {"reduction": "mean"})
    np.testing.assert_allclose(mean, (lse - 3.0 + np.log(3.0)) / 2, rtol=1e-6)


def test_optimisers_one_step():
    r, t0, t1 = np.array(0.1, np.float32), np.array(0), np.array(1)
    x, g, v = np.array([1.0], np.float32), np.array([-1.0], np.float32), np.array([2.0], np.float32)
    fields = {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.0, "mode": "standard"}
    xn, vn = find_plugin("Momentum").enqueue([r, t1, x, g, v], fields)
    np.testing.assert_allclose(vn, [0.9 * 2 - 0.5], rtol=1e-6)
    np.testing.assert_allclose(xn, [1 - 0.1 * 1.3], rtol=1e-6)
    xn, vn = find_plugin("Momentum").enqueue([r, t0, x, g, v], dict(fields, mode="nesterov"))
    np.testing.assert_allclose(vn, [1.8 - 1.0], rtol=1e-6)  # beta counts as 1 on the first step
    np.testing.assert_allclose(xn, [1 - 0.1 * (-1.0 + 0.9 * 0.8)], rtol=1e-6)
    xn, hn = find_plugin("Adagrad").enqueue([r, t1, x, g, np.array([3.0], np.float32)],
                                            {"norm_coefficient": 0.0, "decay_factor": 1.0, "epsilon": 0.0})
    np.testing.assert_allclose(hn, [4.0])
    np.testing.assert_allclose(xn, [1 + 0.05 / 2.0], rtol=1e-6)
    h = np.array([0.5], np.float32)
    xn, vn, hn = find_plugin("Adam").enqueue(
        [r, t0, x, g, v, h], {"alpha": 0.9, "beta": 0.999, "epsilon": 0.0, "norm_coefficient": 0.0,
                              "norm_coefficient_post": 0.5})
    np.testing.assert_allclose(vn, [0.9 * 2 - 0.1], rtol=1e-6)
    np.testing.assert_allclose(hn, [0.999 * 0.5 + 0.001], rtol=1e-6)
    np.testing.assert_allclose(xn, [0.5 * (1 - 0.1 * 1.7 / np.sqrt(0.5005))], rtol=1e-6)


def test_bitcast_reinterprets_bytes_and_keeps_scalars():
    bitcast = find_plugin("BitCast")
    (y,) = bitcast.enqueue([np.array(1.0, np.float32)], {"dtype": "int32"})
    assert y.shape == () and y.dtype == np.int32 and int(y) == 0x3F800000
    (b,) = bitcast.enqueue([np.array([True, False])], {"dtype": "uint8"})
    np.testing.assert_array_equal(b, [1, 0])
    (bf,) = bitcast.enqueue([np.array([0x3F80, 0xC000], np.uint16)], {"dtype": "bfloat16"})
    np.testing.assert_array_equal(bf.astype(np.float32), [1.0, -2.0])
    with pytest.raises(ExecutionError, match="differ in width"):
        bitcast.enqueue([np.zeros(2, np.float32)], {"dtype": "int64"})


def _deform_reference(x, w, off, mask, group, offset_group):
    """Per-pixel loops, 2-D, stride 1, no padding: the textbook definition."""
    n, c, hh, ww = x.shape
    oc, _, kh, kw = w.shape
    oh, ow = hh - kh + 1, ww - kw + 1
    off = off.reshape(n, offset_group, kh, kw, 2, oh, ow)
    mask = mask.reshape(n, offset_group, kh, kw, oh, ow)

    def at(img, y, xx):
        y0, x0 = int(np.floor(y)), int(np.floor(xx))
        total = 0.0
        for dy in (0, 1):
            for dx in (0, 1):
                yy, xc = y0 + dy, x0 + dx
                if 0 <= yy < hh and 0 <= xc < ww:
                    total += img[yy, xc] * (1 - abs(y - yy)) * (1 - abs(xx - xc))
        return total

    y = np.zeros((n, oc, oh, ow))
    cpg, opg, cpo = c // group, oc // group, c // offset_group
    for b in range(n):
        for o in range(oc):
            gi = o // opg
            for i in range(oh):
                for j in range(ow):
                    for ci in range(cpg):
                        ch = gi * cpg + ci
                        og = ch // cpo
                        for p in range(kh):
                            for q in range(kw):
                                sy, sx = i + p + off[b, og, p, q, 0, i, j], j + q + off[b, og, p, q, 1, i, j]
                                y[b, o, i, j] += w[o, ci, p, q] * mask[b, og, p, q, i, j] * at(x[b, ch], sy, sx)
    return y


def test_deform_conv_matches_per_pixel_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 5, 6))
    w = rng.standard_normal((6, 2, 2, 3))
    off = rng.uniform(-2, 2, (2, 2 * 6 * 2, 4, 4))
    mask = rng.uniform(0, 1, (2, 2 * 6, 4, 4))
    got = deform_conv(x, w, off, None, mask, group=2, offset_group=2)
    np.testing.assert_allclose(got, _deform_reference(x, w, off, mask, 2, 2), rtol=1e-10, atol=1e-12)


def test_deform_conv_with_zero_offsets_is_a_convolution():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 3, 3))
    off = np.zeros((1, 18, 4, 4))
    got = deform_conv(x, w, off, np.array([1.0, 2.0, 3.0]), pads=[1, 1, 1, 1])
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.array([[[[np.sum(xp[0, :, i:i + 3, j:j + 3] * w[o]) for j in range(4)] for i in range(4)]
                      for o in range(3)]]) + np.array([1.0, 2.0, 3.0])[None, :, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-10)
