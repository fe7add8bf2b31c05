"""What runs after a convolution's multiply-accumulate: bias, the fused post-ops (activation, residual add,
per-channel bias), and the merged 1x1 shortcut's term (backends/engine/builder/passes/fusion_shortcut.py)."""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.kernels.activations import activation_into, silu_polyexp_inplace
from native.cpu.kernels.conv import tuning
from native.cpu.kernels.fused import apply_post_ops
from native.cpu.threads import parallel_for, split


def finish(op, y, b, inputs, x_dtype):
    """The whole-output epilogue of a convolution tactic: the side term, then bias and post-ops as one compiled pass
    in place where `_bias_and_steps` runs them (the numpy passes' floats), else as numpy passes."""
    if op.params.get("integer"):
        return [np.rint(y).astype(np.int32)]
    if op.params.get("side"):
        y += side_term(op, inputs, y.shape[2:], y.dtype)
    steps = op.params.get("post_ops") or ()
    if (b is not None or steps) and y.ndim >= 2 and _bias_and_steps(
            y, None if b is None else np.asarray(b, y.dtype).reshape(-1), steps, inputs, _WHOLE):
        return [y]
    if b is not None:
        y += np.asarray(b, y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))
    return [apply_post_ops(y, op, inputs)]


def side_input(op, inputs, out_hw, dtype):
    """The shortcut's input sampled at the output pixels: x2[:, :, ::s, ::s] cropped to out_hw (a view)."""
    side = op.params["side"]
    s = side["strides"]
    x2 = np.asarray(inputs[side["input"]])
    if x2.dtype != dtype:
        x2 = x2.astype(dtype)
    return x2[:, :, :s[0] * (out_hw[0] - 1) + 1:s[0], :s[1] * (out_hw[1] - 1) + 1:s[1]]


def side_term(op, inputs, out_hw, dtype, weights=None):
    """side_kernel @ the sampled shortcut input: [N, M, *out_hw] (`weights`: the [M, C2] matrix to use instead,
    e.g. the pre-scaled columns of the packed GEMM weights)."""
    xs = side_input(op, inputs, out_hw, dtype)
    w = np.asarray(op.weights["side_kernel"] if weights is None else weights, dtype)
    n, c2 = xs.shape[:2]
    return np.matmul(w, xs.reshape(n, c2, -1)).reshape((n, w.shape[0]) + tuple(out_hw))


def view_as(a, shape):
    """Reshape that must not copy (we write through it)."""
    v = a.view()
    v.shape = shape
    return v


def silu_from_half(h):
    """silu(2h) = h + h*tanh(h), in place on h (any layout): 3 passes, one scratch buffer."""
    t = np.tanh(h)
    t *= h
    h += t


def region_epilogue(y, sel, op, inputs, bias, half=False):
    """Bias + the layer's post-ops, in place on y[sel] (all of y, or a region of output channels / rows).
    half: the region holds z/2 (GEMM pre-scaled, bias already halved) and the first post-op is SiLU."""
    yr = y[sel]
    csel = sel[1]
    steps = op.params.get("post_ops") or ()
    if _bias_and_steps(yr, None if bias is None else bias[csel], steps, inputs, sel, half):
        return
    first = 0
    if bias is not None:
        if not half and steps and _bias_and_activation(yr, bias[csel], steps[0]):
            first = 1
        else:
            yr += bias[csel].reshape(-1, 1, 1)
    for i, step in enumerate(steps):
        kind = step["op"]
        if i < first:
            continue
        if half and i == 0:
            if step["type"] == "SILU_POLYEXP" and yr.dtype == np.float32:
                silu_polyexp_inplace(yr, double=True)   # the *-polyexp tactics' SiLU (silu_polyexp.py)
            else:
                silu_from_half(yr)
        elif kind == "bias":
            yr += np.asarray(op.weights[step["weight"]], y.dtype).reshape(-1)[csel].reshape(-1, 1, 1)
        elif kind == "activation":
            activation_into(yr, step)
        elif kind == "add":
            yr += inputs[step["input"]][sel]
        else:
            raise ValueError(f"unknown post-op {kind!r}")


_ONE_PASS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_WHOLE = (slice(None), slice(None))


def _bias_and_activation(yr, bias, step):
    """y + bias, then a HardSwish / HardSigmoid step, as one compiled pass in place (native/cpu/jit.py; the floats
    of the two numpy passes): True when done, False where numba is absent or the arrays do not fit."""
    if step["op"] != "activation" or step["type"] not in ("HARD_SWISH", "HARD_SIGMOID"):
        return False
    swish = step["type"] == "HARD_SWISH"
    a, b = step.get("alpha", 0.0), step.get("beta", 0.0)
    if not swish and not (type(a) in (int, float) and type(b) in (int, float)):
        return False
    if type(yr) is not np.ndarray or yr.dtype not in _ONE_PASS_DTYPES or yr.ndim < 2 or not yr.flags.c_contiguous \
            or not yr.flags.writeable or bias.dtype != yr.dtype or bias.shape != (yr.shape[1],):
        return False
    fn = jit.kernel("bias_hard_act_inplace")
    if fn is None:
        return False
    fn(yr.reshape(yr.shape[0], yr.shape[1], -1), np.ascontiguousarray(bias), swish, float(a), float(b))
    return True


_NUMBER = (int, float)
_EMPTY3 = {d: np.empty((0, 0, 0), d) for d in _ONE_PASS_DTYPES}


