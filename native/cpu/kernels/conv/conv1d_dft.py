"""The conv1d-dft tactic: an STFT written as a 1-D Conv, computed as what it is: real FFTs of windowed frames.

Audio front ends export their STFT as a Conv of one input channel whose weights are a windowed DFT basis: rows
win[n] * cos(2 pi k n / N) for k = 0..N/2 and / or rows +-win[n] * sin(2 pi k n / N), N the kernel length
(openwakeword's melspectrogram: two Convs of 257 rows, the real and the imaginary part; NeMo's 514 rows, both;
silero-vad's 258 of N = 256). As a GEMM that is M * N multiply-adds per frame (26.6M for NeMo's second of audio);
an FFT needs ~N log N. At build time `prepare` recognises the basis (each block of N/2 + 1 rows fitted to cos / sin
rows times one window by least squares; the fit must reproduce every weight within 1e-6 of the largest), keeps the
window(s) and what each block takes from the spectrum; a run copies the frames, multiplies them by the window in
float64, runs numpy's rfft (float64) and writes the real / imaginary parts (with their signs) into the output,
rounded once to float32. Not the GEMM's rounding (better: one rounding of a float64 transform), so its own tactic,
timed against the GEMM tactics; weights that are not such a basis are refused with the reason.
"""
from __future__ import annotations

import numpy as np

from native.cpu import threads as pool
from native.cpu.kernels.conv.conv1d_direct import as_1d
from native.cpu.kernels.conv.epilogue import region_epilogue
from native.cpu.kernels.conv.geometry import geometry
from native.tactics import Tactic, register_tactic

FIT_TOLERANCE = 1e-6   # the fitted basis reproduces every weight within this fraction of the largest one
MIN_FRAMES_SPLIT = 128  # fewer frames: one thread. The parts are Python (numpy's FFTs and copies), so the
                        # worker waits for the GIL between calls: NeMo's 101 frames of 512 took 273 us in two
                        # parts against 232 in one, 401 frames 492 against 792 (2 threads, quiet, 2026-11-29)


