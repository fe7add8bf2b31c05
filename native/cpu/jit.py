"""Optional numba-compiled CPU kernels (the `jit` extra: pip install debugkit[jit]).

Loops numpy cannot express in one pass, compiled once per process (and cached on disk by numba) where numba is
installed and DEBUGKIT_JIT is not 0. Each one computes exactly the floats of the numpy code it stands in for (the
same products, rounded, summed in the same order: no fused multiply-add, no reassociation), so a tactic that uses it
is the same tactic, bit for bit; the numpy path stays for everyone without numba and is what the default tests run.
`kernel(name)` returns the compiled function or None; the first call compiles (~0.5 s, then numba's cache).

    depthwise_cl_rows(xl [Hp, Wp, C], w [kh, kw, C], out [rows, Wo, C], r0, sh, sw, dh, dw)
        depthwise taps channels-last for output rows r0..r0+rows: per output, the first tap's product, then each
        further tap's product added in (i, j) order (the depthwise tactics' order); C is the vectorised inner loop.
    depthwise_cl_rows_nchw(xl, w, bias [C] (or empty), y [C, Ho, Wo], r0, r1, sh, sw, dh, dw, act)
        the same sums for output rows r0..r1, then + bias and the activation (0 none, 1 RELU, 2 HARD_SWISH, 3
        HARD_SWISH_RELU6: the numpy epilogue's operations) per output, stored straight into NCHW y: no channels-last accumulator, no
        copy back, no epilogue passes.
    depthwise_cl_rows_nchw_k3 / _k5(xl, w, bias, y, r0, r1, sh, sw, dh, dw, act)
        depthwise_cl_rows_nchw's floats for kernels 3 / 5 taps wide, a kernel row's taps unrolled (its partial sum
        in a register, not reloaded and stored per tap): 1.6-1.9x faster; compiled in native/cpu/jit_dw.py.
    depthwise_nchw(xp [C, Hp, Wp], taps [kh*kw, C], y [C, Ho, Wo], kh, kw, sh, sw, dh, dw)
        the same sums NCHW, a row of outputs at a time (the vectorised inner loop runs along the row; a strided
        row is split into its phases first, so every tap reads unit-stride): few channels over large maps.
    depthwise_planes(x [C, H, W], taps [kh*kw, C], bias [C] (or empty), y [C, Ho, Wo], kh, kw, sh, sw, dh, dw,
                     ph, pw, act)
        depthwise_nchw's sums (zero padding included, in tap order) from the unpadded input, each channel padded
        into a scratch split into its row and column stride phases, so that each tap is one multiply-add over all
        output rows at once (the columns past Wo computed and dropped), then + bias and the activation (0 none,
        1 RELU, 2 HARD_SWISH, 3 HARD_SWISH_RELU6: the numpy epilogue's operations): one pass, no padded input
        copy; a kernel row of 3 or 5 taps is one loop (compiled in native/cpu/jit_dw.py).
    hard_swish(x [n], y [n])  /  hard_sigmoid(x [n], y [n], alpha, beta)
        the activations' numpy passes (x * 1/6, + 0.5, clip to [0, 1], times x; x * alpha, + beta, clip) per element
        in one pass, each step rounded to x's type as numpy rounds it; `clip` as numpy's clip loop (NaN kept,
        -0.0 clipped to +0.0). y must not overlap x: hard_swish_inplace(x) / hard_sigmoid_inplace(x, alpha, beta)
        write x itself (two aliasing array arguments keep numba from vectorising the loop: 20x slower).
    bias_hard_act_inplace(y [N, C, S], bias [C], swish, alpha, beta)
        y + bias per channel, rounded, then HardSwish (swish) or HardSigmoid(alpha, beta) as above, in place: a
        convolution epilogue's bias pass and activation passes as one.
    bias_steps_inplace(y [N, C, S], bias [C] (or empty), steps [k, 3], res [N, C, S])
        y + bias, then per step (code, alpha, beta): 1 clip to [alpha, beta] (RELU: [0, inf]) as numpy's clip loop,
        2 + res, 3 HARD_SWISH_RELU6, 4 HARD_SWISH; in place, one pass per row: a convolution's bias, RELU / CLIP / hard-swish and
        residual add passes as one.
    hard_swish_relu6(x [n], y [n])  /  hard_swish_relu6_inplace(x [n])
        x + 3, clip to [0, 6], times x, / 6, each step rounded as numpy's pass: the HARD_SWISH_RELU6 activation.
    conv1d_direct(x [N, C, L], wt [C*k, M], bias [M] (or empty), y [N, M, Wo], k, s, d, pre, relu)
        a small 1-D convolution without a patch matrix: per output position the products of every (channel, tap)
        with its weights row added into an [M] accumulator (vectorised over M), in (channel, tap) order from zero,
        then the bias, then (relu) numpy's clip to [0, inf]: the conv1d-direct tactic's own rounding (not a GEMM's).
    conv1d_direct_pos(x, wt, bias, y, k, s, d, pre, relu)
        the same floats for few output channels: vectorised over output positions (the input split into its
        stride phases first), for a resampler's [1, 1, L] -> [1, 1, L / s] with a 28-tap kernel.
    conv1d_rows4(x, wt, bias, y, k, s, d, pre, relu)  /  conv1d_rows4_padded(...)
        the same floats, four weight rows a pass: a position's in-range rows, or (finite weights) every row over
        every position's accumulators, the padding read as zeros (native/cpu/jit_conv1d.py; silero-vad's encoder
        and STFT).
    pointwise_chain(x0, x1, x2, x3, y, code [steps, 3], fval [steps, 4], buf [steps, B])
        a fused Pointwise program over full-size inputs and scalars, one block of B elements at a time through
        every step (native/cpu/kernels/pointwise_chain.py encodes it): each step's vectorised loop over the block
        rounds as numpy's pass over the whole tensor does, so the chain's floats are the interpreter's (sigmoid /
        tanh steps: polyexp's, the polyexp-chain tactic's own); compiled in native/cpu/jit_chain.py.
    relu6_swish(x [n], y [n], a, lo, hi, d, divide)
        the program `x + a, clip to [lo, hi], times x, / d` (divide) or `* d`: a hand-written hard-swish (PaddleOCR:
        x + 3, clip to [0, 6], times x, / 6) as one loop with each step rounded as pointwise_chain rounds it, so the
        same floats at ~3x its speed (pointwise_chain's four block passes, their buffers; jit_chain.py).
    relu6_swish_affine(x [n], y [n], a, lo, hi, d, divide, op1, v1, op2, v2)
        relu6_swish, then one or two scalar steps (op 3: times v, 1: plus v, 0: none), each rounded as the chain's
        step: PaddleOCR v4's hard-swish + learnable affine block (`* s, + t`) in one loop (jit_chain.py).
    gelu_rows(y [M, N], bias [N], has_bias, tanh, c0, c1) (columns c0:c1), softmax_rows(s [M, N]),
    layernorm_rows(x [M, N], gamma [N], beta [N], eps, n, y [M, N], mean [M], inv [M])
    layernorm_rows_relu(...): layernorm_rows, then numpy clip's RELU on each output (lane-stats with a fused Relu)
    add_layernorm_rows(a, b, s [M, N], gamma, beta, eps, n, y, mean, inv): s = a + b, then layernorm_rows of s, a row
        at a time (lane-stats-residual: a residual add and its LayerNorm in one pass)
        float32 row kernels of native/cpu/polyexp.py (its polynomial exp, its 8-lane sums): the same floats as that
        module's numpy passes, in one pass over each row instead of ~20; compiled in native/cpu/jit_rows.py.
    panel_gemm / panel_gemm_gelu / panel_descriptors / panel_rows()
        the packed-gemm-panels tactic's GEMM on weights packed in 32-column panels (native/cpu/jit_panel_gemm.py:
        fused multiply-adds, that tactic's own floats; panel_rows() the rows of its blocks).
    gemm_direct(a [M, K], w [K, N], bias [N] (or empty), has_bias, act, y [M, N])
        a few rows' product with its [bias +] RELU / SIGMOID epilogue in one loop (native/cpu/jit_gemm.py: a
        running sum per output in order, the tactic packed-gemm-direct's own floats).
    gemv_dot(a [1, K], wt [N, K], bias [N] (or empty), has_bias, act, y [1, N])
        one row's product as a dot product per output over weights stored transposed (native/cpu/jit_gemv.py: sums
        in vector lanes, the tactic gemv-dot's own floats), then gemm_direct's epilogue.
    channel_affine(x [N, C, S], scale [C], shift [C], y [N, C, S])
        x * scale[c] + shift[c] per element, rounded as numpy's two broadcast passes (native/cpu/jit_norm.py: an
        inference BatchNormalization's pass, the same floats).
    max_pool_tiles(x [R*H*W], y [R*Ho*Wo], rows, wo, w, kh, kw)
        max pooling over 1x2 / 2x1 / 2x2 windows that tile the planes exactly, the planes as one flat run
        (native/cpu/jit_pool_tiles.py: strided-taps' floats, the max-tiles tactic).
    lstm_steps(xw [T, B, 4H], rt [H, 4H], b_r [4H], h [B, H], c [B, H], ys [T, B, H], g [4H])
        a plain forward LSTM's time loop (recurrence, gates, state update) in one call, sigmoid / tanh by polyexp's
        exp (native/cpu/jit_rnn.py: the lstm-direct tactic's own floats).
    se_direct(x [N, C, S], w1t [C, M], b1, w2t [M, C], b2, act1, act2, y [N, C, S])
        a squeeze-excite block (mean over S, two small products with their activations, x * gate) in one call:
        the se-direct tactic's own floats (native/cpu/jit_se.py).
    silu_polyexp_inplace(x [n] float32, double)
        SiLU in place with polyexp's exp: v * sigmoid(v), sigmoid = e / (1 + e) below 0 and 1 / (1 + e) from 0 up,
        e = exp(-|v|); double: v = x + x first (the GEMM's halved output). The floats of activations'
        SILU_POLYEXP numpy passes (the *-polyexp convolution tactics' own, not numpy's tanh).
    upsample_nearest(x [R, H, W], y [R, H*fh, W*fw], fh, fw)
        nearest upsampling of the last two axes by integer factors (Resize's integer-scale nearest case): a copy,
        ~5x numpy's gather + broadcast copy on yolov8n's [256, 10, 10] -> [256, 20, 20].
    max_pool_2d(x [R, H, W], y [R, Ho, Wo], cols [H, Wo], r0, r1, kh, kw, sh, sw, dh, dw, ph, pw)
        pooling.py's separable 2-D max pool for planes r0..r1 from the unpadded input, np.maximum's pairs in its
        order (native/cpu/jit_pool.py).
    (The HardSwish / HardSigmoid / SiLU kernels are compiled in native/cpu/jit_act.py.)
    wino_in / wino_out / phase_split: Winograd F(2x2, 3x3)'s transforms (native/cpu/jit_winograd.py, the
        winograd-f2x3-jit tactic's own floats).
    phase_gemm_band: a 3x3 stride-2 convolution's band as four cblas_sgemm calls over phase planes (the
        phase-gemm-s2 tactic; native/cpu/jit_phase_gemm.py). patches_from_phases: conv2d_gemm's patch copies out of
        stride phases (native/cpu/jit_patches.py, copies only). deconv_tiles: a ConvTranspose whose kernel tiles the
        output, few outputs a pixel (the deconv-tiles-jit tactic; native/cpu/jit_deconv.py).
"""
from __future__ import annotations

