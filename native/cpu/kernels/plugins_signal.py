"""Built-in plugins for signal processing: DFT, STFT, Hann/Hamming/Blackman windows, MelWeightMatrix.

Dtype fields arrive as numpy names (the importer converts ONNX's enums), so these kernels stay ONNX-free.
"""
import numpy as np

from native.plugins import Plugin, register_plugin


def _scalar(x, default=None):
    return default if x is None or np.size(x) == 0 else np.asarray(x).reshape(-1)[0].item()


def _to_complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


def _from_complex(z, dtype):
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


@register_plugin
class DFTPlugin(Plugin):
    """DFT / IDFT / RFFT / IRFFT along one signal axis of a [..., 1|2] real-or-complex tensor.
    Field `axis_input` (set by the importer from opset 20) says the axis comes as input 2, not a field."""

    name = "DFT"

    def enqueue(self, inputs, fields):
        x = inputs[0]
        length = _scalar(inputs[1] if len(inputs) > 1 else None)
        if fields.get("axis_input"):
            axis = int(_scalar(inputs[2] if len(inputs) > 2 else None, -2))
        else:
            axis = int(fields.get("axis", 1))
        axis = axis % x.ndim
        inverse, onesided = int(fields.get("inverse", 0)), int(fields.get("onesided", 0))
        z = _to_complex(x.astype(np.float64))
        if inverse and onesided:
            n = int(length) if length is not None else 2 * (x.shape[axis] - 1)
            y = np.fft.irfft(z, n=n, axis=axis)
            return [y[..., None].astype(x.dtype)]
        n = int(length) if length is not None else x.shape[axis]
        if inverse:
            y = np.fft.ifft(z, n=n, axis=axis)
        else:
            y = np.fft.fft(z, n=n, axis=axis)
            if onesided:
                y = np.take(y, np.arange(n // 2 + 1), axis=axis)
        return [_from_complex(y, x.dtype)]


@register_plugin
class STFTPlugin(Plugin):
    """Short-time Fourier transform of [batch, length, 1|2] signals: frames of `frame_length` every
    `frame_step`, times the window, then a (one-sided by default) DFT."""

    name = "STFT"

    def enqueue(self, inputs, fields):
        sig, step = inputs[0], int(_scalar(inputs[1]))
        window = inputs[2] if len(inputs) > 2 else None
        frame_len = _scalar(inputs[3] if len(inputs) > 3 else None)
        frame_len = int(frame_len) if frame_len is not None else int(np.size(window))
        onesided = int(fields.get("onesided", 1))
        # [B, L] is accepted as a real signal (ONNX Runtime does; exporters such as onnx-asr's emit it)
        z = sig.astype(np.float64) if sig.ndim == 2 else _to_complex(sig.astype(np.float64))  # (B, L)
        frames = 1 + (z.shape[1] - frame_len) // step
        idx = np.arange(frames)[:, None] * step + np.arange(frame_len)[None, :]
        seg = z[:, idx]  # (B, frames, frame_len)
        if window is not None:
            seg = seg * np.asarray(window, np.float64)
        y = np.fft.fft(seg, axis=-1)
        if onesided:
            y = y[..., : frame_len // 2 + 1]
        return [_from_complex(y, sig.dtype)]


class _Window(Plugin):
    """sum_k a_k cos(2 pi k n / N) with N = size (periodic) or size - 1 (symmetric)."""

    coefficients = ()

    def enqueue(self, inputs, fields):
        size = int(_scalar(inputs[0]))
        denom = size if int(fields.get("periodic", 1)) else size - 1
        n = np.arange(size, dtype=np.float64)
        w = sum(a * np.cos(2 * np.pi * k * n / max(denom, 1)) for k, a in enumerate(self.coefficients))
        return [w.astype(fields.get("dtype", "float32"))]


@register_plugin
class HannWindowPlugin(_Window):
    name = "HannWindow"
    coefficients = (0.5, -0.5)


@register_plugin
class HammingWindowPlugin(_Window):
    name = "HammingWindow"
    coefficients = (25 / 46, -21 / 46)


@register_plugin
class BlackmanWindowPlugin(_Window):
    name = "BlackmanWindow"
    coefficients = (0.42, -0.5, 0.08)


@register_plugin
class MelWeightMatrixPlugin(Plugin):
    """[dft_length//2 + 1, num_mel_bins] triangular filters, equally spaced on the mel scale
    mel(f) = 2595 log10(1 + f / 700), each peaking at 1 on its centre spectrogram bin."""

    name = "MelWeightMatrix"

    def enqueue(self, inputs, fields):
        mels, dft_len, rate = (int(_scalar(v)) for v in inputs[:3])
        lo, hi = float(_scalar(inputs[3])), float(_scalar(inputs[4]))
        bins = dft_len // 2 + 1
        to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
        edges_mel = to_mel(lo) + np.arange(mels + 2) * (to_mel(hi) - to_mel(lo)) / (mels + 2)
        edges_hz = 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)
        edge_bin = np.floor((dft_len + 1) * edges_hz / max(rate, 1)).astype(np.int64)
        left, centre, right = edge_bin[:-2, None], edge_bin[1:-1, None], edge_bin[2:, None]  # (mels, 1)
        j = np.arange(bins)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            rise = np.where((j >= left) & (j <= centre), (j - left) / np.maximum(centre - left, 1), 0.0)
            fall = np.where((j > centre) & (j < right), (right - j) / np.maximum(right - centre, 1), 0.0)
        w = np.where((centre == left) & (j == centre), 1.0, rise) + fall
        return [w.T.astype(fields.get("dtype", "float32"))]
