"""The STFT plugin on the GPU for real signals: frames gathered by one strided copy, then one GEMM with a DFT basis
that has the window folded in (built once in float64 per frame length, window and sidedness, then stored float32),
whose interleaved real / imaginary columns give the [batch, frames, bins, 2] output directly. The CPU plugin
computes in float64 with an FFT; this is float32 arithmetic (a GEMM reduction over the frame), within ~1e-6 of
it relative to the spectrum's scale."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.tactics.common import on_device, out_array
from native.cuda.tactics.geometry import host_value
from native.tactics import Tactic, TacticRefusal, register_tactic

_BASES: dict = {}


def basis(frame_len: int, window, onesided: bool) -> GpuArray:
    """[frame_len, 2 * bins] float32: column 2k is w[n] cos(2 pi k n / N), column 2k+1 is -w[n] sin(...)."""
    w = np.ones(frame_len) if window is None else np.asarray(window, np.float64).reshape(-1)
    key = (frame_len, w.tobytes(), onesided)
    hit = _BASES.get(key)
    if hit is None:
        bins = frame_len // 2 + 1 if onesided else frame_len
        n = np.arange(frame_len)[:, None]
        k = np.arange(bins)[None, :]
        angle = 2 * np.pi * ((n * k) % frame_len) / frame_len
        b = np.empty((frame_len, 2 * bins))
        b[:, 0::2] = w[:, None] * np.cos(angle)
        b[:, 1::2] = -w[:, None] * np.sin(angle)
        if len(_BASES) > 64:
            _BASES.clear()
        hit = _BASES[key] = GpuArray.from_host(b.astype(np.float32))
    return hit


@register_tactic
class GpuStft(Tactic):
    kind, name, device = "Plugin", "dft-gemm", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    input_dtypes = frozenset({"float32"})   # the signal: a float16 one (an FP16 build's input) runs on the host
    dtype_inputs = (0,)

    def supports(self, op, input_shapes):
        if op.params.get("plugin_type") != "STFT":
            return f"plugin {op.params.get('plugin_type')} has no GPU kernel here"
        if missing("cublasLt"):
            return missing("cublasLt")
        if input_shapes and input_shapes[0] is not None and not (
                len(input_shapes[0]) == 2 or (len(input_shapes[0]) == 3 and input_shapes[0][2] == 1)):
            return "complex signals run on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm_lt import gemm
        from native.cuda.tactics.tensor import strided_copy
        if op.params.get("plugin_type") != "STFT":
            raise TacticRefusal(f"plugin {op.params.get('plugin_type')} runs on the host")
        sig = on_device(inputs[0])
        if sig.dtype != np.float32 or not (sig.ndim == 2 or (sig.ndim == 3 and sig.shape[2] == 1)):
            raise TacticRefusal("only real float32 signals run on the GPU")
        step = int(np.asarray(host_value(inputs[1], "frame step")).reshape(-1)[0])
        window = host_value(inputs[2], "window") if len(inputs) > 2 else None
        length = host_value(inputs[3], "frame length") if len(inputs) > 3 else None
        frame_len = int(np.asarray(length).reshape(-1)[0]) if length is not None and np.size(length) else \
            int(np.size(window))
        fields = dict(op.params.get("fields") or {})
        onesided = bool(int(np.asarray(fields.get("onesided", 1)).reshape(-1)[0]))
        batch, total = sig.shape[0], sig.shape[1]
        frames = 1 + (total - frame_len) // step
        if frames <= 0 or step <= 0:
            raise TacticRefusal("no whole frame: the host plugin reports it")
        bins = frame_len // 2 + 1 if onesided else frame_len
        seg = GpuArray((batch, frames, frame_len), np.float32)
        strided_copy(sig, 0, [total, step, 1], [batch, frames, frame_len], seg)
        out = out_array(outputs, 0, (batch, frames, bins, 2), np.float32)
        flat = out.reshape((batch * frames, 2 * bins))
        gemm(seg.reshape((batch * frames, frame_len)), basis(frame_len, window, onesided), 0, outputs=[flat])
        return [out]
