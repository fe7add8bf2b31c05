"""MatrixMultiply "packed-gemm-panels": a [.., K] x [K, N] product with constant weights by a compiled GEMM of our own
(native/cpu/jit_panel_gemm.py, the numba extra) on weights packed at build time into column panels [P, K, 32].

Why a GEMM of our own: the transformers' GEMMs have few rows (BERT's and GPT-2's 16-32 tokens); OpenBLAS re-packs
the weights on every call there, and where its core type is pinned (OPENBLAS_CORETYPE=Haswell) it runs AVX2 kernels
on an AVX-512 machine: bert_mini's GEMMs took 2.2 ms a run pinned, 1.4 unpinned. This loop packs nothing at run
time, is compiled for the host CPU whatever OpenBLAS picks, and does the [bias +] RELU / GELU epilogue on each 4 x
32 block while it is in cache (GELU: polyexp's floats, as the *-polyexp tactics). Its floats are its own (fused
multiply-adds in k order), so it is a tactic the builder times against the others, not a replacement.

On the CPU pool the panels are split in two (each thread streams half of the weights, which bounds these small
GEMMs), handed to the worker as a GEMM share that it runs without the GIL (threads.gemm_shares; a Python hand-off
started the worker's half 30-100 us late, native/cpu/jit_gemm_share.py); an output's floats do not depend on the
split, so not on the threads there are. `pack_panels` + `gemm` are the same product for other layers with constant
weights (a convolution's patch GEMM).
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit, threads
from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.matmul import _direct_epilogue, _half
from native.tactics import Tactic, register_tactic

PANEL = 32                  # columns per panel: jit_panel_gemm.NR (not imported: that module imports numba)
PARALLEL_MIN_MACS = 1 << 21  # split from ~20 us of one core: the split costs ~5 us (measured: [16, 256] x [256, 256],
                             # 1M multiply-adds, 11.5 us on one thread, 11.7 split; [32, 256] x [256, 256] 20.7 -> 16.2)
_ACT = {"RELU": 1, "GELU_ERF": 2, "GELU_TANH": 3}   # done in the kernel; another activation runs after it


def epilogue(op):
    """(bias [N] or None, kernel activation code, the activation step to apply after the kernel or None) for
    post-ops [bias (last axis),] [activation]; None for any other post-ops."""
    return _direct_epilogue(op, _ACT)


def pack_panels(b):
    """b [K, N] -> [ceil(N / PANEL), K, PANEL] float32, C-contiguous, zero past N."""
    k, n = b.shape
    p = -(-n // PANEL)
    padded = np.zeros((k, p * PANEL), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, p, PANEL).transpose(1, 0, 2))


def kernels(act):
    """(the compiled kernel for an activation code (0 none, 1 RELU, 2 GELU_ERF, 3 GELU_TANH): panel_gemm or
    panel_gemm_gelu (its `tanh` flag taking the code's place), the rows of its blocks, the share descriptors'
    builder): `gemm`'s last three arguments (native/cpu/jit_panel_gemm.py; the caller checks jit.available())."""
    fn = jit.kernel("panel_gemm") if act < 2 else _gelu(jit.kernel("panel_gemm_gelu"))
    return fn, int(jit.kernel("panel_rows")()), jit.kernel("panel_descriptors")


def _gelu(kernel):
    """panel_gemm_gelu behind panel_gemm's signature (the activation code 3 its `tanh` flag)."""
    def fn(a, bp, bias, has_bias, act, y, p0, p1):
        kernel(a, bp, bias, has_bias, act == 3, y, p0, p1)
    return fn


def gemm(a, bp, bias, has_bias, act, y, fn, rows, describe):
    """y [M, N] = act(a [M, K] @ b + bias) with b packed by `pack_panels` (bp) and bias [P * 32] (zeros when
    has_bias is False), all float32 and C-contiguous; fn, rows, describe: `kernels(act)`. The whole row blocks
    split in two by panels over the CPU pool where the product is large enough (the worker's half a GEMM share run
    without the GIL, else a parallel_for part), the last M % rows rows as one block padded with zero rows. For other
    layers with constant weights (a convolution's GEMM): pack once, call per run; the floats do not depend on the
    threads."""
    m, k = a.shape
    n = y.shape[1]
    panels = bp.shape[0]
    whole = m - m % rows
    if whole:
        aw, yw = a[:whole], y[:whole]
        if panels >= 2 and whole * k * n >= PARALLEL_MIN_MACS and threads.num_threads() > 1:
            cut = np.array((0, panels // 2, panels), np.int64)
            shares = np.empty((2, 9), np.int64)
            describe(aw, bp, bias, has_bias, act, yw, cut, shares)
            if not threads.gemm_shares([shares[0], shares[1]]):
                threads.parallel_for(lambda r: fn(aw, bp, bias, has_bias, act, yw, r[0], r[1]),
                                     ((0, panels // 2), (panels // 2, panels)))
        else:
            fn(aw, bp, bias, has_bias, act, yw, 0, panels)
    if whole < m:   # the last rows as one block padded with zero rows (the kernel runs whole blocks only)
        ap = np.zeros((rows, k), np.float32)
        ap[:m - whole] = a[whole:]
        yp = np.empty((rows, n), np.float32)
        fn(ap, bp, bias, has_bias, act, yp, 0, panels)
        y[whole:] = yp[:m - whole]
    return y


@register_tactic
class PackedGemmPanels(Tactic):
    """[bias +] activation(a @ b) by jit_panel_gemm.panel_gemm, b packed into column panels at build time. float32."""
    kind = "MatrixMultiply"
    name = "packed-gemm-panels"
    precisions = ("float32",)
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        b = op.weights.get("b_panels", op.weights.get("b"))
        if b is None or b.ndim not in (2, 3):
            return "constant 2-D weights only"
        if op.params.get("transpose_a"):
            return "no transposed left operand"
        if epilogue(op) is None:
            return "post-ops other than [bias,] activation"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and dtypes[0] not in (None, "float32"):
            return "float32 input only"
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) < 1:
            return "a left operand of at least one dimension"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = dict(op.weights)
        if "b_panels" in w:   # already packed (idempotent)
            return w
        b = w.pop("b")
        if op.params.get("transpose_b"):
            b = b.T
        n = b.shape[1]
        w["b_panels"] = pack_panels(b.astype(np.float32) if _half(b.dtype) else b)
        w["b_columns"] = np.array(n, np.int64)
        bias = epilogue(op)[0]
        if bias is not None:   # padded to whole panels: the kernel reads a panel's bias whole
            padded = np.zeros(w["b_panels"].shape[0] * PANEL, np.float32)
            padded[:n] = bias
            w[op.params["post_ops"][0]["weight"]] = padded
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        cfg = op.__dict__.get("_panels")
        if cfg is None or cfg[0] is not op.weights:   # per op, once
            bias, act, other = epilogue(op)
            bp = op.weights["b_panels"]
            cfg = op.__dict__["_panels"] = (
                op.weights, bp, np.zeros(bp.shape[0] * PANEL, np.float32) if bias is None else bias,
                bias is not None, act, other,
                int(op.weights["b_columns"])) + kernels(act)
        _, bp, bias, has_bias, act, other, n, fn, rows, describe = cfg
        a = inputs[0]
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        shape = a.shape[:-1] + (n,)
        m = 1
        for d in a.shape[:-1]:
            m *= d
        a2 = np.ascontiguousarray(a.reshape(m, a.shape[-1]))
        y = outputs[0] if outputs is not None and outputs[0] is not None and outputs[0].dtype == np.float32 \
            and outputs[0].shape == shape and outputs[0].flags.c_contiguous else np.empty(shape, np.float32)
        gemm(a2, bp, bias, has_bias, act, y.reshape(m, n), fn, rows, describe)
        if other is not None:
            res = activation_inplace(y, other["type"], other.get("alpha", 0.0), other.get("beta", 0.0))
            if res is not y:
                y[...] = res
        return [y]

