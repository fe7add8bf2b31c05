"""Winograd minimal-filtering tactics for 3x3 stride-1 convolutions: winograd-f2x3 (F(2x2, 3x3), 4x4 tiles) and
winograd-f4x3 (F(4x4, 3x3), 6x6 tiles).

y = A^T [ (G g G^T) * (B^T d B) ] A per tile: the input tiles d and the kernels g are transformed once, the
elementwise product over channels becomes (m+2)^2 GEMMs of [M, C] x [C, tiles], and the output transform
assembles m x m outputs per tile. F(2,3) does 16 multiplies per 4 outputs where direct convolution does 36;
F(4,3) 36 per 16 where direct does 144. The price is numerics: the transforms add and subtract (F(4,3) with
coefficients up to 5 and 1/24), so rounding error grows with m, and it is a different error from the GEMM
tactics' (tests/native/test_tactic_numerics.py bounds each): F(4,3) is offered for FP16 layers only.

Weights are transformed at build time (`prepare`: "kernel_winograd" [(m+2)^2, M, C]); the bias stays a vector
and the layer's epilogue (fused post-ops, merged shortcut) runs after the output transform.

winograd-f2x3-jit (`WinogradF2x3Jit`): F(2x2, 3x3) with compiled transforms (the numba extra), in bands of tile rows
over the CPU pool, the bias, a residual add and a RELU / SiLU applied as the output is written (`fused_epilogue`).

winograd-f2x3 runs its transforms as numpy GEMMs with kron(B^T, B^T) / kron(A^T, A^T) plus transposes: on
yolov8n's 64-channel 40x40 layer 1.5 ms, twice the im2col GEMM's time, so timing never picks it. Here the transforms
are the adds and subtracts themselves over the input split into its row / column phases (native/cpu/jit_winograd.py;
on that layer, one thread: phases 0.04 ms, input transform 0.07, output transform with SiLU 0.08) and the 16
[M, C] x [C, tiles] GEMMs (0.27), 2.25x fewer multiply-adds than direct convolution: 0.48 ms against nhwc-gemm's 0.69
and im2col's 0.78 (AMD Zen 5, OpenBLAS unpinned). Each band of tile rows splits its own input rows into phases,
transforms its tiles, runs its 16 GEMMs and its output transform: the bands are independent, one parallel_for a layer.

Numerics: Winograd's transforms round differently from a direct sum (the values of winograd-f2x3, by other
operations: no kron GEMMs), and a SiLU post-op is computed by polyexp's exp (as the *-polyexp tactics), so this is
a tactic of its own, tolerance-tested against a float64 reference (tests/native/test_winograd_jit.py). Float32
only; other post-ops, a merged shortcut, or a residual that only broadcasts run after the transform (`finish`).
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.conv.epilogue import finish
from native.cpu.kernels.conv.geometry import geometry, pad_input
from native.cpu.kernels.conv.sgemm import sgemm_address
from native.cpu.kernels.conv.weights import conv_bias
from native.cpu.threads import num_threads, parallel_for, split
from native.tactics import Tactic, register_tactic

_as_strided = np.lib.stride_tricks.as_strided

# (B^T, G, A^T) per output tile size m, for r = 3
_F23 = (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64))
_F43 = (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64))
TRANSFORMS = {2: _F23, 4: _F43}


def transform_kernel(w, m) -> np.ndarray:
    """[M, C, 3, 3] -> U [(m+2)^2, M, C] = G g G^T per (output, input) channel pair (computed in float64)."""
    _, g, _ = TRANSFORMS[m]
    mo, c = np.shape(w)[:2]
    a = g.shape[0]
    # two plain 2-D GEMMs (an einsum over these four axes runs ~10x slower on ResNet-sized layers)
    t = np.asarray(w, np.float64).reshape(mo * c * 3, 3) @ g.T             # g G^T: [M*C*3(i), a(b)]
    t = np.ascontiguousarray(t.reshape(mo * c, 3, a).transpose(1, 0, 2)).reshape(3, -1)  # [3(i), M*C*a(b)]
    u = (g @ t).reshape(a, mo, c, a)                                         # G (g G^T): [a, M, C, b]
    return np.ascontiguousarray(u.transpose(0, 3, 1, 2)).reshape(a * a, mo, c)


def _kron(m):
    """kron(M, M) as float32: applies M . t . M^T to every flattened a x a tile in one GEMM."""
    return np.kron(m, m)


KRON = {m: (_kron(bt), _kron(at)) for m, (bt, _, at) in TRANSFORMS.items()}


def winograd_conv2d(x, u, m, pre, post, out):
    """The convolution (no bias) of x [N, C, H, W] with transformed kernels u, stride 1: [N, M, Ho, Wo].
    Input and output transforms run as GEMMs with kron(B^T, B^T) / kron(A^T, A^T) over flattened tiles."""
    kb, ka = KRON[m]
    dtype = x.dtype
    a = m + 2
    n, c = x.shape[:2]
    ho, wo = out
    th, tw = -(-ho // m), -(-wo // m)
    # pad so that th x tw tiles of a x a (overlapping by 2) cover the padded input
    xp = pad_input(x, [pre[0], pre[1]], [post[0] + th * m + 2 - (x.shape[2] + pre[0] + post[0]),
                                         post[1] + tw * m + 2 - (x.shape[3] + pre[1] + post[1])])
    xp = np.ascontiguousarray(xp)
    s = xp.strides
    tiles = _as_strided(xp, (c, n, th, tw, a, a), (s[1], s[0], s[2] * m, s[3] * m, s[2], s[3]))
    p = n * th * tw
    d = np.ascontiguousarray(tiles).reshape(c * p, a * a)
    v = np.matmul(d, kb.T.astype(dtype))                              # [C*P, a*a] = B^T d B, flattened
    v = np.ascontiguousarray(v.reshape(c, p, a * a).transpose(2, 0, 1))  # [a*a, C, P]
    mm = np.matmul(u.astype(dtype, copy=False), v)                   # [a*a, M, P]
    mo = mm.shape[1]
    y = np.matmul(mm.reshape(a * a, mo * p).T, ka.T.astype(dtype))   # [M*P, m*m] = A^T M A, flattened
    y = y.reshape(mo, n, th, tw, m, m).transpose(1, 0, 2, 4, 3, 5).reshape(n, mo, th * m, tw * m)
    return np.ascontiguousarray(y[:, :, :ho, :wo])


class _Winograd(Tactic):
    kind = "Convolution"
    m = 2
    honours = {"post_ops", "side"}
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        p = op.params
        if list(p.get("kernel_shape") or []) != [3, 3]:
            return "3x3 kernels only"
        if any(s != 1 for s in (p.get("strides") or [1, 1])) or any(d != 1 for d in (p.get("dilations") or [1, 1])):
            return "stride 1, dilation 1 only"
        if (p.get("groups", 1) or 1) != 1:
            return "ungrouped convolutions only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
            return "2-D convolutions only"
        return None

    def workspace_size(self, op, input_shapes):
        if not input_shapes or input_shapes[0] is None:
            return 0
        n, c, h, w = input_shapes[0]
        tiles = n * -(-h // self.m) * -(-w // self.m)
        mo = op.params.get("num_output_maps") or c
        return 4 * (self.m + 2) ** 2 * tiles * (c + mo)   # transformed input and the product, float32

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_winograd"] = np.ascontiguousarray(transform_kernel(w, self.m).astype(np.float32))
        return weights

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        io_dtype = x.dtype
        x = x if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else x.astype(np.float32)
        u = op.weights.get("kernel_winograd")
        if u is None:
            w = op.weights.get("kernel")
            u = transform_kernel(w if w is not None else inputs[1], self.m).astype(x.dtype)
        b = conv_bias(op.weights)
        if b is None and len(inputs) > 2:
            b = inputs[2]
        _, _, pre, post, out = geometry(op.params, x.shape, [3, 3])
        y = winograd_conv2d(x, u, self.m, pre, post, out)
        out = finish(op, y, b, inputs, x.dtype)
        return out if io_dtype == x.dtype else [out[0].astype(io_dtype)] + out[1:]


@register_tactic
class WinogradF2x3(_Winograd):
    """Winograd F(2x2, 3x3): 4x4 input tiles, 2x2 outputs each."""
    name, m = "winograd-f2x3", 2


@register_tactic
class WinogradF4x3(_Winograd):
    """Winograd F(4x4, 3x3): 6x6 input tiles, 4x4 outputs each (fewer multiplies, larger rounding error).

    Its transforms round ~10x more than a GEMM (relative ~1e-6 of the output scale in float32), so it is offered
    for FP16 layers, where that is far below the layer's own rounding; FP32 layers get F(2x2, 3x3)."""
    name, m = "winograd-f4x3", 4
    precisions = ("float16",)
    own_precisions = True   # not widened to FP32/BF16/FP8 by native/cpu/precision.declare_precisions


