"""CPU kernels: MatrixMultiply (three tactics) and Einsum.

MatrixMultiply tactics:
  * "blas": np.matmul on the operands as given (transposes as strided views). Numpy loops over the batch and
    calls BLAS once per matrix, which is best when both operands are activations or the batch is tiny.
  * "packed-gemm": only for a constant 2-D right operand (weights['b']). `prepare` stores it transposed as
    needed and C-contiguous ("b_packed", [K, N]) at build time; `run` folds every leading dim of the left
    operand into the row dim and does ONE [batch*M, K] x [K, N] GEMM, avoiding numpy's per-matrix loop.
    Large GEMMs run in row bands on the CPU pool, each band with its bias / activation epilogue (`gemm`).
  * "packed-gemm-t": the same product computed as (b^T a^T)^T, faster in OpenBLAS for few rows (M <= ~32).
  * "packed-gemm-cols": packed-gemm with the columns of the product split over the CPU pool (each thread reads
    only its part of the weights: with few rows, BERT's [16..32, K] activations, a GEMM is bound by streaming the
    weights, and a split of its 16-32 rows would have each thread stream all of them); bias / activation
    epilogue per part.
  * "packed-gemm-t-rows" (+ "-polyexp"): packed-gemm-t with b^T's rows split over the CPU pool (matmul_rows.py).
  * "packed-gemm-polyexp" / "packed-gemm-t-polyexp" / "packed-gemm-cols-polyexp": those with a [bias +] GELU epilogue evaluated by
    native/cpu/polyexp.py (its polynomial exp: ~2 ulp from numpy's, so tactics of their own), one compiled pass per
    band of rows with the numba extra (the same floats without it, in numpy passes).
All compute float16/bfloat16 in float32 (numpy has no half-precision BLAS) and apply params["post_ops"].
"""
import numpy as np

from native.cpu import jit, polyexp, threads
from native.cpu.kernels import rows
from native.cpu.kernels.activations import activation_inplace
from native.cpu.kernels.fused import apply_post_ops
from native.tactics import Tactic, register_tactic, simple_tactic

_WIDEN = {"float16", "bfloat16"}


def _half(dt) -> bool:
    """dt.name in _WIDEN without `dtype.name` (a Python-level property: several µs per call in a small GEMM):
    float16 is the 2-byte 'f' kind, ml_dtypes' bfloat16 the 2-byte 'V' kind."""
    return dt.itemsize == 2 and dt.kind in "fV"


def _tr(x):
    return x if x.ndim < 2 else np.swapaxes(x, -1, -2)


def _finish(y, out_dtype, op, inputs):
    if not isinstance(y, np.ndarray):
        y = np.asarray(y)
    if y.dtype != out_dtype:
        y = y.astype(out_dtype)
    if op.params.get("post_ops"):
        y = apply_post_ops(y, op, inputs)
    return y


@register_tactic
class BlasMatMul(Tactic):
    kind = "MatrixMultiply"
    name = "blas"
    honours = {"post_ops"}
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        cfg = op.__dict__.get("_blas")
        if cfg is None or cfg[0] is not op.weights or cfg[1] is not op.params:   # per op, once (`_blas_recipe`)
            cfg = op.__dict__["_blas"] = _blas_recipe(op)
        _, _, b, ta, tb, bias, act = cfg
        a = inputs[0]
        if b is None:
            b = inputs[1]
            if tb:
                b = _tr(b)
        if ta:
            a = _tr(a)
        out_dtype = a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype)  # internal lowerings may mix
        if _half(out_dtype):
            a, b = a.astype(np.float32), b.astype(np.float32)
        elif outputs is not None and outputs[0] is not None and outputs[0].dtype == out_dtype \
                and a.dtype == b.dtype:   # straight into the planned buffer
            y = np.matmul(a, b, out=outputs[0])
            if bias is None or not y.ndim:
                return [_finish(y, out_dtype, op, inputs)]
            return [_bias_act(y, bias, act)]
        y = np.matmul(a, b)
        if bias is None or type(y) is not np.ndarray or y.dtype != out_dtype or not y.ndim:
            return [_finish(y, out_dtype, op, inputs)]
        return [_bias_act(y, bias, act)]