def compiled_steps(steps, half=False):
    """(rows [k, 3] for bias_steps_inplace, the input index of its residual add or None) for post-ops it runs
    (RELU / CLIP / HARD_SWISH / HARD_SWISH_RELU6 / LEAKY_RELU / SILU_POLYEXP, at most one residual add), else None.
    half: y holds z/2 (a GEMM pre-scaled for its first post-op, SiLU): only a first SILU_POLYEXP step, which then
    doubles first, can take it. Made once per layer by callers that keep it (the 1x1 small path); `_bias_and_steps`
    works it out per call. SILU_POLYEXP rows (codes 6, 7) are float32 only (`_fits`)."""
    rows, res = [], None
    if half and not (steps and steps[0]["op"] == "activation" and steps[0]["type"] == "SILU_POLYEXP"):
        return None
    for i, st in enumerate(steps):
        kind = st["op"]
        if kind == "activation" and st["type"] == "SILU_POLYEXP":
            rows.append((7.0 if half and i == 0 else 6.0, 0.0, 0.0))
            continue
        if kind == "activation" and st["type"] in ("RELU", "CLIP"):
            lo, hi = (0.0, np.inf) if st["type"] == "RELU" else (st.get("alpha", 0.0), st.get("beta", 0.0))
            if type(lo) not in _NUMBER or type(hi) not in _NUMBER or not all(
                    v in (-np.inf, np.inf) or abs(v) < 3e38 for v in (lo, hi)):   # as activations._clip's fast path
                return None
            rows.append((1.0, float(lo), float(hi)))
        elif kind == "activation" and st["type"] == "HARD_SWISH_RELU6":
            rows.append((3.0, 0.0, 0.0))
        elif kind == "activation" and st["type"] == "HARD_SWISH":
            rows.append((4.0, 0.0, 0.0))
        elif kind == "activation" and st["type"] == "LEAKY_RELU":
            a = st.get("alpha", 0.0)
            if type(a) not in _NUMBER or not abs(a) < 3e38:   # a finite number, as in the numpy pass
                return None
            rows.append((5.0, float(a), 0.0))
        elif kind == "add" and res is None:
            res = st["input"]
            rows.append((2.0, 0.0, 0.0))
        else:
            return None
    return np.array(rows, np.float64).reshape(-1, 3), res


def _fits(rows, dtype) -> bool:
    """The compiled pass computes these rows in this dtype: SILU_POLYEXP (codes 6, 7) is polyexp's float32 formula."""
    return dtype == np.float32 or not (rows[:, 0] >= 6.0).any()


def run_compiled_steps(y, bias, plan, inputs) -> bool:
    """y + bias and the post-ops of `plan` (compiled_steps) in place on the whole of y [N, C, ...] in one compiled
    pass: True when done, False where numba is absent or the arrays do not fit (then region_epilogue runs)."""
    rows, res_i = plan
    if not _fits(rows, y.dtype):
        return False
    res = None
    if res_i is not None:
        res = inputs[res_i]
        if type(res) is not np.ndarray or res.shape != y.shape or res.dtype != y.dtype or \
                not res.flags.c_contiguous or np.may_share_memory(res, y):
            return False
    fn = jit.kernel("bias_steps_inplace")
    if fn is None or not y.flags.c_contiguous:
        return False
    n, c = y.shape[:2]
    fn(y.reshape(n, c, -1), _EMPTY1[y.dtype] if bias is None else bias, rows,
       _EMPTY3[y.dtype] if res is None else res.reshape(n, c, -1))
    return True


def _bias_and_steps(yr, bias, steps, inputs, sel, half=False):
    """bias, then RELU / CLIP / HARD_SWISH(_RELU6) / LEAKY_RELU and residual-add post-ops, as one compiled pass in place on y[sel] (native/cpu/jit.py
    `bias_steps_inplace`: the numpy passes' floats): True when done, False where numba is absent, a step is another
    kind, or the arrays do not fit (then the numpy passes run)."""
    if type(yr) is not np.ndarray or yr.dtype not in _ONE_PASS_DTYPES or yr.ndim < 2 or not yr.flags.c_contiguous \
            or not yr.flags.writeable or (bias is None and not steps):
        return False
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != yr.dtype or bias.shape != (yr.shape[1],)):
        return False
    plan = compiled_steps(steps, half)
    if plan is None or not _fits(plan[0], yr.dtype):
        return False
    rows, res_i = plan
    res = None
    if res_i is not None:
        r = inputs[res_i]
        if type(r) is not np.ndarray:
            return False
        r = r[sel]
        if r.shape != yr.shape or r.dtype != yr.dtype or not r.flags.c_contiguous or np.may_share_memory(r, yr):
            return False
        res = r
    fn = jit.kernel("bias_steps_inplace")
    if fn is None:
        return False
    n, c = yr.shape[:2]
    fn(yr.reshape(n, c, -1), _EMPTY1[yr.dtype] if bias is None else np.ascontiguousarray(bias), rows,
       _EMPTY3[yr.dtype] if res is None else res.reshape(n, c, -1))
    return True


_EMPTY1 = {d: np.empty(0, d) for d in _ONE_PASS_DTYPES}


def whole_epilogue(y, op, inputs, bias, half, threads):
    """`region_epilogue` over all of y: inline, or in channel chunks over the pool when y is large."""
    if threads > 1 and y.size >= tuning.PARALLEL_EPILOGUE_MIN:
        parallel_for(lambda rng: region_epilogue(y, (slice(None), slice(*rng)), op, inputs, bias, half),
                     split(y.shape[1], threads))
    else:
        region_epilogue(y, (slice(None), slice(None)), op, inputs, bias, half)


def regionable(op, inputs, y_shape):
    for step in op.params.get("post_ops") or ():
        if step["op"] == "add":
            r = inputs[step["input"]]
            if not isinstance(r, np.ndarray) or r.shape != tuple(y_shape):
                return False
        elif step["op"] == "bias" and step.get("axis", 1) != 1:
            return False
    return True