def dft_plan(w, share=False):
    """For float weights [M, 1, N] (or [M, 1, 1, N]): (N, windows [W, N] float64, blocks) where each block of
    N/2 + 1 output rows is (part 0 real / 1 imaginary, window index, sign), so that block rows k compute
    sign * part(rfft(frame * windows[i]))[k] (the imaginary part negated: numpy's transform has e^-i); or a string
    saying why the weights are not a windowed DFT basis. Blocks with equal (or negated) windows share one
    transform; with `share`, so do blocks that another's window reproduces within the fit tolerance
    (conv1d-dft-shared: other floats, within that tolerance)."""
    w = np.asarray(w)
    if w.ndim not in (3, 4) or w.shape[1] != 1 or (w.ndim == 4 and w.shape[2] != 1):
        return "one input channel and [M, 1, N] weights only"
    n = w.shape[-1]
    h = n // 2 + 1
    m = w.shape[0]
    if n % 2 or n < 16:
        return "an even kernel of at least 16 taps only"
    if m % h:
        return f"{m} output rows are not blocks of N/2 + 1 = {h} DFT rows"
    rows = w.reshape(m, n).astype(np.float64)
    scale = float(np.abs(rows).max())
    if not np.isfinite(scale) or scale == 0:
        return "the weights are not a windowed DFT basis (zero or non-finite)"
    angle = 2 * np.pi * np.outer(np.arange(h), np.arange(n)) / n
    bases = (np.cos(angle), np.sin(angle))
    windows, blocks = [], []
    for j in range(m // h):
        b = rows[j * h:(j + 1) * h]
        part = 0 if np.abs(b[0]).max() > FIT_TOLERANCE * scale else 1   # sin's k = 0 row is all zeros
        basis = bases[part]
        den = (basis * basis).sum(0)
        win = np.where(den > 1e-9, (b * basis).sum(0) / np.where(den > 1e-9, den, 1.0), 0.0)
        if np.abs(b - win * basis).max() > FIT_TOLERANCE * scale:
            return "the weights are not a windowed DFT basis"
        # the transform's imaginary part is -sum(x * win * sin): a sin block takes it with the sign -1
        sign = -1.0 if part else 1.0
        shared = _shared_window(windows, win, b, basis, FIT_TOLERANCE * scale if share else None)
        if shared is not None:
            blocks.append((part, shared[0], sign * shared[1]))
        else:
            windows.append(win)
            blocks.append((part, len(windows) - 1, sign))
    return n, np.stack(windows), tuple(blocks)


def _shared_window(windows, win, b, basis, tol):
    """(index, sign) of a window already fitted that reproduces this block's rows `b` within `tol` (itself or
    negated), so the block takes its part of that window's transform: one FFT per frame for a real + imaginary
    pair (NeMo's STFT: the sin block's fit is 0 at n = 0 and N/2, where every sin row is 0, and differs from the
    cos block's in the last bits elsewhere, yet the cos block's window reproduces the sin rows within the
    tolerance); None where none does. An equal window first (the same floats as before for blocks fitted alike);
    `tol` None: equal windows only."""
    for i, have in enumerate(windows):
        if np.array_equal(have, win):
            return i, 1.0
        if np.array_equal(have, -win):
            return i, -1.0
    if tol is None:
        return None
    for i, have in enumerate(windows):
        for sign in (1.0, -1.0):
            if np.abs(b - sign * have * basis).max() <= tol:
                return i, sign
    return None


@register_tactic
class Conv1dDft(Tactic):
    """A Conv whose weights are a windowed DFT basis, as real FFTs of windowed frames (module docstring)."""
    kind, name = "Convolution", "conv1d-dft"
    honours = {"post_ops"}
    writes_outputs = True
    share = False      # conv1d-dft-shared: windows within the fit tolerance share a transform

    def supports(self, op, input_shapes):
        p = op.params
        ks = list(p.get("kernel_shape") or [])
        shape = input_shapes[0] if input_shapes else None
        if not as_1d(shape, ks):
            return "1-D convolutions (or height-1 2-D ones) of known input shape only"
        if shape[1] != 1 or (p.get("groups", 1) or 1) != 1 or p.get("integer") or p.get("side"):
            return "ungrouped float convolutions of one input channel only"
        if any(d != 1 for d in (p.get("dilations") or [1])):
            return "no dilation"
        pads = list(p.get("pre_padding") or []) + list(p.get("post_padding") or [])
        if any(v < 0 for v in pads) or (len(ks) == 2 and any((p.get(key) or [0, 0])[0]
                                                             for key in ("pre_padding", "post_padding"))):
            return "no cropping pads, none along the height-1 axis"
        if any(s["op"] == "add" or (s["op"] == "bias" and s.get("axis", 1) != 1) for s in p.get("post_ops") or ()):
            return "no fused residual add"
        if "dft_windows" in op.weights:
            return None
        w = op.weights.get("kernel")
        if w is None:
            return "needs constant weights"
        plan = _plan(op, w, self.share)
        if isinstance(plan, str):
            return plan
        if self.share and len(plan[1]) == len(_plan(op, w, False)[1]):
            return "no window to share beyond the equal ones (conv1d-dft runs it)"
        return None

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        plan = _plan(op, w, self.share)
        if isinstance(plan, str):
            return op.weights
        n, windows, blocks = plan
        weights = {key: v for key, v in op.weights.items() if key != "kernel"}
        weights["dft_windows"] = windows
        weights["dft_blocks"] = np.array([[part, i, sign] for part, i, sign in blocks], np.float64)
        weights["dft_rows"] = np.array([w.shape[0]], np.int64)
        return weights

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = inputs[0]
        held = op.__dict__.get("_dft_run")
        if held is not None and type(x) is np.ndarray and x.shape == held[0] and x.dtype is held[1] \
                and held[2] is op.weights and x.flags.c_contiguous:
            return _held_run(held, x, outputs)
        x = np.asarray(x)
        if "dft_windows" in op.weights and x.flags.c_contiguous and x.dtype in _DTYPES and x.size and \
                "bias" not in op.weights and not op.params.get("post_ops"):
            op.__dict__["_dft_run"] = _recipe(op, x)
        if "dft_windows" in op.weights:
            windows = op.weights["dft_windows"]
            blocks = [(int(p), int(i), float(s)) for p, i, s in op.weights["dft_blocks"]]
            m = int(op.weights["dft_rows"][0])
            n = windows.shape[1]
        else:
            w = op.weights.get("kernel")
            plan = _plan(op, w if w is not None else inputs[1], self.share)
            if isinstance(plan, str):
                raise ValueError(f"conv1d-dft: {plan}")
            n, windows, blocks = plan
            m = len(blocks) * (n // 2 + 1)
        b = op.weights.get("bias")
        if b is None and "kernel" not in op.weights and "dft_windows" not in op.weights and len(inputs) > 2:
            b = inputs[2]
        dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
        bias = None if b is None else np.asarray(b, dtype).reshape(-1)
        out4 = x.ndim == 4
        x3 = x.reshape(x.shape[0], 1, x.shape[-1])
        length = x3.shape[2]
        strides, _, pre, post, out = geometry(op.params, x.shape, [1, n] if out4 else [n])
        s, pre, post, t = strides[-1], pre[-1], post[-1], out[-1]
        batch = x3.shape[0]
        if pre or post:
            xp = np.zeros((batch, 1, length + pre + post), x3.dtype)
            xp[:, :, pre:pre + length] = x3
            x3 = xp
        shape = (batch, m, 1, t) if out4 else (batch, m, t)
        dst = outputs[0] if outputs else None
        y = dst if dst is not None and dst.shape == shape and dst.dtype == dtype and dst.flags.c_contiguous \
            else np.empty(shape, dtype)
        y3 = y.reshape(batch, m, t)
        h = n // 2 + 1
        step = x3.strides[2]

        def frames_part(task):
            ni, t0, t1 = task
            fr = np.lib.stride_tricks.as_strided(x3[ni, 0, t0 * s:], (t1 - t0, n), (step * s, step), writeable=False)
            specs = [np.fft.rfft(fr * win, axis=1) for win in windows]          # float64 products, float64 FFTs
            for j, (part, i, sign) in enumerate(blocks):
                spec = specs[i].imag if part else specs[i].real
                dst_block = y3[ni, j * h:(j + 1) * h, t0:t1]
                if sign < 0:
                    np.negative(spec.T, out=dst_block, casting="same_kind")
                else:
                    np.copyto(dst_block, spec.T, casting="same_kind")
        parts = 2 if pool.num_threads() > 1 and t >= MIN_FRAMES_SPLIT else 1
        tasks = [(ni, a, z) for ni in range(batch) for a, z in pool.split(t, parts)]
        pool.parallel_for(frames_part, tasks)
        if bias is not None or op.params.get("post_ops"):
            region_epilogue(y3.reshape(batch, m, 1, t), (slice(None), slice(None)), op, inputs, bias)
        return [y]


_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _recipe(op, x):
    """What `run` works out per op and input shape, for packed weights, a C-contiguous float input and no bias
    or post-ops: (shape, dtype, weights, windows, blocks as (part, window, negate, output rows), kernel length,
    stride, pads, frames, batch, output shape)."""
    windows = op.weights["dft_windows"]
    n = windows.shape[1]
    h = n // 2 + 1
    blocks = tuple((int(p), int(i), float(s) < 0, slice(j * h, (j + 1) * h))
                   for j, (p, i, s) in enumerate(op.weights["dft_blocks"]))
    m = int(op.weights["dft_rows"][0])
    out4 = x.ndim == 4
    strides, _, pre, post, out = geometry(op.params, x.shape, [1, n] if out4 else [n])
    t, batch = out[-1], x.shape[0]
    return (x.shape, x.dtype, op.weights, windows, blocks, n, strides[-1], pre[-1], post[-1], t, batch,
            (batch, m, 1, t) if out4 else (batch, m, t))


def _held_run(held, x, outputs):
    """`run` by its recipe: the frames as one strided view of the (padded) signals made by the ndarray constructor
    (np.lib.stride_tricks.as_strided costs ~2 us a call); below MIN_FRAMES_SPLIT frames one thread, without the
    pool's hand-off, and one transform call for the whole batch. The same products, transforms and copies as
    `run`: the same floats."""
    _, dtype, _, windows, blocks, n, s, pre, post, t, batch, shape = held
    length = x.shape[-1]
    x2 = x.reshape(batch, length)
    if pre or post:
        xp = np.zeros((batch, length + pre + post), dtype)
        xp[:, pre:pre + length] = x2
        x2 = xp
    dst = outputs[0] if outputs else None
    y = dst if dst is not None and dst.shape == shape and dst.dtype == dtype and dst.flags.c_contiguous \
        else np.empty(shape, dtype)
    y3 = y.reshape(batch, shape[1], t)
    size = dtype.itemsize
    row = x2.shape[1] * size

    def frames_part(task):
        ni, t0, t1 = task
        fr = np.ndarray((t1 - t0, n), dtype, x2, ni * row + t0 * s * size, (s * size, size))
        specs = [np.fft.rfft(fr * win, axis=1) for win in windows]          # float64 products, float64 FFTs
        yn = y3[ni]
        for part, i, negate, rows in blocks:
            spec = specs[i].imag if part else specs[i].real
            dst_block = yn[rows, t0:t1] if t1 - t0 != t else yn[rows]
            if negate:
                np.negative(spec.T, out=dst_block, casting="same_kind")
            else:
                np.copyto(dst_block, spec.T, casting="same_kind")
    if t < MIN_FRAMES_SPLIT or pool.num_threads() == 1:
        # every signal's frames as one [batch, t, n] view: one product and one transform call for the batch
        # (the same transforms of the same frames, row by row)
        fr = np.ndarray((batch, t, n), dtype, x2, 0, (row, s * size, size))
        specs = [np.fft.rfft(fr * win, axis=2) for win in windows]
        for part, i, negate, rows in blocks:
            spec = (specs[i].imag if part else specs[i].real).transpose(0, 2, 1)
            if negate:
                np.negative(spec, out=y3[:, rows], casting="same_kind")
            else:
                np.copyto(y3[:, rows], spec, casting="same_kind")
    else:
        pool.parallel_for(frames_part, [(ni, a, z) for ni in range(batch) for a, z in pool.split(t, 2)])
    return [y]


def _plan(op, w, share=False):
    """dft_plan(w, share), kept on the op for these weights (supports() and prepare() both ask)."""
    key = "_dft_plan_shared" if share else "_dft_plan"
    held = op.__dict__.get(key)
    if held is not None and held[0] is w:
        return held[1]
    plan = dft_plan(w, share)
    op.__dict__[key] = (w, plan)
    return plan


@register_tactic
class Conv1dDftShared(Conv1dDft):
    """conv1d-dft where a block's rows are reproduced, within the fit tolerance, by another block's window: one
    FFT per frame for a real + imaginary pair whose fitted windows differ in the last bits (NeMo's STFT:
    asr_nemo80_conv single-thread 0.396 -> 0.297 ms). Its floats differ from conv1d-dft's within that
    tolerance, so it is its own tactic, chosen by timing."""
    name = "conv1d-dft-shared"
    share = True