def bias_and_activation(op):
    """(last-axis bias, one activation step after it) of the layer's post-ops when they are exactly that (`_blas_recipe`,
    kept on the op), else (None, None): the general `_finish` applies them."""
    cfg = op.__dict__.get("_blas")
    if cfg is None or cfg[0] is not op.weights or cfg[1] is not op.params:
        cfg = op.__dict__["_blas"] = _blas_recipe(op)
    return cfg[5], cfg[6]


def _blas_recipe(op):
    """What BlasMatMul.run needs that depends only on the op: (weights, params, constant right operand already
    transposed as a view or None, transpose_a, transpose_b, the bias when the post-ops are a last-axis bias [then
    one activation] (else None: `_finish` applies them), that activation step or None). The same operations as
    the general path, without its per-call lookups (~2 us a call: most of a small GEMV's overhead)."""
    p = op.params
    w = op.weights
    b = w.get("b")
    tb = bool(p.get("transpose_b"))
    if b is not None and tb:
        b = _tr(b)
    bias = act = None
    post = p.get("post_ops") or ()
    # axis -1 only (apply_post_ops' default axis 1 is the last axis of 2-D results alone) and a 1-D bias: `y += bias`
    # then broadcasts exactly as apply_post_ops' reshaped bias does
    if post and post[0]["op"] == "bias" and len(post) <= 2 and post[0].get("axis", 1) == -1 \
            and (len(post) == 1 or post[1]["op"] == "activation"):
        bw = w.get(post[0]["weight"])
        if bw is not None and bw.ndim == 1:
            bias = bw
            act = post[1] if len(post) == 2 else None
    return w, p, b, bool(p.get("transpose_a")), tb, bias, act


def _bias_act(y, bias, act):
    """y += bias (last axis), then the activation: apply_post_ops' floats for those two steps."""
    y += bias
    if act is not None:
        y = activation_inplace(y, act["type"], act.get("alpha", 0.0), act.get("beta", 0.0))
    return y


@register_tactic
class PackedGemm(Tactic):
    kind = "MatrixMultiply"
    name = "packed-gemm"
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        b = op.weights.get("b_packed", op.weights.get("b"))
        if b is None or b.ndim != 2:
            return False
        if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) < 1:
            return False
        return True

    def prepare(self, op):
        w = dict(op.weights)
        if "b_packed" in w:  # already packed (idempotent)
            return w
        b = w.pop("b")
        if op.params.get("transpose_b"):
            b = b.T
        if _half(b.dtype):
            b = b.astype(np.float32)
        w["b_packed"] = np.ascontiguousarray(b)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = inputs[0]
        bp = op.weights["b_packed"]
        if op.params.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        out_dtype = a.dtype if a.dtype == bp.dtype or _half(a.dtype) else np.result_type(a.dtype, bp.dtype)
        compute = bp.dtype if _half(out_dtype) else out_dtype
        if a.dtype != compute:
            a = a.astype(compute)
        if bp.dtype != compute:
            bp = bp.astype(compute)
        k, n = bp.shape
        if a.ndim == 1:
            return [_finish(np.dot(a, bp), out_dtype, op, inputs)]
        post = op.params.get("post_ops")
        into = outputs[0].reshape(-1, n) if _into(outputs, compute) and out_dtype == compute else None
        if post and out_dtype == compute and all(s["op"] in ("bias", "activation") for s in post):
            # row-local epilogue: applied per band, right after that band's GEMM (in cache, in parallel)
            y = gemm(a.reshape(-1, k), bp, epilogue=lambda band: apply_post_ops(band, op, inputs), out=into)
            return [y.reshape(a.shape[:-1] + (n,))]
        y = gemm(a.reshape(-1, k), bp, out=into).reshape(a.shape[:-1] + (n,))
        return [_finish(y, out_dtype, op, inputs)]


