"""CPU kernels for fused work: the post-op epilogue shared by convolution and matrix multiply, the Pointwise
program interpreter and the Attention layer.

Post-op contract: a Convolution / Deconvolution / MatrixMultiply node may carry params["post_ops"], a list of
steps applied in place to its result, in order:
    {"op": "bias", "weight": "<weights key>", "axis": 1}      add a per-channel bias from op.weights
                                                              (axis 1 for convolutions, -1 for matrix multiply)
    {"op": "activation", "type": "RELU", "alpha": .., "beta": ..}
    {"op": "add", "input": <index into the node's inputs>}     residual add of an extra input
Extra inputs referenced by "add" are appended after the node's normal inputs (Convolution / Deconvolution pad their
inputs to 3 with None first, MatrixMultiply to 2), so the kernel's own optional inputs keep their positions.

Pointwise program (params["program"]): steps {"op": <layer kind: ElementWise | Unary | Activation>,
"args": [refs], "params": <that layer's params>} evaluated in order; refs are "in:<i>" (node input i),
"w:<key>" (op.weights[key], small constants inlined at build time) or "s:<j>" (result of step j). The last
step's result is the output. Intermediates are reused in place once their last reader has run, so a chain of
n ops allocates about one buffer instead of n.
"""
import numpy as np

from native.cpu import jit
from native.cpu.kernels import pointwise_chain, rows
from native.tactics import Tactic, register_tactic, simple_tactic

_ADD_REDUCE, _MAX_REDUCE = np.add.reduce, np.maximum.reduce