import importlib
import threading

from native import config

_LOCK = threading.Lock()
_KERNELS: dict = {}
_STATE = {"numba": None}   # None: not tried yet; False: unavailable


def available() -> bool:
    """numba importable and not switched off (DEBUGKIT_JIT=0)."""
    if not config.settings().jit:
        return False
    if _STATE["numba"] is None:
        try:
            importlib.import_module("native.cpu.jit_cache")   # numba (the optional extra) on first use only, and
            # its cache stamps (jit_cache.py: a kernel's cache covers the modules it inlines)
            _STATE["numba"] = True
        except Exception:  # noqa: BLE001 - any failure to import means "no JIT"
            _STATE["numba"] = False
    return bool(_STATE["numba"])


def kernel(name: str):
    """The compiled kernel `name`, or None without numba (or with DEBUGKIT_JIT=0)."""
    if not available():
        return None
    fn = _KERNELS.get(name)
    if fn is None:
        with _LOCK:
            fn = _KERNELS.get(name)
            if fn is None:
                fn = _KERNELS[name] = _BUILDERS[name]()
    return fn


def float32_refusal(input_shapes) -> str | None:
    """Why a compiled float32 kernel does not take these inputs (a first input of another dtype, or no numba), or
    None: the check every such tactic's `supports` ends with."""
    dtypes = getattr(input_shapes, "dtypes", None)
    if dtypes and dtypes[0] not in (None, "float32"):
        return "float32 inputs only"
    if not available():
        return "needs the numba extra (pip install debugkit[jit])"
    return None