@register_tactic
class PackedGemmTransposed(Tactic):
    """Like packed-gemm, but computes y^T = b^T a^T with b^T stored [N, K] C-contiguous at build time, then copies
    y back to row-major. With few rows (M = batch * tokens = 16..32) OpenBLAS packs the big operand on every call
    in the plain orientation; in this one the small operand is the one packed (measured up to 1.5x faster for
    [16, 256] x [256, 1024]; slower for tall inputs, so the builder's timing decides)."""
    kind = "MatrixMultiply"
    name = "packed-gemm-t"
    honours = {"post_ops"}

    def supports(self, op, input_shapes):
        b = op.weights.get("bt_packed", op.weights.get("b"))
        if b is None or b.ndim != 2 or b.dtype.kind != "f" or b.dtype.itemsize < 4:
            return False
        return not (input_shapes and input_shapes[0] is not None and len(input_shapes[0]) < 2)

    def prepare(self, op):
        w = dict(op.weights)
        if "bt_packed" in w:
            return w
        b = w.pop("b")
        w["bt_packed"] = np.ascontiguousarray(b if op.params.get("transpose_b") else b.T)
        return w

    def run(self, op, inputs):
        a = inputs[0]
        bt = op.weights["bt_packed"]
        if op.params.get("transpose_a"):
            a = np.swapaxes(a, -1, -2)
        out_dtype = a.dtype if a.dtype == bt.dtype or _half(a.dtype) else np.result_type(a.dtype, bt.dtype)
        compute = bt.dtype if _half(out_dtype) else out_dtype
        if a.dtype != compute:
            a = a.astype(compute)
        if bt.dtype != compute:
            bt = bt.astype(compute)
        n, k = bt.shape
        return [transposed_back(op, inputs, np.dot(bt, a.reshape(-1, k).T), a.shape[:-1], out_dtype, compute)]


def transposed_back(op, inputs, yt, lead, out_dtype, compute):
    """y [*lead, N] from y^T [N, M] and the layer's post-ops: a float32 last-axis bias [+ one activation] added in
    the copy back to row-major (one pass, the same float32 sums), anything else by `_finish` after the copy."""
    n = yt.shape[0]
    if out_dtype == compute == np.float32:
        bias, act = bias_and_activation(op)
        if bias is not None and bias.dtype == np.float32:
            y = np.empty(yt.shape[::-1], np.float32)
            np.add(yt.T, bias, out=y)
            y = y.reshape(lead + (n,))
            if act is not None:
                y = activation_inplace(y, act["type"], act.get("alpha", 0.0), act.get("beta", 0.0))
            return y
    y = np.ascontiguousarray(yt.T).reshape(lead + (n,))
    return _finish(y, out_dtype, op, inputs)


def _polyexp_epilogue(op):
    """(bias or None, activation type) when the layer's post-ops are [bias,] GELU (what polyexp.gelu_rows
    evaluates), else None."""
    post = op.params.get("post_ops") or ()
    steps = [s["op"] for s in post]
    if steps not in (["activation"], ["bias", "activation"]) or post[-1]["type"] not in polyexp.ACTIVATIONS:
        return None
    if steps[0] == "bias":
        if post[0].get("axis", -1) not in (-1,):
            return None
        b = op.weights.get(post[0]["weight"])
        if b is None or b.ndim != 1:
            return None
        return b, post[-1]["type"]
    return None, post[-1]["type"]


class _PolyExpEpilogue:
    """Mixin: float32 only, post-ops [bias,] GELU evaluated by polyexp.gelu_rows over rows of the [M, N] result."""
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        if _polyexp_epilogue(op) is None:
            return "post-ops are not [bias,] GELU_ERF / GELU_TANH"
        if input_shapes and getattr(input_shapes, "dtypes", None) and input_shapes.dtypes[0] not in (None, "float32"):
            return "float32 input only"
        return super().supports(op, input_shapes)

    def prepare(self, op):
        w = super().prepare(op)
        bias, _ = _polyexp_epilogue(op)
        if bias is not None:
            w[op.params["post_ops"][0]["weight"]] = np.ascontiguousarray(bias, np.float32)
        return w


@register_tactic
class PackedGemmPolyExp(_PolyExpEpilogue, PackedGemm):
    """packed-gemm with its [bias +] GELU epilogue in one pass per band of rows (polyexp.gelu_rows), in the band's
    thread right after its GEMM."""
    name = "packed-gemm-polyexp"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = inputs[0]
        bp = op.weights["b_packed"]
        if op.params.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        k, n = bp.shape
        bias, kind = _polyexp_epilogue(op)
        into = outputs[0].reshape(-1, n) if _into(outputs, bp.dtype) and outputs[0].flags.c_contiguous else None
        y = gemm(a.reshape(-1, k), bp, epilogue=lambda band: rows.gelu_rows(band, bias, kind), out=into)
        return [y.reshape(a.shape[:-1] + (n,))]


