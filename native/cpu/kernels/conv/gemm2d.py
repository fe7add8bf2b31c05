"""The threaded 2-D GEMM convolution driver shared by the im2col-gemm and 1x1-gemm tactics.

The output is split into bands (rows, or output channels for small maps) over native/cpu/threads.py's pool; each
band builds a cache-sized patch matrix with one strided copy (large strided kernels copy from a phase-split input
so every copy is unit-stride) and runs single-threaded GEMMs straight into the output. The bias rides in the GEMM
(a ones row under the patch matrix, a bias column in the packed weights); activation and residual add run once
over the whole output after the GEMMs, in place (measured cheaper than per-band epilogues interleaved with the
GEMMs, and than separate layers). When the first post-op is SiLU the packed GEMM weights are pre-halved (exact)
so the GEMM yields z/2 and silu(z) = h + h*tanh(h) costs 3 passes."""
from __future__ import annotations

import itertools

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import (regionable, side_input, side_term, view_as, whole_epilogue,
                                              region_epilogue)
from native.cpu.kernels.conv.gemm_bands import band_shares
from native.cpu.kernels.conv.geometry import pad_input
from native.cpu.kernels.conv.weights import side_cin
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import num_threads, parallel_for, split

_as_strided = np.lib.stride_tricks.as_strided