def module(name: str):
    """native/cpu/<name>.py, a module of compiled kernels and the constants that go with them (jit_ir_share's
    argument-block slots), or None without numba (or with DEBUGKIT_JIT=0). Importing it imports numba."""
    if not available():
        return None
    return importlib.import_module(f"native.cpu.{name}")


_OFFERED: dict = {}


def offered_module(name: str, needs=None):
    """`module(name)` for the tactics that depend on it, or None where numba is missing (DEBUGKIT_JIT=0), `needs()`
    (what else they call: numpy's 64-bit cblas_sgemm, another compiled kernel) is false, or the module fails to
    import or compile: asked once per process, so those tactics are simply not offered."""
    if not available():
        return None
    if name not in _OFFERED:
        got = None
        try:
            if needs is None or needs():
                got = module(name)
        except Exception:  # noqa: BLE001 - any failure to compile means the tactics are not offered
            got = None
        _OFFERED[name] = got
    return _OFFERED[name]


def _depthwise_cl_rows():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def depthwise_cl_rows(xl, w, out, r0, sh, sw, dh, dw):
        kh, kw, c = w.shape
        rows, wo = out.shape[0], out.shape[1]
        acc = np.empty(c, out.dtype)
        for r in range(rows):
            y0 = (r0 + r) * sh
            for ow in range(wo):
                x0 = ow * sw
                xs = xl[y0, x0]
                w0 = w[0, 0]
                for k in range(c):
                    acc[k] = xs[k] * w0[k]
                for i in range(kh):
                    for j in range(kw):
                        if i == 0 and j == 0:
                            continue
                        xs = xl[y0 + i * dh, x0 + j * dw]
                        wv = w[i, j]
                        for k in range(c):
                            acc[k] += xs[k] * wv[k]
                o = out[r, ow]
                for k in range(c):
                    o[k] = acc[k]
    return depthwise_cl_rows


