"""Recurrent layers on the GPU: a forward LSTM (ONNX semantics, default activations, no peepholes, clip or
sequence lengths). The input projection of every step is one cuBLASLt GEMM up front (both biases folded in); each
step is one GEMM h R^T accumulating onto that step's projection (cuBLASLt's C) and one NVRTC cell kernel writing
h straight into Y. Other configurations run as host layers (the CPU's time-loop kernel)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.driver import context
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import on_device, out_array
from native.tactics import Tactic, TacticRefusal, register_tactic

_DEFAULT = ("sigmoid", "tanh", "tanh")


@register_tactic
class GpuLstm(Tactic):
    kind, name, device = "RNN", "cublaslt-steps", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def supports(self, op, input_shapes):
        p = op.params
        if missing("cublasLt"):
            return missing("cublasLt")
        if p.get("cell", "LSTM") != "LSTM" or p.get("direction", "forward") != "forward":
            return "only forward LSTMs run on the GPU"
        if p.get("layout", 0) != 0 or p.get("clip") is not None or p.get("input_forget"):
            return "layout 1, clip and input_forget run on the host"
        acts = [a.lower() for a in (p.get("activations") or _DEFAULT)]
        if tuple(acts) != _DEFAULT:
            return f"activations {acts} run on the host"
        if input_shapes and len(input_shapes) > 4 and input_shapes[4] is not None:
            return "sequence lengths run on the host"
        if input_shapes and len(input_shapes) > 7 and input_shapes[7] is not None:
            return "peepholes run on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm_lt import gemm
        ins = list(inputs) + [None] * (8 - len(inputs))
        x, w, r, b, lens, h0, c0, peep = ins
        if lens is not None or peep is not None or why_not(op):
            raise TacticRefusal("sequence lengths / peepholes / this configuration run on the host")
        x = on_device(x)
        if x.dtype != np.float32:
            raise TacticRefusal(f"GPU LSTM takes float32, got {x.dtype}")
        wd, rd, bd = _prepared(w, r, b)
        gh, hidden = wd.shape[0], wd.shape[0] // 4
        steps, batch, _ = x.shape
        y = out_array(outputs, 0, (steps, 1, batch, hidden), np.float32)
        yh = out_array(outputs, 1, (1, batch, hidden), np.float32)
        yc = out_array(outputs, 2, (1, batch, hidden), np.float32)
        ctx = context()
        for v in (h0, c0):
            if v is not None and np.dtype(v.dtype) != np.float32:
                raise TacticRefusal("initial states in another type run on the host")
        if c0 is None:
            ctx.memset0(yc.ptr, yc.nbytes)
        else:
            # held until the copy is enqueued: a host initial state (an FP16 build's constant) is uploaded to a
            # temporary whose memory must outlive the asynchronous copy's enqueue (silero_vad_sequence --fp16)
            c0d = on_device(c0)
            if c0d.nbytes != yc.nbytes:
                raise ValueError(f"initial cell state of shape {tuple(c0d.shape)} does not match the LSTM's "
                                 f"(1, {batch}, {hidden})")
            ctx.copy(yc.ptr, c0d.ptr, yc.nbytes)
        h = on_device(h0).reshape((batch, hidden)) if h0 is not None else None
        if h is None:
            h = GpuArray((batch, hidden), np.float32)
            ctx.memset0(h.ptr, h.nbytes)
        xw = gemm(x.reshape((steps * batch, x.shape[2])), wd, 0, transpose_b=True, epilogue="BIAS", bias=bd)
        step_bytes = batch * gh * 4
        fn = kernel("rnn.cu", "lstm_cell")
        for t in range(steps):
            xw_t = GpuArray((batch, gh), np.float32, xw.ptr + t * step_bytes, base=xw)
            g = gemm(h, rd, 0, transpose_b=True, c=xw_t)
            h = GpuArray((batch, hidden), np.float32, y.ptr + t * batch * hidden * 4, base=y)
            launch(fn, grid_for(batch * hidden), (256, 1, 1),
                   [np.uint64(h.ptr), np.uint64(yc.ptr), np.uint64(g.ptr), np.int64(batch), np.int64(hidden)])
        if steps:
            ctx.copy(yh.ptr, h.ptr, yh.nbytes)
        elif h0 is not None:
            ctx.copy(yh.ptr, h.ptr, yh.nbytes)
        else:
            ctx.memset0(yh.ptr, yh.nbytes)
        return [y, yh, yc]


_PREP: dict = {}


def _prepared(w, r, b):
    """W [4H, I] and R [4H, H] of the single direction on the device, and the two biases summed (float32), prepared
    once per set of weight tensors (the engine's device constants are the same objects every run)."""
    key = (id(w), id(r), id(b))
    hit = _PREP.get(key)
    if hit is None or hit[0] is not w or hit[1] is not r or hit[2] is not b:
        w_h, r_h = np.asarray(to_np(w), np.float32), np.asarray(to_np(r), np.float32)
        if w_h.shape[0] != 1:
            raise TacticRefusal("bidirectional weights run on the host")
        gh = w_h.shape[1]
        bias = np.zeros(2 * gh, np.float32) if b is None else np.asarray(to_np(b), np.float32).reshape(-1)
        if len(_PREP) > 256:
            _PREP.clear()
        hit = _PREP[key] = (w, r, b, GpuArray.from_host(np.ascontiguousarray(w_h[0])),
                            GpuArray.from_host(np.ascontiguousarray(r_h[0])),
                            GpuArray.from_host((bias[:gh] + bias[gh:]).astype(np.float32)))
    return hit[3:]


def why_not(op):
    """Why this layer's configuration is not the GPU LSTM's (None when it is)."""
    return GpuLstm().supports(op, None)


def to_np(v):
    """A weight as numpy (downloaded when it lives on the device)."""
    from native.cuda.array import to_host
    return to_host(v)
