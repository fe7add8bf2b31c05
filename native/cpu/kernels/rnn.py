"""CPU kernel: recurrent layers (ONNX RNN / GRU / LSTM semantics, TensorRT's RNNv2 layer).

The input projection X @ W^T of every time step is one GEMM up front; the loop runs over time steps only, with
one small GEMM for the recurrence. Sequence lengths are handled by masking: past a batch item's length its state
is held and its output is zero; the reverse direction walks each item's own valid span backwards.

Tactics: "time-loop" (numpy, every form above) and "lstm-direct" (a plain forward float32 LSTM whose sequences run
every step: the time loop as one compiled call, native/cpu/jit_rnn.py, the numba extra; its sigmoid / tanh are
polyexp's, so its floats are its own and the builder times it against time-loop).
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.tactics import Tactic, register_tactic, simple_tactic


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def activation(name, alpha=None, beta=None):
    n = name.lower()
    if n == "sigmoid":
        return _sigmoid
    if n == "tanh":
        return np.tanh
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "affine":
        return lambda x: (1.0 if alpha is None else alpha) * x + (0.0 if beta is None else beta)
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * x)
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > a, x, 0)
    if n == "scaledtanh":
        return lambda x: (1.0 if alpha is None else alpha) * np.tanh((1.0 if beta is None else beta) * x)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: np.clip(a * x + b, 0, 1)
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.logaddexp(0, x)
    raise ValueError(f"unsupported RNN activation {name!r}")


_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _acts(p, cell, ndir):
    names = p.get("activations") or _DEFAULT_ACTS[cell] * ndir
    per = len(_DEFAULT_ACTS[cell])
    if len(names) == per and ndir == 2:
        names = names * 2
    alphas = p.get("activation_alpha") or []
    betas = p.get("activation_beta") or []
    fns = [activation(nm, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
           for i, nm in enumerate(names)]
    return [fns[d * per:(d + 1) * per] for d in range(ndir)]


def _run_direction(cell, xw, w_r, b_r, h, c, peep, acts, mask, clip, lbr, input_forget):
    """Loop over time for one direction. xw: [T, B, G*H] (input projection + W bias); returns Y [T, B, H], h, c."""
    steps, batch = xw.shape[:2]
    hidden = h.shape[-1]
    ys = np.zeros((steps, batch, hidden), dtype=xw.dtype)

    def clipped(v):
        return np.clip(v, -clip, clip) if clip is not None else v

    if clip is None:
        def clipped(v):
            return v
    whole = bool(mask.all())   # no sequence shorter than the batch's: np.where(True, a, b) is a itself, skipped
    for t in range(steps):
        m = mask[t][:, None]
        if cell == "GRU":
            gx = xw[t]
            hr = h @ w_r.T
            z = acts[0](clipped(gx[:, :hidden] + hr[:, :hidden] + b_r[:hidden]))
            r = acts[0](clipped(gx[:, hidden:2 * hidden] + hr[:, hidden:2 * hidden] + b_r[hidden:2 * hidden]))
            if lbr:
                hh = acts[1](clipped(gx[:, 2 * hidden:] + r * (hr[:, 2 * hidden:] + b_r[2 * hidden:])))
            else:
                hh = acts[1](clipped(gx[:, 2 * hidden:] + (r * h) @ w_r[2 * hidden:].T + b_r[2 * hidden:]))
            new_h = (1 - z) * hh + z * h
        elif cell == "LSTM":
            g = xw[t] + h @ w_r.T + b_r
            gi, go, gf, gc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            if peep is not None:
                gi = gi + peep[0] * c
                gf = gf + peep[2] * c
            i = acts[0](clipped(gi))
            f = 1 - i if input_forget else acts[0](clipped(gf))
            cc = acts[1](clipped(gc))
            new_c = f * c + i * cc
            if peep is not None:
                go = go + peep[1] * new_c
            o = acts[0](clipped(go))
            new_h = o * acts[2](new_c)
            c = new_c if whole else np.where(m, new_c, c)
        else:
            new_h = acts[0](clipped(xw[t] + h @ w_r.T + b_r))
        if whole:
            h = new_h
            ys[t] = new_h
        else:
            h = np.where(m, new_h, h)
            ys[t] = np.where(m, new_h, 0)
    return ys, h, c


def _plain_lstm(p, peep) -> bool:
    """An LSTM with ONNX's default activations and no peepholes, clip or coupled input-forget gate: the form
    `_lstm_steps` runs."""
    acts = p.get("activations")
    return (p.get("cell", "LSTM") == "LSTM" and peep is None and p.get("clip") is None and not p.get("input_forget")
            and (not acts or [a.lower() for a in acts] == ["sigmoid", "tanh", "tanh"] * (len(acts) // 3))
            and not p.get("activation_alpha") and not p.get("activation_beta"))


def _lstm_steps(xw, w_r, b_r, h, c):
    """`_run_direction` for a plain LSTM whose sequences all run every step, with the same operations in the same
    order (so the same bits): per step one GEMM for the recurrence, the i / o / f gates' sigmoid in one pass over
    their adjacent columns, and every temporary a buffer made once per call (out=)."""
    steps, batch = xw.shape[:2]
    hidden = h.shape[-1]
    ys = np.empty((steps, batch, hidden), dtype=xw.dtype)
    wt = w_r.T
    three = 3 * hidden
    s = np.empty((batch, three), dtype=xw.dtype)
    cc = np.empty((batch, hidden), dtype=xw.dtype)
    for t in range(steps):
        g = np.add(xw[t], h @ wt)
        g += b_r
        np.multiply(g[:, :three], 0.5, out=s)     # sigmoid(x) = 0.5 * (tanh(0.5 * x) + 1), as _sigmoid
        np.tanh(s, out=s)
        s += 1.0
        s *= 0.5
        i, o, f = s[:, :hidden], s[:, hidden:2 * hidden], s[:, 2 * hidden:]
        np.tanh(g[:, three:], out=cc)
        c = f * c
        c += i * cc
        h = np.tanh(c)
        np.multiply(o, h, out=h)
        ys[t] = h
    return ys, h, c


@simple_tactic("RNN", name="time-loop")
def rnn(op, inputs):
    """Inputs (X, W, R, B, sequence_lens, initial_h, initial_c, P); outputs (Y, Y_h[, Y_c])."""
    p = op.params
    cell = p.get("cell", "LSTM")
    ins = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, b, seq_lens, h0, c0, peep = ins
    x = np.asarray(x)
    dtype = x.dtype
    layout = p.get("layout", 0)
    if layout == 1:
        x = x.transpose(1, 0, 2)
    steps, batch = x.shape[:2]
    ndir, gh = np.asarray(w).shape[:2]
    hidden = gh // _GATES[cell]
    b = np.zeros((ndir, 2 * gh), dtype) if b is None else np.asarray(b, dtype)
    lens = np.full(batch, steps, np.int64) if seq_lens is None else np.asarray(seq_lens, np.int64)
    h0 = np.zeros((ndir, batch, hidden), dtype) if h0 is None else np.asarray(h0, dtype)
    if layout == 1:
        h0 = h0.transpose(1, 0, 2)
        c0 = None if c0 is None else np.asarray(c0).transpose(1, 0, 2)
    c0 = np.zeros((ndir, batch, hidden), dtype) if c0 is None else np.asarray(c0, dtype)
    direction = p.get("direction", "forward")
    if ndir == 1 and direction == "forward" and (seq_lens is None or bool((lens >= steps).all())) \
            and _plain_lstm(p, peep):
        xw = x @ np.asarray(w[0], dtype).T + b[0, :gh]
        y, h, c = _lstm_steps(xw, np.asarray(r[0], dtype), b[0, gh:], h0[0], c0[0])
        y, yh, yc = y[:, None], h[None], c[None]                   # [T, 1, B, H], [1, B, H]
        if layout == 1:
            y = y.transpose(2, 0, 1, 3)
            yh, yc = yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
        return [y.astype(dtype, copy=False), yh.astype(dtype, copy=False), yc.astype(dtype, copy=False)]
    acts = _acts(p, cell, ndir)
    t_idx = np.arange(steps)[:, None]
    mask = t_idx < lens[None, :]                                   # [T, B]
    ys, hs, cs = [], [], []
    for d in range(ndir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        if reverse:   # time index of step k for batch item n: len[n] - 1 - k (clamped where invalid)
            src = np.clip(lens[None, :] - 1 - t_idx, 0, steps - 1)
            xd = x[src, np.arange(batch)[None, :]]
        else:
            xd = x
        xw = xd @ np.asarray(w[d], dtype).T + b[d, :gh]
        pd = None if peep is None else np.asarray(peep[d], dtype).reshape(3, hidden)
        y, h, c = _run_direction(cell, xw, np.asarray(r[d], dtype), b[d, gh:], h0[d], c0[d], pd, acts[d], mask,
                                 p.get("clip"), p.get("linear_before_reset", 0), p.get("input_forget", 0))
        if reverse:
            out = np.zeros_like(y)
            out[src[mask], np.broadcast_to(np.arange(batch), mask.shape)[mask]] = y[mask]
            y = out
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y = np.stack(ys, axis=1)                                       # [T, D, B, H]
    yh, yc = np.stack(hs), np.stack(cs)
    if layout == 1:
        y = y.transpose(2, 0, 1, 3)
        yh, yc = yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    outs = [y.astype(dtype), yh.astype(dtype)]
    if cell == "LSTM":
        outs.append(yc.astype(dtype))
    return outs


@register_tactic
class LstmDirect(Tactic):
    """A plain forward float32 LSTM (ONNX's default activations, no peepholes / clip / coupled gates) as one compiled
    time loop (native/cpu/jit_rnn.py): the input projection of every step one BLAS GEMM up front as in time-loop,
    then per step the recurrence, the gates and the state update in one pass, no numpy call per step. A run whose
    sequence lengths stop short of the time axis takes time-loop's masking path."""
    kind = "RNN"
    name = "lstm-direct"
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        p = op.params
        if not _plain_lstm(p, None) or p.get("direction", "forward") != "forward":
            return "a plain forward LSTM only (default activations, no clip / coupled gates)"
        shapes = list(input_shapes or [])
        if len(shapes) > 7 and shapes[7] is not None:
            return "no peepholes"
        if len(shapes) > 1 and shapes[1] is not None and shapes[1][0] != 1:
            return "one direction only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 input only"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def run(self, op, inputs):
        fast = op.__dict__.get("_lstm_direct_fast")
        if fast is not None:
            outs = _held_lstm(fast, inputs)
            if outs is not None:
                return outs
        ins = list(inputs) + [None] * (8 - len(inputs))
        x, w, r, b, seq_lens, h0, c0, peep = ins
        x = np.asarray(x)
        if x.dtype != np.float32 or peep is not None or np.asarray(w).shape[0] != 1 or (
                seq_lens is not None and not bool((np.asarray(seq_lens) >= x.shape[1 if op.params.get("layout", 0)
                                                                                      else 0]).all())):
            return rnn(op, inputs)
        cfg = op.__dict__.get("_lstm_direct")
        if cfg is None or cfg[0] is not w or cfg[1] is not r or cfg[2] is not b:
            # per op, once (W, R, B are constants: the same arrays every run): W^T and R^T packed, the biases split
            gh = np.asarray(w).shape[1]
            bb = np.zeros(2 * gh, np.float32) if b is None else np.asarray(b, np.float32).reshape(-1)
            cfg = op.__dict__["_lstm_direct"] = (
                w, r, b, np.ascontiguousarray(np.asarray(w[0], np.float32).T),
                np.ascontiguousarray(np.asarray(r[0], np.float32).T), np.ascontiguousarray(bb[:gh]),
                np.ascontiguousarray(bb[gh:]), gh)
        _, _, _, wt, rt, b_w, b_r, gh = cfg
        layout = op.params.get("layout", 0)
        if layout == 1:
            x = x.transpose(1, 0, 2)
        steps, batch = x.shape[:2]
        hidden = gh // 4
        h = np.zeros((batch, hidden), np.float32) if h0 is None else \
            np.array(np.asarray(h0)[:, 0] if layout == 1 else np.asarray(h0)[0], np.float32)
        c = np.zeros((batch, hidden), np.float32) if c0 is None else \
            np.array(np.asarray(c0)[:, 0] if layout == 1 else np.asarray(c0)[0], np.float32)
        xw = x.reshape(steps * batch, -1) @ wt
        xw += b_w
        ys = np.empty((steps, batch, hidden), np.float32)
        jit.kernel("lstm_steps")(xw.reshape(steps, batch, gh), rt, b_r, h, c, ys, np.empty(gh, np.float32))
        y, yh, yc = ys[:, None], h[None], c[None]
        if layout == 1:
            y = y.transpose(2, 0, 1, 3)
            yh, yc = yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
        elif seq_lens is None and type(inputs[0]) is np.ndarray and len(inputs) <= 8:
            op.__dict__["_lstm_direct_fast"] = (inputs[0].shape, w, r, b, wt, rt, b_w, b_r, gh,
                                                jit.kernel("lstm_steps"))
        return [y, yh, yc]


_F32 = np.dtype(np.float32)


def _held_lstm(fast, inputs):
    """lstm-direct's run for the case its last run held (layout 0, no sequence lengths or peepholes, the same
    float32 input shape and weights): the same projection, kernel call and outputs, without run's per-call checks
    and recipe look-up (~2 us of silero-vad's ~10). None where the inputs differ from that case."""
    shape, w, r, b, wt, rt, b_w, b_r, gh, kernel = fast
    n = len(inputs)
    x = inputs[0]
    if n > 8 or type(x) is not np.ndarray or x.shape != shape or x.dtype is not _F32 or inputs[1] is not w or \
            inputs[2] is not r or (inputs[3] if n > 3 else None) is not b or (n > 4 and inputs[4] is not None) or \
            (n > 7 and inputs[7] is not None):
        return None
    steps, batch = shape[0], shape[1]
    hidden = gh // 4
    h0 = inputs[5] if n > 5 else None
    c0 = inputs[6] if n > 6 else None
    h = np.zeros((batch, hidden), np.float32) if h0 is None else np.array(np.asarray(h0)[0], np.float32)
    c = np.zeros((batch, hidden), np.float32) if c0 is None else np.array(np.asarray(c0)[0], np.float32)
    xw = x.reshape(steps * batch, -1) @ wt
    xw += b_w
    ys = np.empty((steps, batch, hidden), np.float32)
    kernel(xw.reshape(steps, batch, gh), rt, b_r, h, c, ys, np.empty(gh, np.float32))
    return [ys[:, None], h[None], c[None]]