_ACT = {"RELU": 1, "SILU": 2, "SILU_POLYEXP": 2}


def phase_planes(x, pre, nh, wh, compiled=None):
    """x [N, C, H, W] zero-padded (`pre` rows / columns before, zeros after) and split into its row and column
    phases: [N, C, 2, 2, nh, wh] with [n, c, r, s, i, j] = padded[n, c, 2i + r, 2j + s] (what does not fit is
    cut). `compiled`: jit_winograd.phase_split, for float32 (one compiled pass: one thread, 16x80x80 15 us against
    numpy's four strided copies' 34, 64x56x56 43 against 67, 64x20x20 14 against 17)."""
    n, c, h, w = x.shape
    xq = np.zeros((n, c, 2, 2, nh, wh), x.dtype)
    if compiled is not None and x.dtype == np.float32:
        for ni in range(n):
            compiled(x[ni], xq[ni], pre[0], pre[1])
        return xq
    for r in range(2):
        i0 = max(0, -(-(pre[0] - r) // 2))
        src_r = x[:, :, 2 * i0 + r - pre[0]::2]
        na = min(src_r.shape[2], nh - i0)
        for s_ in range(2):
            j0 = max(0, -(-(pre[1] - s_) // 2))
            src = src_r[:, :, :na, 2 * j0 + s_ - pre[1]::2]
            nb = min(src.shape[3], wh - j0)
            xq[:, :, r, s_, i0:i0 + na, j0:j0 + nb] = src[:, :, :, :nb]
    return xq


_EMPTY = np.empty(0, np.float32)
_EMPTY3 = np.empty((0, 0, 0), np.float32)


def _kernels():
    """(wino_in, wino_out, phase_split) of native/cpu/jit_winograd.py (through `jit.kernel`), or None where numba is
    absent or they do not compile."""
    if not jit.available():
        return None
    try:
        return jit.kernel("wino_in"), jit.kernel("wino_out"), jit.kernel("phase_split")
    except Exception:  # noqa: BLE001 - any failure to compile means the tactic is not offered
        return None


def _band_kernel():
    """(jit_winograd.wino_band, the address of numpy's cblas_sgemm) where numba runs and that symbol is found, else
    None (the bands then run as Python calls of the three kernels and numpy's matmul: the same floats)."""
    if not jit.available():
        return None
    got = _STATE.get("band")
    if got is None:
        got = False
        try:
            band, addr = jit.kernel("wino_band"), sgemm_address()
            if band is not None and addr:
                got = (band, addr)
        except Exception:  # noqa: BLE001 - any failure to compile or find BLAS means the Python bands
            got = False
        _STATE["band"] = got
    return got or None


_STATE: dict = {}


def fused_epilogue(op):
    """(activation code wino_out applies: 0 none, 1 RELU, 2 SiLU; the input index of a residual add it applies
    first, or None; whether that is every post-op): a lone activation, a lone residual add, or add then RELU."""
    steps = op.params.get("post_ops") or ()
    if op.params.get("side"):
        return 0, None, False
    acts = [st for st in steps if st["op"] == "activation"]
    adds = [st for st in steps if st["op"] == "add"]
    if len(acts) + len(adds) != len(steps) or len(acts) > 1 or len(adds) > 1:
        return 0, None, False
    act = _ACT.get(acts[0]["type"]) if acts else 0
    if act is None or (adds and (act == 2 or steps[0]["op"] != "add")):
        return 0, None, False
    return act, (adds[0]["input"] if adds else None), True


@register_tactic
class WinogradF2x3Jit(WinogradF2x3):
    """Winograd F(2x2, 3x3), compiled transforms, bands of tile rows over the pool (see the module docstring)."""
    name = "winograd-f2x3-jit"
    precisions = ("float32",)
    own_precisions = True

    def supports(self, op, input_shapes):
        why = WinogradF2x3.supports(self, op, input_shapes)
        if why is not None:
            return why
        if op.params.get("integer"):
            return "float convolutions only"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 inputs only"
        if _kernels() is None:
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    @staticmethod
    def band_bytes():
        return tuning.WINOGRAD_BYTES

    def prepare(self, op):
        w = op.weights.get("kernel")
        if w is None:
            return op.weights
        weights = {k: v for k, v in op.weights.items() if k != "kernel"}
        weights["kernel_winograd"] = np.ascontiguousarray(transform_kernel(w, 2).astype(np.float32))
        return weights

    def _plan(self, op, x):
        """What a run needs beyond its inputs, worked out once per layer and input shape and kept on the op (keyed by
        the op's weights and params, the shape, the pool size and the band knobs): ~5 us of a small layer's ~10 us of
        Python per call. None where the numpy winograd-f2x3 runs instead."""
        steps = tuple((st["op"], st.get("type"), st.get("input")) for st in op.params.get("post_ops") or ())
        key = (x.shape, x.dtype, num_threads(), self.band_bytes(), tuning.PARALLEL_MIN_MACS, steps,
               bool(op.params.get("side")))   # (the post-ops too: a params dict changed in place)
        held = op.__dict__.get("_wino_jit_plan")
        if held is not None and held[0] is op.weights and held[1] is op.params and held[2] == key:
            return held[3]
        ks = _kernels()
        _, _, pre, post, out = geometry(op.params, x.shape, [3, 3])
        plan = None
        if x.dtype == np.float32 and x.ndim == 4 and min(pre) >= 0 and min(post) >= 0 and ks is not None:
            u = op.weights.get("kernel_winograd")
            n, c = x.shape[:2]
            m = u.shape[1] if u is not None else (op.params.get("num_output_maps") or c)
            ho, wo = out
            th, tw = -(-ho // 2), -(-wo // 2)
            wh = tw + 1
            rows = max(1, self.band_bytes() // (16 * (c + m) * wh * 4))   # tile rows whose V and U V fit in cache
            threads = num_threads() if n * 16 * m * c * th * tw >= tuning.PARALLEL_MIN_MACS else 1
            tasks = [(ni, t0, t1) for ni in range(n) for t0, t1 in split(th, max(1, -(-threads // n)))]
            b = conv_bias(op.weights)
            bias = None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
            # the compiled band (one call outside the GIL) where its GEMMs are the ones numpy's matmul makes
            # (numpy runs a product with one row, column or inner dimension through gemv / its own loops)
            # (over the pool only: on one thread the Python calls cost nothing extra, and in a process that has not
            # kept freed memory mapped, threads.tune(), the compiled band's scratch came back as fresh pages)
            whole = _band_kernel() if m >= 2 and c >= 2 and len(tasks) > 1 else None
            plan = (ks, pre, out, u, b, bias, fused_epilogue(op), wh, rows, tasks, whole)
        op.__dict__["_wino_jit_plan"] = (op.weights, op.params, key, plan)
        return plan

    def run(self, op, inputs):
        x = np.asarray(inputs[0])
        plan = self._plan(op, x)
        if plan is None:
            return WinogradF2x3.run(self, op, inputs)
        (wino_in, wino_out, phase_split), pre, out, u, b, bias, (act, res_i, fused), wh, rows, tasks, whole = plan
        if u is None:
            w = op.weights.get("kernel")
            u = transform_kernel(w if w is not None else inputs[1], 2).astype(np.float32)
        if b is None and len(inputs) > 2:
            b = inputs[2]
            bias = None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
        n, c = x.shape[:2]
        m = u.shape[1]
        ho, wo = out
        res = _EMPTY3
        if fused and res_i is not None:
            r = inputs[res_i]
            if type(r) is np.ndarray and r.shape == (n, m, ho, wo) and r.dtype == np.float32:
                res = r
            else:   # a broadcast or other-typed residual: the epilogue adds it after the transform
                act, fused = 0, False
        bias = _EMPTY if bias is None or not fused else bias
        y = np.empty((n, m, ho, wo), np.float32)

        if whole is not None and u.dtype == np.float32 and u.flags.c_contiguous:
            wino_band, sgemm = whole

            def band(task):
                ni, r0, r1 = task
                nt = min(rows, r1 - r0)
                nq, nv = 4 * c * (nt + 2) * wh, 16 * c * nt * wh
                scratch = np.empty(nq + nv + 16 * m * nt * wh, np.float32)   # one buffer: see wino_band
                wino_band(x[ni], u, bias, y[ni], res if res is _EMPTY3 else res[ni], pre[0], pre[1], r0, r1, rows,
                          wh, act, sgemm, scratch[:nq], scratch[nq:nq + nv], scratch[nq + nv:])
            parallel_for(band, tasks)
            return [y] if fused else finish(op, y, b, inputs, x.dtype)

        def band(task):
            ni, r0, r1 = task
            for t0 in range(r0, r1, rows):
                t1 = min(r1, t0 + rows)
                # the phases of the padded rows these tiles read (2 t0 .. 2 t1 + 3), from the input rows they are
                # (jit_winograd.wino_in): each band its own, so the split runs in the bands too
                lo = 2 * t0 - pre[0]
                xq = phase_planes(x[ni:ni + 1, :, max(lo, 0):max(lo + 2 * (t1 - t0) + 4, 0)],
                                  (max(-lo, 0), pre[1]), t1 - t0 + 2, wh, phase_split)
                v = np.empty((16, c, (t1 - t0) * wh), np.float32)
                wino_in(xq[0], v, 0, t1 - t0)
                mm = np.matmul(u, v)                            # [16, M, tiles]: the 16 GEMMs
                wino_out(mm, bias, y[ni], t0, t1, wh, act, res if res is _EMPTY3 else res[ni])
        parallel_for(band, tasks)
        if fused:
            return [y]
        return finish(op, y, b, inputs, x.dtype)


@register_tactic
class WinogradF2x3JitBands(WinogradF2x3Jit):
    """winograd-f2x3-jit in bands of tuning.WINOGRAD_LARGE_BYTES, offered where the whole layer's transformed input
    and product exceed tuning.WINOGRAD_BYTES (where winograd-f2x3-jit itself cuts bands): PaddleOCR v4's detector
    head, 96 -> 24 channels over 160x160, ran 8.0-8.4 ms in 8 MiB bands and 5.5-5.8 in 3 MiB ones (one thread); its
    layers of one band (yolov8n's, resnet18's) keep the base tactic's single band. A band cut moves GEMM column
    edges (OpenBLAS's Haswell kernels round those by an ulp), so a tactic of its own rather than a new cut of
    winograd-f2x3-jit's floats; the builder times the two."""
    name = "winograd-f2x3-jit-bands"

    def supports(self, op, input_shapes):
        why = WinogradF2x3Jit.supports(self, op, input_shapes)
        if why is not None:
            return why
        shape = input_shapes[0] if input_shapes else None
        if shape is None or len(shape) != 4 or any(not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
            return "needs the input shape"
        n, c = shape[:2]
        _, _, _, _, (ho, wo) = geometry(op.params, list(shape), [3, 3])
        m = op.params.get("num_output_maps") or c
        if n * 16 * (c + m) * (-(-wo // 2) + 1) * 4 * -(-ho // 2) <= tuning.WINOGRAD_BYTES:
            return "one band: winograd-f2x3-jit's own cut"
        return None

    @staticmethod
    def band_bytes():
        return tuning.WINOGRAD_LARGE_BYTES