def _depthwise_cl_rows_nchw():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True, error_model="numpy")
    def depthwise_cl_rows_nchw(xl, w, bias, y, r0, r1, sh, sw, dh, dw, act):
        # depthwise_cl_rows' sums, then + bias and the activation per output, stored straight into NCHW y; the
        # taps read a flat view of xl at offsets computed once (no 2-D index and view per tap and pixel)
        kh, kw, c = w.shape
        wp = xl.shape[1]
        wo = y.shape[2]
        flat = xl.reshape(xl.shape[0] * wp * c)
        wf = w.reshape(kh * kw * c)
        ntap = kh * kw
        offs = np.empty(ntap, np.int64)
        for i in range(kh):
            for j in range(kw):
                offs[i * kw + j] = (i * dh * wp + j * dw) * c
        acc = np.empty(c, y.dtype)
        t = y.dtype.type
        zero, one, sixth, half, inf = t(0.0), t(1.0), t(1.0 / 6.0), t(0.5), t(np.inf)
        three, six = t(3.0), t(6.0)
        has_bias = bias.shape[0] == c
        for r in range(r0, r1):
            for ow in range(wo):
                base = (r * sh * wp + ow * sw) * c
                xs = flat[base:base + c]
                for k in range(c):
                    acc[k] = xs[k] * wf[k]
                for tap in range(1, ntap):
                    o = base + offs[tap]
                    xs = flat[o:o + c]
                    wv = wf[tap * c:(tap + 1) * c]
                    for k in range(c):
                        acc[k] += xs[k] * wv[k]
                if has_bias:
                    for k in range(c):
                        acc[k] = acc[k] + bias[k]
                if act == 1:      # RELU: numpy's clip to [0, inf] (NaN kept, -0.0 to +0.0)
                    for k in range(c):
                        u = acc[k]
                        if u == u:    # NaN stays NaN
                            u = u if u > zero else zero
                            u = u if u < inf else inf
                        acc[k] = u
                elif act == 2:    # HARD_SWISH: as activations._hard_swish
                    for k in range(c):
                        v = acc[k]
                        u = v * sixth
                        u = u + half
                        if u == u:   # clipped to [0, 1] as numpy's clip loop does (NaN stays NaN)
                            u = u if u > zero else zero
                            u = u if u < one else one
                        acc[k] = v * u
                elif act == 3:    # HARD_SWISH_RELU6: as activations._hard_swish_relu6
                    for k in range(c):
                        v = acc[k]
                        u = v + three
                        if u == u:
                            u = u if u > zero else zero
                            u = u if u < six else six
                        u = v * u
                        acc[k] = u / six
                for k in range(c):
                    y[k, r, ow] = acc[k]
    return depthwise_cl_rows_nchw