@register_tactic
class PackedGemmTransposedPolyExp(_PolyExpEpilogue, PackedGemmTransposed):
    """packed-gemm-t (y^T = b^T a^T, for few rows) with its [bias +] GELU epilogue in one pass
    (polyexp.gelu_rows) over the row-major copy."""
    name = "packed-gemm-t-polyexp"

    def run(self, op, inputs):
        a = inputs[0]
        bt = op.weights["bt_packed"]
        if op.params.get("transpose_a"):
            a = np.swapaxes(a, -1, -2)
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        n, k = bt.shape
        bias, kind = _polyexp_epilogue(op)
        y = np.ascontiguousarray(np.dot(bt, a.reshape(-1, k).T).T)
        rows.gelu_rows(y, bias, kind)
        return [y.reshape(a.shape[:-1] + (n,))]


@register_tactic
class PackedGemmColumns(PackedGemm):
    """packed-gemm with the product's columns split over the CPU pool (`gemm_columns`); post-ops bias / activation
    only (applied to each thread's columns). float32."""
    name = "packed-gemm-cols"
    precisions = ("float32",)

    def supports(self, op, input_shapes):
        post = op.params.get("post_ops") or ()
        if any(s["op"] not in ("bias", "activation") or (s["op"] == "bias" and s.get("axis", -1) != -1)
               for s in post):
            return "post-ops other than bias / activation"
        if input_shapes and getattr(input_shapes, "dtypes", None) and input_shapes.dtypes[0] not in (None, "float32"):
            return "float32 input only"
        return super().supports(op, input_shapes)

    def epilogue(self, op):
        post = op.params.get("post_ops")
        if not post:
            return None
        def apply(y, c0, c1):
            part = y[:, c0:c1]
            for step in post:
                if step["op"] == "bias":
                    part += op.weights[step["weight"]][c0:c1]
                else:
                    res = activation_inplace(part, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
                    if res is not part:
                        part[...] = res
        return apply

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a = inputs[0]
        bp = op.weights["b_packed"]
        if op.params.get("transpose_a") and a.ndim >= 2:
            a = np.swapaxes(a, -1, -2)
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        k, n = bp.shape
        into = outputs[0].reshape(-1, n) if _into(outputs, bp.dtype) and outputs[0].flags.c_contiguous else None
        y = gemm_columns(np.ascontiguousarray(a.reshape(-1, k)), bp, self.epilogue(op), out=into)
        return [y.reshape(a.shape[:-1] + (n,))]


@register_tactic
class PackedGemmColumnsPolyExp(_PolyExpEpilogue, PackedGemmColumns):
    """packed-gemm-cols with its [bias +] GELU epilogue by polyexp.gelu_rows on each thread's columns."""
    name = "packed-gemm-cols-polyexp"

    def epilogue(self, op):
        bias, kind = _polyexp_epilogue(op)
        return lambda y, c0, c1: rows.gelu_rows(y, bias, kind, c0, c1)


DIRECT_MAX_ROWS = 8            # more rows: BLAS's register blocking wins (measured 3-5x at 16 rows)
_DIRECT_ACT = {"RELU": 1, "SIGMOID": 2}


def direct_refusal(op, input_shapes, packed_key) -> str | None:
    """Why a compiled few-row GEMM (packed-gemm-direct, gemv-dot) cannot run the layer, as far as they share it:
    constant 2-D weights (`packed_key`: its prepared form), no transposed left operand, post-ops [bias,] activation,
    a float32 left operand of known shape. None: those hold."""
    b = op.weights.get(packed_key, op.weights.get("b"))
    if b is None or b.ndim != 2:
        return "constant 2-D weights only"
    if op.params.get("transpose_a"):
        return "no transposed left operand"
    if _direct_epilogue(op) is None:
        return "post-ops other than [bias,] activation"
    dtypes = getattr(input_shapes, "dtypes", None)
    if dtypes and dtypes[0] not in (None, "float32"):
        return "float32 input only"
    if not input_shapes or input_shapes[0] is None or len(input_shapes[0]) < 1:
        return "left operand of known shape only"
    return None


@register_tactic
class PackedGemmDirect(Tactic):
    """[bias +] activation(a @ b) for a few rows as one compiled loop (native/cpu/jit_gemm.py; numba extra), weights
    packed [K, N] at build time; RELU / SIGMOID in the loop (SIGMOID by polyexp's exp), another activation after it
    (numpy's). float32."""
    kind = "MatrixMultiply"
    name = "packed-gemm-direct"
    precisions = ("float32",)
    honours = {"post_ops"}
    writes_outputs = True

    def supports(self, op, input_shapes):
        why = direct_refusal(op, input_shapes, "b_packed")
        if why:
            return why
        rows = 1
        for d in input_shapes[0][:-1]:
            if d is None or d < 0:
                return "left operand of known shape only"
            rows *= d
        if rows > DIRECT_MAX_ROWS or rows < 1:
            return f"{DIRECT_MAX_ROWS} rows at most (BLAS wins on more)"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def prepare(self, op):
        w = PackedGemm.prepare(self, op)
        w["b_packed"] = np.ascontiguousarray(w["b_packed"], np.float32)
        bias = _direct_epilogue(op)[0]
        if bias is not None:
            w[op.params["post_ops"][0]["weight"]] = np.ascontiguousarray(bias, np.float32)
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        cfg = op.__dict__.get("_gemm_direct")
        if cfg is None or cfg[0] is not op.weights:   # per op, once: its weights, bias and epilogue codes
            bias, act, other = _direct_epilogue(op)
            bp = op.weights["b_packed"]
            cfg = op.__dict__["_gemm_direct"] = (
                op.weights, bp, _NO_BIAS if bias is None else bias, bias is not None, act, other, bp.shape[1],
                jit.kernel("gemm_direct"))
        _, bp, bias, has_bias, act, other, n, fn = cfg
        a = inputs[0]
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        if a.ndim == 2 and a.strides[1] == 4:   # already [M, K] with unit-stride rows: no views to make
            a2, shape = a, (a.shape[0], n)
        else:
            shape = a.shape[:-1] + (n,)
            a2 = a.reshape(-1, a.shape[-1])
            if a2.strides[-1] != 4:
                a2 = np.ascontiguousarray(a2)
        y = outputs[0] if outputs is not None and outputs[0] is not None and outputs[0].dtype == np.float32 \
            and outputs[0].shape == shape and outputs[0].flags.c_contiguous else np.empty(shape, np.float32)
        fn(a2, bp, bias, has_bias, act, y if y.ndim == 2 else y.reshape(-1, n))
        if other is not None:
            res = activation_inplace(y, other["type"], other.get("alpha", 0.0), other.get("beta", 0.0))
            if res is not y:
                y[...] = res
        return [y]


_NO_BIAS = np.zeros(0, np.float32)


def _direct_epilogue(op, codes=None):
    """(bias [N] or None, in-loop activation code, the activation step to apply after the loop or None) for post-ops
    [bias (last axis),] [activation]; None for any other post-ops. `codes`: the kernel's activation codes
    (packed-gemm-direct's by default; packed-gemm-panels passes its own)."""
    codes = _DIRECT_ACT if codes is None else codes
    post = op.params.get("post_ops") or ()
    bias, act, other = None, 0, None
    i = 0
    if i < len(post) and post[i]["op"] == "bias":
        b = op.weights.get(post[i]["weight"])
        if post[i].get("axis", -1) != -1 or b is None or b.ndim != 1:
            return None
        bias, i = b, i + 1
    if i < len(post) and post[i]["op"] == "activation":
        act = codes.get(post[i]["type"], 0)
        other = None if act else post[i]
        i += 1
    return (bias, act, other) if i == len(post) else None


# below this one thread beats a split: waking a pool thread costs ~50 µs here, and the pool's first use turns
# BLAS threading off for the whole process (native.cpu.threads), which small GEMMs (BERT at batch 1) feel
PARALLEL_MIN_MACS = 1 << 24
_BAND_ROWS = 8


def _into(outputs, dtype):
    """The planned output buffer to write into, when there is one of the result's dtype."""
    return outputs is not None and outputs[0] is not None and outputs[0].dtype == dtype


def gemm(a, b, epilogue=None, out=None):
    """a [M, K] @ b [K, N], then `epilogue(rows)` (in place, row-local) if given. Large products are split into
    row bands run on the CPU pool (native.cpu.threads), one single-threaded BLAS call plus epilogue per band:
    OpenBLAS's own threads busy-wait between calls, which on a small shared machine costs more than they gain.
    out: a C-contiguous [M, N] buffer of the result's dtype to write into (the memory plan's view)."""
    m, k = a.shape
    n = b.shape[1]
    macs = m * n * k
    parts = 1
    if m >= 2 * _BAND_ROWS and a.dtype == b.dtype and a.dtype.kind == "f" and \
            macs >= PARALLEL_MIN_MACS:
        parts = threads.num_threads()
    if parts == 1:
        y = np.dot(a, b) if out is None else np.dot(a, b, out=out)
        return epilogue(y) if epilogue is not None else y
    y = np.empty((m, n), np.result_type(a.dtype, b.dtype)) if out is None else out

    def band(r):
        yb = y[r[0]:r[1]]
        np.dot(a[r[0]:r[1]], b, out=yb)
        if epilogue is not None:
            res = epilogue(yb)
            if res is not yb:
                yb[...] = res
    threads.parallel_for(band, threads.split(m, parts))
    return y


COLUMNS_MIN_MACS = 1 << 20   # ~40 us of one core's work: below it, waking a pool thread costs more than it saves
COLUMN_PARTS = 2              # fixed, not the thread count: OpenBLAS's floats depend on the column split
_COLUMN_ALIGN = 16


def gemm_columns(a, b, epilogue=None, out=None):
    """a [M, K] @ b [K, N] (float32, C-contiguous) with N cut into COLUMN_PARTS parts run on the CPU pool: each
    part one BLAS call on a column slice of b into the same column slice of the result (ldb = ldc = N: no copies),
    then `epilogue(y, c0, c1)` on its columns. One part below COLUMNS_MIN_MACS. The cut does not depend on the
    threads there are (one thread runs the parts in turn), so neither do the floats."""
    m, k = a.shape
    n = b.shape[1]
    y = np.empty((m, n), np.float32) if out is None else out
    if m * n * k < COLUMNS_MIN_MACS or n < COLUMN_PARTS * _COLUMN_ALIGN:
        np.matmul(a, b, out=y)
        if epilogue is not None:
            epilogue(y, 0, n)
        return y
    blocks = n // _COLUMN_ALIGN
    edges = [_COLUMN_ALIGN * (blocks * i // COLUMN_PARTS) for i in range(COLUMN_PARTS)] + [n]
    if _native_shares(a, b, y, edges):
        if epilogue is not None:
            for i in range(COLUMN_PARTS):
                epilogue(y, edges[i], edges[i + 1])
        return y

    def part(i):
        c0, c1 = edges[i], edges[i + 1]
        np.matmul(a, b[:, c0:c1], out=y[:, c0:c1])
        if epilogue is not None:
            epilogue(y, c0, c1)
    threads.parallel_for(part, range(COLUMN_PARTS))
    return y


def _native_shares(a, b, y, edges) -> bool:
    """y[:, c0:c1] = a @ b[:, c0:c1] for each pair of `edges`, all at once on the CPU pool without the GIL
    (threads.gemm_shares: one cblas_sgemm each, the call numpy's matmul makes for these slices, so the same
    floats). False, with nothing computed, where the pool cannot (then parallel_for runs the parts). a, b, y:
    float32 with unit column stride; numpy takes gemv instead of gemm for one row, so a needs two."""
    m, k = a.shape
    if m < 2 or a.dtype != np.float32 or b.dtype != np.float32 or y.dtype != np.float32 or \
            a.strides[1] != 4 or b.strides[1] != 4 or y.strides[1] != 4:
        return False
    return threads.gemm_shares([threads.gemm_share(a, b[:, c0:c1], y[:, c0:c1])
                                for c0, c1 in zip(edges[:-1], edges[1:])])


@simple_tactic("Einsum")
def einsum(op, inputs):
    eq = op.params["equation"].replace(" ", "")
    arrays = [np.asarray(x) for x in inputs]
    dtype = arrays[0].dtype if arrays else np.float32
    if _half(dtype):
        arrays = [x.astype(np.float32) for x in arrays]
    y = np.einsum(eq, *arrays, optimize=len(arrays) > 2)
    y = np.asarray(y)
    return [y if y.dtype == dtype else y.astype(dtype)]
