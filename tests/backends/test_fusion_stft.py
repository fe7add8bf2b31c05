"""An STFT exported as two Convs of one signal (real and imaginary DFT rows times a window: openWakeWord's
melspectrogram) becomes one Convolution plus a Split (passes/fusion_stft.py), whose conv1d-dft-shared tactic
transforms each frame once; sibling convolutions that are no such basis stay as they are."""
import numpy as np
from onnx import helper

from native.cpu.kernels.conv.conv1d_dft import dft_plan
from tests.backends.fusion_helpers import build, const, kinds, model, run

RNG = np.random.default_rng(77)
N, HOP, LENGTH = 64, 16, 400


def _bases():
    n = np.arange(N)
    k = np.arange(N // 2 + 1)[:, None]
    win = (0.5 - 0.5 * np.cos(2 * np.pi * n / N)).astype(np.float64)     # periodic Hann
    real = (np.cos(2 * np.pi * k * n / N) * win).astype(np.float32)[:, None, :]
    imag = (-np.sin(2 * np.pi * k * n / N) * win).astype(np.float32)[:, None, :]
    return real, imag


def _stft_model(real, imag):
    nodes = [helper.make_node("Conv", ["x", "wr"], ["re"], strides=[HOP]),
             helper.make_node("Conv", ["x", "wi"], ["im"], strides=[HOP]),
             helper.make_node("Mul", ["re", "re"], ["re2"]), helper.make_node("Mul", ["im", "im"], ["im2"]),
             helper.make_node("Add", ["re2", "im2"], ["power"])]
    return model(nodes, [("x", [1, 1, LENGTH])], ["power", "im"], [const("wr", real), const("wi", imag)])


def test_two_stft_convolutions_of_one_signal_become_one_with_a_split():
    real, imag = _bases()
    m = _stft_model(real, imag)
    fused, plain = build(m), build(m, fusion=False)
    assert kinds(fused).count("Convolution") == 1 and "Split" in kinds(fused)
    assert kinds(plain).count("Convolution") == 2
    conv = next(n for n in fused.nodes if n.kind == "Convolution")
    assert conv.params["num_output_maps"] == 2 * (N // 2 + 1) and conv.source_nodes and len(conv.source_nodes) == 2
    x = RNG.standard_normal((1, 1, LENGTH)).astype(np.float32)
    got, want = run(fused, {"x": x}), run(plain, {"x": x})
    frames = np.lib.stride_tricks.sliding_window_view(x[0, 0].astype(np.float64), N)[::HOP]
    win = real[0, 0].astype(np.float64)
    spec = np.fft.rfft(frames * win, axis=1).T                           # float64 reference
    np.testing.assert_allclose(got[1][0], spec.imag, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0][0], np.abs(spec) ** 2, rtol=1e-4, atol=1e-3)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)


def test_sibling_convolutions_that_are_no_dft_basis_stay_apart():
    a = RNG.standard_normal((8, 1, N)).astype(np.float32)
    b = RNG.standard_normal((8, 1, N)).astype(np.float32)
    assert isinstance(dft_plan(np.concatenate([a, b])), str)
    fused = build(_stft_model(a, b))
    assert kinds(fused).count("Convolution") == 2 and "Split" not in kinds(fused)