def _upsample_nearest():
    import numba

    @numba.njit(nogil=True, cache=True)
    def upsample_nearest(x, y, fh, fw):
        # y[r, h * fh + i, w * fw + j] = x[r, h, w]: the first output row of each input row written element by
        # element, the other fh - 1 copied from it by plain loops (numba's slice assignment is a slower generic
        # copy); a copy: the values and bits of x
        rows, h_n, w_n = x.shape
        wo = w_n * fw
        for r in range(rows):
            xr = x[r]
            yr = y[r]
            for h in range(h_n):
                src = xr[h]
                first = yr[h * fh]
                if fw == 2:
                    for w in range(w_n):
                        v = src[w]
                        first[2 * w] = v
                        first[2 * w + 1] = v
                else:
                    for w in range(w_n):
                        v = src[w]
                        for j in range(fw):
                            first[w * fw + j] = v
                for i in range(1, fh):
                    dst = yr[h * fh + i]
                    for k in range(wo):
                        dst[k] = first[k]
    return upsample_nearest


def _depthwise_nchw():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def depthwise_nchw(xp, taps, y, kh, kw, sh, sw, dh, dw):
        c_n, ho, wo = y.shape
        wp = xp.shape[2]
        acc = np.empty(wo, y.dtype)
        # a horizontal stride > 1 reads every sw-th element: each input row is split into its sw phases first
        # (ph[p, m] = row[m * sw + p]), so every tap reads a unit-stride run of one phase
        span = (wp + sw - 1) // sw
        ph = np.empty((sw, span), y.dtype)
        for c in range(c_n):
            for oh in range(ho):
                y0 = oh * sh
                for i in range(kh):
                    xr = xp[c, y0 + i * dh]
                    if sw > 1:
                        for q in range(sw):
                            pq = ph[q]
                            for m in range((wp - q + sw - 1) // sw):
                                pq[m] = xr[m * sw + q]
                    for j in range(kw):
                        wv = taps[i * kw + j, c]
                        x0 = j * dw
                        src = xr[x0:x0 + wo] if sw == 1 else ph[x0 % sw, x0 // sw:x0 // sw + wo]
                        if i == 0 and j == 0:
                            for ow in range(wo):
                                acc[ow] = src[ow] * wv
                        else:
                            for ow in range(wo):
                                acc[ow] += src[ow] * wv
                yr = y[c, oh]
                for ow in range(wo):
                    yr[ow] = acc[ow]
    return depthwise_nchw


def _conv1d_direct():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def conv1d_direct(x, wt, bias, y, k, s, d, pre, relu):
        # blocks of up to 16 output positions: each weights row is read once per block and its products go into
        # the block's [positions, M] accumulators, every accumulator still summing its (channel, tap) products in
        # order from zero (the same floats as one position at a time)
        n_, c_n, length = x.shape
        m_n, wo = y.shape[1], y.shape[2]
        blk = 16
        acc = np.empty((blk, m_n), y.dtype)
        zero, inf = y.dtype.type(0.0), y.dtype.type(np.inf)
        has_bias = bias.shape[0] == m_n
        for n in range(n_):
            for o0 in range(0, wo, blk):
                nb = min(blk, wo - o0)
                for j in range(nb):
                    for m in range(m_n):
                        acc[j, m] = 0
                for c in range(c_n):
                    xr = x[n, c]
                    for t in range(k):
                        row = wt[c * k + t]
                        for j in range(nb):
                            p = (o0 + j) * s - pre + t * d
                            if p < 0 or p >= length:
                                continue
                            xv = xr[p]
                            a = acc[j]
                            for m in range(m_n):
                                a[m] += row[m] * xv
                for j in range(nb):
                    o = o0 + j
                    a = acc[j]
                    if has_bias:
                        for m in range(m_n):
                            a[m] = a[m] + bias[m]
                    if relu:   # numpy's clip to [0, inf]: NaN kept, -0.0 to +0.0 (activations.relu's floats)
                        for m in range(m_n):
                            u = a[m]
                            if u == u:
                                u = u if u > zero else zero
                                u = u if u < inf else inf
                            a[m] = u
                    for m in range(m_n):
                        y[n, m, o] = a[m]
    return conv1d_direct


def _conv1d_direct_pos():
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def conv1d_direct_pos(x, wt, bias, y, k, s, d, pre, relu):
        # conv1d_direct's sums for few output channels over many positions: the input split into its s phases
        # (ph[r, q] = x[q * s + r]) so that each (channel, tap) product runs over a block of positions as one
        # contiguous, vectorised loop; each output still sums its in-range (channel, tap) products in order from
        # zero, then + bias, then RELU: conv1d_direct's floats
        n_, c_n, length = x.shape
        m_n, wo = y.shape[1], y.shape[2]
        span = (length + s - 1) // s
        ph = np.zeros((c_n, s, span), y.dtype)
        blk = 512
        acc = np.empty(blk, y.dtype)
        zero, inf = y.dtype.type(0.0), y.dtype.type(np.inf)
        has_bias = bias.shape[0] == m_n
        for n in range(n_):
            for c in range(c_n):
                for r in range(s):
                    row = ph[c, r]
                    for q in range((length - r + s - 1) // s):
                        row[q] = x[n, c, q * s + r]
            for m in range(m_n):
                for o0 in range(0, wo, blk):
                    o1 = min(wo, o0 + blk)
                    for j in range(o1 - o0):
                        acc[j] = 0
                    for c in range(c_n):
                        for t in range(k):
                            wv = wt[c * k + t, m]
                            off = t * d - pre            # output o reads x[o * s + off]
                            # the positions o in [o0, o1) with 0 <= o * s + off < length
                            lo = o0 if off >= 0 else max(o0, (-off + s - 1) // s)
                            hi = min(o1, (length - 1 - off) // s + 1) if length - 1 - off >= 0 else o0
                            if hi <= lo:
                                continue
                            r = off % s
                            q = (off - r) // s           # o * s + off = (o + q) * s + r
                            a = acc[lo - o0:hi - o0]
                            src = ph[c, r, lo + q:hi + q]
                            for j in range(a.shape[0]):
                                a[j] += wv * src[j]
                    for j in range(o1 - o0):
                        v = acc[j]
                        if has_bias:
                            v = v + bias[m]
                        if relu and v == v:   # numpy's clip to [0, inf]: NaN kept, -0.0 to +0.0
                            v = v if v > zero else zero
                            v = v if v < inf else inf
                        y[n, m, o0 + j] = v
    return conv1d_direct_pos


# pointwise_chain op codes (native/cpu/kernels/pointwise_chain.py holds the table that encodes a program)
PW_SUM, PW_SUB, PW_PROD, PW_DIV, PW_MAX, PW_MIN = 1, 2, 3, 4, 5, 6
PW_CLIP, PW_LEAKY, PW_HARD_SIGMOID, PW_HARD_SWISH, PW_ABS, PW_NEG, PW_SQRT, PW_SQUARE = 10, 11, 12, 13, 14, 15, 16, 17
PW_SIGMOID, PW_TANH = 18, 19   # polyexp's (native/cpu/jit_rnn.py): the polyexp-chain tactic only, float32
# argument kinds
PW_INPUT, PW_SCALAR, PW_STEP = 0, 1, 2




def _module(module, name):
    """A kernel defined at module level in native/cpu/<module>.py (jit_rows, jit_act): numba's disk cache keys a
    closure by its captured values, which for compiled helpers differ per process, so kernels that call a compiled
    helper live there (closures over them recompiled every time)."""
    def build():
        import importlib
        return getattr(importlib.import_module(f"native.cpu.{module}"), name)   # imports numba: on first use only
    return build


_BUILDERS = {"depthwise_cl_rows": _depthwise_cl_rows, "depthwise_nchw": _depthwise_nchw,
             "depthwise_planes": _module("jit_dw", "depthwise_planes"),
             "pointwise_chain": _module("jit_chain", "pointwise_chain"), "conv1d_direct": _conv1d_direct,
             "relu6_swish": _module("jit_chain", "relu6_swish"),
             "relu6_swish_affine": _module("jit_chain", "relu6_swish_affine"),
             "se_direct": _module("jit_se", "se_direct"), "max_pool_2d": _module("jit_pool", "max_pool_2d"),
             "conv1d_direct_pos": _conv1d_direct_pos, "upsample_nearest": _upsample_nearest,
             "depthwise_cl_rows_nchw": _depthwise_cl_rows_nchw,
             **{k: _module("jit_dw", k) for k in ("depthwise_cl_rows_nchw_k3", "depthwise_cl_rows_nchw_k5")},
             "gemm_direct": _module("jit_gemm", "gemm_direct"), "gemv_dot": _module("jit_gemv", "gemv_dot"),
             "channel_affine": _module("jit_norm", "channel_affine"),
             "max_pool_tiles": _module("jit_pool_tiles", "max_pool_tiles"),
             "lstm_steps": _module("jit_rnn", "lstm_steps"), **{k: _module("jit_conv1d", k) for k in ("conv1d_rows4", "conv1d_rows4_padded")},
             **{k: _module("jit_rows", k) for k in ("gelu_rows", "softmax_rows", "layernorm_rows",
                                                    "layernorm_rows_relu", "add_layernorm_rows")},
             **{k: _module("jit_winograd", k) for k in ("wino_in", "wino_out", "phase_split", "wino_band")},
             "max_pool_2d_cl": _module("jit_pool", "max_pool_2d_cl"),
             "phase_gemm_band": _module("jit_phase_gemm", "phase_gemm_band"),
             "patches_from_phases": _module("jit_patches", "patches_from_phases"),
             "deconv_tiles": _module("jit_deconv", "deconv_tiles"),
             **{k: _module("jit_act", k) for k in ("hard_swish", "hard_swish_inplace", "hard_sigmoid",
                                                   "hard_sigmoid_inplace", "bias_hard_act_inplace",
                                                   "bias_steps_inplace", "hard_swish_relu6",
                                                   "hard_swish_relu6_inplace", "silu_polyexp_inplace")},
             **{k: _module("jit_panel_gemm", k) for k in ("panel_gemm", "panel_gemm_gelu", "panel_descriptors",
                                                          "panel_rows")},
             **{k: _module("jit_ir", k) for k in ("expanded_into_padded", "depthwise_nhwc", "gate", "scaled_rows",
                                                  "bias_residual", "bias_act_rows", "channel_sums", "gate_cols",
                                                  "scaled_cols", "project_out")},
             "global_average": _module("jit_pool", "global_average")}