def conv2d_gemm(op, x, wm, b, ks, strides, dil, pre, post, out, inputs, pointwise=False, scale=None, bias_col=False,
                dst=None):
    """2-D convolution as im2col + GEMM, split over the thread pool into bands of output rows (or of output
    channels when the output map is small): each band copies its patches with one strided copy, runs one
    single-threaded GEMM per group straight into the output and applies bias/post-ops in place.
    x: [N, C, H, W] float; wm: [g, Mg, Cg*kh*kw] (C-major, taps minor); b: [M] or None; scale: wm's pre-scale
    (0.5 when the first post-op is SiLU, see `pack_gemm`) or None; bias_col: wm's last column is the bias (scaled
    like wm), which the GEMM adds through a row of ones under the patch matrix. A merged shortcut (params "side")
    rides the same way: its weights are columns of a packed wm, its sampled input rows of the patch matrix; with
    unpacked weights, or no patch matrix, its term is computed apart and added before the epilogue.
    dst: the planned output buffer ([N, M, Ho, Wo] of the work dtype, C-contiguous) to write into, or None."""
    n, c = x.shape[:2]
    kh, kw = ks
    (sh, sw), (dh, dw), (ho, wo) = strides, dil, out
    direct = pointwise and sh == sw == 1 and not any(pre) and not any(post)
    n_side = side_cin(op)
    packed_side = bias_col and n_side > 0
    col_bias = side_w = None
    if bias_col and direct:  # no patch matrix to extend: the columns go back to the epilogue
        col_bias, wm, bias_col = wm[0, :, -1], wm[..., :-1], False
        if packed_side:
            side_w, wm, packed_side = wm[0, :, -n_side:], wm[..., :-n_side], False
    elif n_side and not packed_side:
        side_w = op.weights["side_kernel"]
    side_rows = side_input(op, inputs, out, wm.dtype) if packed_side else None
    side_full = side_term(op, inputs, out, wm.dtype, side_w) if side_w is not None else None
    g, mg, kdim = wm.shape
    kdim -= int(bias_col) + (n_side if packed_side else 0)
    m = g * mg
    dtype = wm.dtype
    bias = None if b is None else np.asarray(b, dtype).reshape(-1)
    y = dst if dst is not None and dst.shape == (n, m, ho, wo) and dst.dtype == dtype else \
        np.empty((n, m, ho, wo), dtype)
    region = regionable(op, inputs, y.shape)
    half = scale is not None
    if half and bias is not None:
        bias = bias * scale.reshape(())
    if col_bias is not None:
        bias = col_bias  # already scaled with wm
    if half:
        if not region:  # rare (broadcast residual): undo the scaling and run the plain epilogue
            wm = wm / scale.reshape(())
            bias, half = (None if bias is None else bias / scale.reshape(())), False
    has_epilogue = bias is not None or bool(op.params.get("post_ops"))
    threads = num_threads() if n * m * kdim * ho * wo >= tuning.PARALLEL_MIN_MACS else 1
    by_rows = ho * wo >= m or g > 1 or threads == 1
    cg = c // g

    phases = None
    if not direct and kh * kw >= 4 * sh * sw > 4:
        # (large kernel, strided: the first layer) taps read every s-th element; split the padded input into its
        # sh*sw phases once so that every tap copies unit-stride rows: xp[.., p + sh*a, q + sw*b] == ph[.., p, q, a, b]
        hp, wp = x.shape[2] + pre[0] + post[0], x.shape[3] + pre[1] + post[1]
        phases = np.zeros((n, c, sh, sw, -(-hp // sh), -(-wp // sw)), dtype)
        for p_, q_ in itertools.product(range(sh), range(sw)):
            a0, b0 = max(0, -(-(pre[0] - p_) // sh)), max(0, -(-(pre[1] - q_) // sw))
            src = x[:, :, p_ + sh * a0 - pre[0]::sh, q_ + sw * b0 - pre[1]::sw]
            na, nb = min(src.shape[2], phases.shape[4] - a0), min(src.shape[3], phases.shape[5] - b0)
            phases[:, :, p_, q_, a0:a0 + na, b0:b0 + nb] = src[:, :, :na, :nb]
        xp = None
        from_phases = _from_phases(dtype)
    else:
        xp = np.ascontiguousarray(x) if direct else pad_input(x, pre, post)
        st = xp.strides
    def cols_for(ni, r0, r1, buf=None):
        rows = r1 - r0
        if direct:
            return view_as(xp[ni, :, r0:r1], (g, cg, rows * wo))
        size = c * kh * kw * rows * wo
        extra = n_side * rows * wo if side_rows is not None else 0
        if buf is None:
            buf = np.empty(cols_size(rows), dtype)
        if extra:  # the merged shortcut's input at these output rows, under wm's shortcut columns
            buf[size:size + extra].reshape(n_side, rows, wo)[...] = side_rows[ni, :, r0:r1]
        if bias_col:
            buf[size + extra:] = 1  # the ones row that multiplies wm's bias column
        cols = buf[:size].reshape(c, kh, kw, rows, wo)
        if phases is not None and from_phases is not None:
            from_phases(phases[ni], cols, r0, dh, dw)    # the same copies, compiled (jit_patches)
        elif phases is not None:
            for i, j in itertools.product(range(kh), range(kw)):
                a0, b0 = r0 + (i * dh) // sh, (j * dw) // sw
                cols[:, i, j] = phases[ni, :, (i * dh) % sh, (j * dw) % sw, a0:a0 + rows, b0:b0 + wo]
        else:
            xs = xp[ni, :, r0 * sh:]
            np.copyto(cols, _as_strided(xs, (c, kh, kw, rows, wo),
                                        (st[1], st[2] * dh, st[3] * dw, st[2] * sh, st[3] * sw)))
        return buf.reshape(g, -1, rows * wo)

    def cols_size(rows):
        return (c * kh * kw + (n_side if side_rows is not None else 0) + int(bias_col)) * rows * wo

    if by_rows:
        per = max(1, -(-threads // n))
        tasks = [(ni, r0, r1) for ni in range(n) for r0, r1 in split(ho, per)]
        # sub-bands small enough that the patch matrix is still in cache when the GEMM reads it
        step = ho if direct else max(1, tuning.COLS_BYTES // max(1, c * kh * kw * wo * wm.itemsize))

        subs = [[(ni, s0, min(r1, s0 + step)) for s0 in range(r0, r1, step)] for ni, r0, r1 in tasks]
        ready, done = {}, set()   # patch matrices filled for shares the pool refused; sub-bands run as shares

        def filled(t, buf=None):
            ready[t] = cm = cols_for(*t, buf)
            return cm[0]

        def band(task):
            ni, r0, r1 = task
            for s0 in range(r0, r1, step):
                s1 = min(r1, s0 + step)
                if (ni, s0, s1) in done:
                    continue
                cm = ready.pop((ni, s0, s1), None)
                if cm is None:
                    cm = cols_for(ni, s0, s1)
                np.matmul(wm, cm, out=view_as(y[ni, :, s0:s1], (g, mg, (s1 - s0) * wo)))
        # a small 1x1 convolution's two bands both here: the calls (and floats) of the split, without its hand-off
        here = direct and len(tasks) == 2 and g == 1 and n * m * kdim * ho * wo < tuning.DIRECT_SPLIT_MIN_MACS
        if direct and len(tasks) == 2 and g == 1 and not here:
            # a 1x1 convolution's two bands (no patch copy: views of the input) as GEMM shares outside the GIL while
            # the pool takes them (gemm_bands). Not with patch matrices: the caller would copy both bands' patches
            # (the worker runs no Python), which parallel_for's parts copy on both threads
            for pair in zip(*subs):
                if not band_shares(wm[0], [(view_as(y[ni, :, s0:s1], (mg, (s1 - s0) * wo)),
                                            lambda buf=None, t=(ni, s0, s1): filled(t, buf),
                                            None if direct else cols_size(s1 - s0)) for ni, s0, s1 in pair]):
                    break
                done.update(pair)
        if len(done) < sum(map(len, subs)):
            if here:
                for t in tasks:
                    band(t)
            else:
                parallel_for(band, tasks)
        if side_full is not None:
            y += side_full
        if region and has_epilogue:
            # once over the whole output, in place, after every GEMM: measured cheaper than per-band epilogues
            # between the GEMMs (they slow the next band's patch copy and GEMM more than they save) and than
            # separate layers (no new buffers, no dispatch)
            whole_epilogue(y, op, inputs, bias, half, threads)
    else:
        for ni in range(n):
            cm = cols_for(ni, 0, ho)[0]

            def chan(rng, ni=ni, cm=cm):
                m0, m1 = rng
                np.matmul(wm[0, m0:m1], cm, out=view_as(y[ni, m0:m1], (m1 - m0, ho * wo)))
                if side_full is not None:
                    y[ni, m0:m1] += side_full[ni, m0:m1]
                if region:
                    region_epilogue(y, (slice(ni, ni + 1), slice(m0, m1)), op, inputs, bias, half)
            parallel_for(chan, split(m, threads))
    if not region:
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        y = apply_post_ops(y, op, inputs)
    return [y]


def _from_phases(dtype):
    """jit_patches.patches_from_phases where numba runs and the dtype is float32 / float64, else None."""
    if dtype not in (np.float32, np.float64) or not jit.available():
        return None
    try:
        return jit.kernel("patches_from_phases")
    except Exception:  # noqa: BLE001 - any failure to compile means numpy's copies
        return None


def fast_path_ok(op, x, ks, pre, post):
    return (x.ndim == 4 and len(ks) == 2 and x.dtype.kind == "f" and x.dtype.itemsize >= 4
            and not op.params.get("integer") and min(pre) >= 0 and min(post) >= 0)


def recipe(op, key, x, inputs, make):
    """A small-convolution fast path's recipe for this layer at x's shape (or None: the general path), made by
    `make(op, x, inputs)` once and kept on the op, keyed by the op's weights (`prepare` replaces them), x's shape
    and dtype, and the pool size (the recipes exist only where conv2d_gemm would run single-threaded)."""
    k = (op.weights, x.shape, x.dtype, num_threads())
    held = op.__dict__.get(key)
    if held is not None and held[0][0] is k[0] and held[0][1:] == k[1:]:
        return held[1]
    r = make(op, x, inputs)
    op.__dict__[key] = (k, r)
    return r