def apply_post_ops(y, op, inputs):
    post = op.params.get("post_ops")
    if not post:
        return y
    from native.cpu.kernels.activations import activation_inplace
    for step in post:
        kind = step["op"]
        if kind == "bias":
            b = op.weights[step["weight"]]
            shape = [1] * y.ndim
            shape[step.get("axis", 1)] = -1
            y += b.reshape(shape)
        elif kind == "activation":
            y = activation_inplace(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
        elif kind == "add":
            r = inputs[step["input"]]
            if np.shape(r) == y.shape:
                y += r
            else:
                y = y + r
        else:
            raise ValueError(f"unknown post-op {kind!r}")
    return y


# Pointwise ---------------------------------------------------------------------------------------------------

_BINARY = {"SUM": np.add, "PROD": np.multiply, "SUB": np.subtract, "DIV": np.divide, "MAX": np.maximum,
           "MIN": np.minimum}


def _last_reads(program):
    """For each step, the step indices whose results are read for the last time by it."""
    last = {}
    for j, st in enumerate(program):
        for a in st["args"]:
            if a.startswith("s:"):
                last[int(a[2:])] = j
    frees = [[] for _ in program]
    for s, j in last.items():
        frees[j].append(s)
    return frees


def _binary(name, a, b, owned):
    fn = _BINARY.get(name)
    if fn is None:                                   # POW keeps the base's dtype, like the ElementWise kernel
        if name == "POW":
            return np.power(a, b.astype(a.dtype) if b.dtype != a.dtype else b)
        raise ValueError(f"pointwise: unsupported ElementWise op {name!r}")
    if not owned:
        return fn(a, b)
    sa, sb = a.shape, b.shape
    shape = sa if sa == sb or (not sb and len(sa)) else sb if not sa else np.broadcast_shapes(sa, sb)
    dtype = a.dtype if a.dtype == b.dtype else np.result_type(a, b)
    for cand in owned:
        if cand.shape == shape and cand.dtype == dtype:
            return fn(a, b, out=cand)
    return fn(a, b)


@simple_tactic("Pointwise", honours=("program",))
def pointwise(op, inputs):
    """Evaluate the fused chain with in-place reuse of dead intermediates (or, where the numba extra is installed
    and the chain is exact arithmetic over same-shaped inputs, as one compiled pass with the same floats)."""
    y = pointwise_chain.run(op, inputs)
    if y is not None:
        return [y]
    from native.cpu.kernels.activations import activation, activation_inplace
    from native.cpu.kernels.elementwise import UNARY
    steps = _decoded(op)
    vals = [None] * len(steps)
    fresh = [False] * len(steps)                      # result is a buffer this kernel allocated
    weights = op.weights
    theirs = None                                     # ids of the arrays the kernel must not write: inputs, weights
    for j, (kind, refs, p, frees, src) in enumerate(steps):
        args = []
        for where, key in refs:
            v = inputs[key] if where == 0 else vals[key] if where == 2 else weights[key]
            args.append(v if type(v) is np.ndarray else np.asarray(v))
        if kind == "ElementWise":
            y = _binary(p["op"], args[0], args[1], [vals[s] for s in frees if fresh[s]] if frees else ())
        elif kind == "Unary":
            y = UNARY[p["op"]](args[0], p)
            y = y if isinstance(y, np.ndarray) else np.asarray(y)
        elif kind == "Activation":
            if src is not None and fresh[src] and src in frees:
                y = activation_inplace(args[0], p["type"], p.get("alpha", 0.0), p.get("beta", 0.0))
            else:
                y = activation(args[0], p["type"], p.get("alpha", 0.0), p.get("beta", 0.0))
        else:
            raise ValueError(f"pointwise: unsupported step kind {kind!r}")
        vals[j] = y
        if type(y) is np.ndarray and y.base is None and y.flags.writeable:
            if theirs is None:
                theirs = {id(x) for x in inputs}
                theirs.update(id(w) for w in weights.values())
            fresh[j] = id(y) not in theirs
        for s in frees:
            if vals[s] is not y:
                vals[s] = None
    return [vals[-1]]


@register_tactic
class PointwisePolyExp(Tactic):
    """A fused chain with SIGMOID / TANH steps (an LSTM cell written out as ONNX ops: silero-vad's If body) as one
    compiled pass (pointwise_chain.run with polyexp: the other steps as the numpy tactic rounds them, the sigmoid /
    tanh by native/cpu/polyexp.py's exp, so floats of its own; the builder times it against the numpy tactic).
    float32 inputs of one shape, the numba extra."""
    kind = "Pointwise"
    name = "polyexp-chain"
    honours = frozenset({"program"})

    def supports(self, op, input_shapes):
        program = op.params.get("program") or ()
        if not any(st["op"] == "Activation" and st.get("params", {}).get("type") in ("SIGMOID", "TANH")
                   for st in program):
            return "no SIGMOID / TANH step (the numpy tactic compiles exact chains itself)"
        dtypes = getattr(input_shapes, "dtypes", None)
        if dtypes and any(d not in (None, "float32") for d in dtypes):
            return "float32 inputs only"
        shapes = [s for s in (input_shapes or []) if s is not None]
        if not shapes or any(list(s) != list(shapes[0]) for s in shapes):
            return "inputs of one known shape only"
        if pointwise_chain.encode(program, op.weights, tuple(shapes[0]), np.dtype(np.float32), polyexp=True) is None:
            return "a step outside the compiled chain's operations"
        if not jit.available():
            return "needs the numba extra (pip install debugkit[jit])"
        return None

    def run(self, op, inputs):
        y = pointwise_chain.run(op, inputs, polyexp=True)
        return [y] if y is not None else pointwise(op, inputs)


def _decoded(op) -> list:
    """The layer's program with its argument strings parsed and each step's dying values listed, once per program
    (kept on the op): per step (kind, ((0 input | 1 weight | 2 step value, index or key), ...), params, steps whose
    last read this is, the step the first argument comes from or None)."""
    program = op.params["program"]
    held = op.__dict__.get("_pointwise")
    if held is not None and held[0] is program:
        return held[1]
    frees = _last_reads(program)
    steps = []
    for j, st in enumerate(program):
        refs = []
        for a in st["args"]:
            kind, key = a.split(":", 1)
            refs.append((0, int(key)) if kind == "in" else (1, key) if kind == "w" else (2, int(key)))
        first = st["args"][0]
        steps.append((st["op"], tuple(refs), st.get("params", {}), tuple(frees[j]),
                      int(first[2:]) if first.startswith("s:") else None))
    op.__dict__["_pointwise"] = (program, steps)
    return steps


# Attention ---------------------------------------------------------------------------------------------------

PARALLEL_MIN_MACS = 1 << 23  # split query rows over the CPU pool above this (waking a pool thread costs ~50 µs)


@simple_tactic("Attention")
def attention(op, inputs):
    """softmax(q @ k' * scale + mask) @ v, with k' = k^T when transpose_k else k (already transposed).
    nan_to_zero maps fully masked rows (NaN after softmax) to 0, as SDPA exports do with Where(IsNaN).
    Large problems (ViT: 3 heads x 197 tokens) run bands of query rows in parallel on the CPU pool.
    With `heads` (passes/attention_heads.py) q, k, v are [B, S, C] tensors, each read at its `columns` and split
    into that many heads (numpy views), and the result is [B, S, H*Dv]."""
    return _attention_layer(op, inputs, _softmax_numpy)


@simple_tactic("Attention", name="polyexp-softmax")
def attention_polyexp(op, inputs):
    """The numpy Attention with its softmax in native/cpu/polyexp.py (one compiled pass per row with the numba
    extra; its polynomial exp, ~2 ulp from numpy's: a tactic of its own). float32 scores only; other dtypes take
    numpy's softmax."""
    return _attention_layer(op, inputs, _softmax_polyexp)


def _attention_layer(op, inputs, softmax):
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    heads = op.params.get("heads")
    if heads:
        q, k, v = (split_heads(x, op.params.get("columns"), i, heads) for i, x in enumerate((q, k, v)))
        out = _attention_rows(op, q, k, v, mask, softmax)
        b, h, s, dv = out.shape
        return [np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(b, s, h * dv)]
    return [_attention_rows(op, q, k, v, mask, softmax)]


def split_heads(x, columns, i, heads):
    """Operand i of a heads-mode Attention: columns [columns[2i], columns[2i+1]) of x [B, S, C] as [B, H, S, D]
    (a view)."""
    x = np.asarray(x)
    a, b = (columns[2 * i], columns[2 * i + 1]) if columns else (0, x.shape[-1])
    part = x[..., a:b]
    return part.reshape(x.shape[0], x.shape[1], heads, (b - a) // heads).transpose(0, 2, 1, 3)


def _attention_rows(op, q, k, v, mask, softmax):
    n_rows = q.shape[-2] if q.ndim >= 2 else 0
    if n_rows >= 32 and q.size * (k.shape[-1] if not op.params.get("transpose_k", True) else k.shape[-2]) * 2 \
            >= PARALLEL_MIN_MACS:
        from native.cpu import threads
        parts = threads.num_threads()
        if parts > 1:  # query rows are independent: split them into bands (mask rows follow when it has them)
            m_rows = mask is not None and np.ndim(mask) >= 2 and np.shape(mask)[-2] == n_rows

            def band(r):
                mb = mask[..., r[0]:r[1], :] if m_rows else mask
                return _attention(op, q[..., r[0]:r[1], :], k, v, mb, softmax)
            return np.concatenate(threads.parallel_for(band, threads.split(n_rows, parts)), axis=-2)
    return _attention(op, q, k, v, mask, softmax)


def _softmax_numpy(s):
    """(softmax of s over its last axis, in place; True: it may hold NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):   # the reductions as ufunc calls: ndarray.max / .sum
        s -= _MAX_REDUCE(s, -1, None, None, True)          # without their Python wrappers (same values)
        np.exp(s, out=s)
        s /= _ADD_REDUCE(s, -1, None, None, True)
    return s, True


def _softmax_polyexp(s):
    """(polyexp's softmax of s, in place; whether a row became NaN: the compiled rows count them, so a layer with
    nan_to_zero skips the isnan pass when none did)."""
    if s.dtype != np.float32 or not s.flags.c_contiguous or s.ndim < 1 or s.size == 0:
        return _softmax_numpy(s)
    return s, rows.softmax_rows_nan(s.reshape(-1, s.shape[-1]))


def _attention(op, q, k, v, mask, softmax=_softmax_numpy):
    p = op.params
    kt = np.swapaxes(k, -1, -2) if p.get("transpose_k", True) else k
    scale = p.get("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.matmul(q, kt)
    if scale != 1.0:
        s *= s.dtype.type(scale)
    if mask is not None and p.get("mask_kind", "add") != "none":
        if p.get("mask_kind") == "bool":
            s = np.where(mask, s, s.dtype.type(-np.inf))
        elif _fits(op, s.shape, np.shape(mask)):
            s += mask
        else:
            s = s + mask
    s, maybe_nan = softmax(s)
    if maybe_nan and p.get("nan_to_zero"):   # fully masked rows (NaN) to 0; nan_to_num's inf handling changes nothing
        np.copyto(s, 0, where=np.isnan(s))
    return np.matmul(s, v)


def _fits(op, shape, mask_shape) -> bool:
    """Whether the mask broadcasts to the scores' shape (so `s += mask` in place), kept per shapes on the op."""
    held = op.__dict__.get("_mask_fits")
    if held is None or held[0] != shape or held[1] != mask_shape:
        held = op.__dict__["_mask_fits"] = (shape, mask_shape, shape == np.broadcast_shapes(shape, mask_shape))
    return held[2]


# NHWC twins made by the layout pass ---------------------------------------------------------------------------

def _pads2(p):
    pre = list(p.get("pre_padding") or [0, 0])
    post = list(p.get("post_padding") or [0, 0])
    return pre, post


def _windows(x, kh, kw, sh, sw, dh=1, dw=1):
    """Strided view [N, OH, OW, KH, KW, C] over a padded NHWC tensor (no copy)."""
    n, h, w, c = x.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (w - (kw - 1) * dw - 1) // sw + 1
    s = x.strides
    return np.lib.stride_tricks.as_strided(x, (n, oh, ow, kh, kw, c),
                                           (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)


@register_tactic
class ConvNhwcGemm(Tactic):
    """ConvolutionNHWC: x [N,H,W,C] → y [N,OH,OW,M]; kernel pre-transposed at build time to [KH*KW*C, M], so
    1×1 stride-1 convolutions are one GEMM on the input as is and others gather patches in channel-last order."""
    kind = "ConvolutionNHWC"
    name = "nhwc-im2col-gemm"
    honours = {"post_ops"}
    formats = ("nhwc",)

    def run(self, op, inputs):
        x = inputs[0]
        p = op.params
        k = op.weights["kernel_hwio"]
        kh, kw = p["kernel_spatial"]
        sh, sw = p.get("strides") or [1, 1]
        dh, dw = p.get("dilations") or [1, 1]
        pre, post = _pads2(p)
        if any(pre) or any(post):
            x = np.pad(x, ((0, 0), (pre[0], post[0]), (pre[1], post[1]), (0, 0)))
        n, c = x.shape[0], x.shape[3]
        if kh == kw == 1 and sh == sw == 1:
            cols, (oh, ow) = x.reshape(-1, c), x.shape[1:3]
        else:
            win = _windows(x, kh, kw, sh, sw, dh, dw)
            oh, ow = win.shape[1:3]
            cols = win.reshape(n * oh * ow, kh * kw * c)
        y = (cols @ k).reshape(n, oh, ow, -1)
        b = op.weights.get("bias")
        if b is not None:
            y += np.asarray(b, y.dtype)
        return [apply_post_ops(y, op, inputs)]



@simple_tactic("PoolingNHWC", honours=("post_ops",), formats=("nhwc",))
def pooling_nhwc(op, inputs):
    """MAX / AVERAGE pooling over axes 1, 2 of an NHWC tensor (global, or a 2-D window without ceil mode), then
    the post-ops (an activation moved past the max pool, see fusion_pool.py)."""
    y = _pool_nhwc(op, inputs)
    return [apply_post_ops(y[0], op, inputs)] if op.params.get("post_ops") else y


def _pool_nhwc(op, inputs):
    x = inputs[0]
    p = op.params
    kind = p["type"]
    if p.get("global"):
        return [x.max(axis=(1, 2), keepdims=True) if kind == "MAX" else x.mean(axis=(1, 2), keepdims=True)]
    kh, kw = p["window"]
    sh, sw = p.get("strides") or [1, 1]
    pre, post = _pads2(p)
    padded = any(pre) or any(post)
    pads = ((0, 0), (pre[0], post[0]), (pre[1], post[1]), (0, 0))
    if kind == "MAX":
        xp = np.pad(x, pads, constant_values=-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min) if padded else x
        return [_windows(xp, kh, kw, sh, sw).max(axis=(3, 4))]
    xp = np.pad(x, pads) if padded else x
    s = _windows(xp, kh, kw, sh, sw).sum(axis=(3, 4))
    if padded and p.get("average_count_excludes_padding", True):
        ones = np.pad(np.ones((1,) + x.shape[1:3] + (1,), x.dtype), pads)
        cnt = _windows(ones, kh, kw, sh, sw).sum(axis=(3, 4))
        return [(s / cnt).astype(x.dtype, copy=False)]
    return [(s / (kh * kw)).astype(x.dtype, copy=False)]
