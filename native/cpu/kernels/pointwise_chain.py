"""A fused Pointwise program run as one compiled pass (the numba extra, native/cpu/jit.py `pointwise_chain`).

The Pointwise interpreter (fused.py) runs a chain as one numpy pass per step over the whole tensor: a hand-written
hard-swish (x + 3, clip to [0, 6], times x, over 6: PaddleOCR's models hold 18-28 of them) costs four passes, their
temporaries and ~10 us of Python per step. Compiled, every step runs over one cache-sized block before the next step
starts: one pass over memory, no temporaries, no per-step Python. Each step rounds exactly as numpy's pass does
(float32 stays float32, the same operation, clip / maximum with numpy's NaN and signed-zero rules), so the chain's
floats are the interpreter's, bit for bit (tests/native/test_pointwise_chain.py).

What it takes: every tensor argument an array of the output's shape and dtype (a strided one is copied first) (float32 or float64), every
constant a one-element array of that dtype, every step one of the exact operations below (no transcendentals: numba's
exp/tanh are not numpy's SIMD loops; POW only with a one-element exponent of 2, which numpy's power loop computes
as x * x: checked once per process, `_pow2_is_square`). Anything else, or no numba: None, and the interpreter runs.
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit
from native.cpu.threads import num_threads, parallel_for, split

BLOCK = 4096   # elements per block: a step's row of the scratch buffer stays in L1 while the next step reads it
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_BINARY = {"SUM": jit.PW_SUM, "SUB": jit.PW_SUB, "PROD": jit.PW_PROD, "DIV": jit.PW_DIV, "MAX": jit.PW_MAX,
           "MIN": jit.PW_MIN}
_UNARY = {"ABS": jit.PW_ABS, "NEG": jit.PW_NEG, "SQRT": jit.PW_SQRT}
_NUMBER = (int, float)
_POLYEXP = {"SIGMOID": jit.PW_SIGMOID, "TANH": jit.PW_TANH}


def _activation(p):
    """(code, alpha, beta) of an exact activation, or None."""
    kind, a, b = p.get("type"), p.get("alpha", 0.0), p.get("beta", 0.0)
    if kind == "RELU":
        return jit.PW_CLIP, 0.0, np.inf
    if kind == "CLIP" and type(a) in _NUMBER and type(b) in _NUMBER and all(
            v in (-np.inf, np.inf) or abs(v) < 3e38 for v in (a, b)):   # as activations._clip's fast path
        return jit.PW_CLIP, float(a), float(b)
    if kind == "LEAKY_RELU" and type(a) in _NUMBER and 0.0 < a < 1.0:
        return jit.PW_LEAKY, float(a), 0.0
    if kind == "HARD_SIGMOID" and type(a) in _NUMBER and type(b) in _NUMBER:
        return jit.PW_HARD_SIGMOID, float(a), float(b)
    if kind == "HARD_SWISH":
        return jit.PW_HARD_SWISH, 0.0, 0.0
    return None


def encode(program, weights, shape, dtype, polyexp=False):
    """(code [steps, 3] int64, fval [steps, 4] float64, input indices used) for `program` over inputs of `shape`,
    or None when a step or an argument is outside what the kernel computes exactly (polyexp: SIGMOID / TANH too,
    by polyexp's exp, float32 only)."""
    code = np.zeros((len(program), 3), np.int64)
    fval = np.zeros((len(program), 4), np.float64)
    used = set()
    for j, st in enumerate(program):
        p, args = st.get("params", {}), st["args"]
        if st["op"] == "ElementWise" and p.get("op") == "POW":
            if not _square(args, weights, shape) or not _pow2_is_square(dtype):
                return None
            c, n_args, args = jit.PW_SQUARE, 1, args[:1]
        elif st["op"] == "ElementWise":
            c, n_args = _BINARY.get(p.get("op")), 2
        elif st["op"] == "Unary":
            c, n_args = _UNARY.get(p.get("op")), 1
        elif st["op"] == "Activation" and polyexp and p.get("type") in _POLYEXP and dtype == np.float32:
            c, n_args = _POLYEXP[p["type"]], 1
        elif st["op"] == "Activation":
            act = _activation(p)
            if act is None:
                return None
            c, n_args = act[0], 1
            fval[j, 2], fval[j, 3] = act[1], act[2]
        else:
            return None
        if c is None or len(args) != n_args:
            return None
        code[j, 0] = c
        for pos, ref in enumerate(args):
            kind, _, key = ref.partition(":")
            if kind == "in":
                code[j, 1 + pos], fval[j, pos] = jit.PW_INPUT, int(key)
                used.add(int(key))
            elif kind == "s":
                code[j, 1 + pos], fval[j, pos] = jit.PW_STEP, int(key)
            elif kind == "w":
                w = weights.get(key)
                if type(w) is not np.ndarray or w.size != 1 or w.dtype != dtype or w.ndim > len(shape) \
                        or n_args == 1:
                    return None
                code[j, 1 + pos], fval[j, 2 + pos] = jit.PW_SCALAR, float(w.reshape(-1)[0])
            else:
                return None
        if n_args == 2 and code[j, 1] == jit.PW_SCALAR and code[j, 2] == jit.PW_SCALAR:
            return None
    if not used or max(used) > 3:
        return None
    return code, fval, tuple(sorted(used))


def _square(args, weights, shape) -> bool:
    """POW's arguments are (a tensor, a one-element constant exponent 2) broadcasting to the tensor's shape."""
    if len(args) != 2 or not args[1].startswith("w:") or args[0].startswith("w:"):
        return False
    w = weights.get(args[1][2:])
    return type(w) is np.ndarray and w.size == 1 and w.ndim <= len(shape) and float(w.reshape(-1)[0]) == 2.0


_POW2 = {}


def _pow2_is_square(dtype) -> bool:
    """Whether numpy's power with a broadcast exponent 2 gives x * x here (the interpreter's POW: numpy 2 squares; a
    libm powf would round ~1 in 1,000 results differently), on values where powf and x * x disagree."""
    ok = _POW2.get(dtype)
    if ok is None:
        x = np.random.default_rng(0).standard_normal(1 << 16).astype(dtype) * dtype.type(10)
        x[:3] = (np.nan, -np.inf, -0.0)
        ok = _POW2[dtype] = bool(np.array_equal(np.power(x, np.ones(1, dtype) * 2), x * x, equal_nan=True))
    return ok


def run(op, inputs, polyexp=False):
    """The program's output as one compiled pass, or None (the interpreter runs instead). polyexp: SIGMOID / TANH
    steps by polyexp's exp (the polyexp-chain tactic: its own floats)."""
    x = inputs[0] if inputs else None
    slot = "_pointwise_chain_px" if polyexp else "_pointwise_chain"
    held = op.__dict__.get(slot)
    if held is not None and held[4] is not None and type(x) is np.ndarray and x.shape == held[1][0] and \
            x.dtype is held[1][1] and held[0] is op.params["program"]:
        y = _one_block(held[4], inputs, x.shape, x.dtype)
        if y is not None:
            return y
    if type(x) is not np.ndarray or x.dtype not in _DTYPES or not x.size:
        return None
    key = (x.shape, x.dtype)
    program = op.params["program"]
    if held is not None and held[0] is program and held[1] == key:
        enc, swish = held[2], held[3]
    else:
        enc = encode(program, op.weights, x.shape, x.dtype, polyexp)
        swish = None if enc is None else (relu6_swish(enc[0], enc[1], x.dtype)
                                          or relu6_swish_affine(enc[0], enc[1], x.dtype))
        fn = jit.kernel("pointwise_chain")
        one = None   # a chain of one block: what _one_block calls it with
        if enc is not None and swish is None and fn is not None and x.size <= BLOCK and x.size < SPLIT_MIN:
            one = (fn, enc[0], enc[1], enc[2], len(program), x.size)
        op.__dict__[slot] = (program, key, enc, swish, one)
    if enc is None:
        return None
    if swish is not None:
        v = inputs[swish[0]] if swish[0] < len(inputs) else None
        fn = jit.kernel("relu6_swish" if len(swish) == 6 else "relu6_swish_affine")
        if type(v) is np.ndarray and v.shape == x.shape and v.dtype == x.dtype and fn is not None:
            y = np.empty(x.shape, x.dtype)
            src, dst = (v if v.flags.c_contiguous else np.ascontiguousarray(v)).reshape(-1), y.reshape(-1)
            _spread(lambda a, b: fn(src[a:b], dst[a:b], *swish[1:]), y.size)
            return y
    code, fval, used = enc
    flat = []
    for i in range(4):
        if i in used:
            v = inputs[i] if i < len(inputs) else None
            if type(v) is not np.ndarray or v.shape != x.shape or v.dtype != x.dtype:
                return None
            # a strided view (a slice of the real / imaginary half of an STFT) is copied once: still one pass
            # fewer than the interpreter's, and the same floats
            flat.append((v if v.flags.c_contiguous else np.ascontiguousarray(v)).reshape(-1))
        else:
            flat.append(_EMPTY[x.dtype])
    fn = jit.kernel("pointwise_chain")
    if fn is None:
        return None
    y = np.empty(x.shape, x.dtype)
    dst = y.reshape(-1)
    if y.size <= BLOCK and y.size < SPLIT_MIN:   # one block: part(0, size)'s call without its closure and slices
        fn(*flat, dst, code, fval, np.empty((len(program), y.size), x.dtype))
        return y

    def part(a, b):
        buf = np.empty((len(program), min(BLOCK, b - a)), x.dtype)
        fn(*(f[a:b] if f.size else f for f in flat), dst[a:b], code, fval, buf)
    _spread(part, y.size)
    return y


def _one_block(one, inputs, shape, dtype):
    """The one-block call of `run` for a program held with its encoding (`one`: the kernel, code, values, used
    inputs, steps, size), every used input a C-contiguous array of x's shape and dtype; else None (then `run`'s
    checks and copies). The same kernel call as `run`'s, without its per-call work (~1.5 us of ~4 on silero-vad's
    [1, 129, 3] magnitude)."""
    fn, code, fval, used, steps, size = one
    if size >= SPLIT_MIN:
        return None
    empty = _EMPTY[dtype]
    flat = [empty, empty, empty, empty]
    n = len(inputs)
    for i in used:
        v = inputs[i] if i < n else None
        if type(v) is not np.ndarray or v.shape != shape or v.dtype is not dtype or not v.flags.c_contiguous:
            return None
        flat[i] = v.reshape(size)
    y = np.empty(shape, dtype)
    fn(flat[0], flat[1], flat[2], flat[3], y.reshape(size), code, fval, np.empty((steps, size), dtype))
    return y


SPLIT_MIN = 1 << 20   # elements from which a chain is split over the pool (a hand-off costs 25-100 us on a VM)


def _spread(run, size):
    """run(start, stop) over [0, size): in parts over the CPU pool from SPLIT_MIN elements (every element is
    computed alone, so the parts give the same floats), else in one call."""
    threads = num_threads() if size >= SPLIT_MIN else 1
    if threads < 2:
        run(0, size)
        return
    parallel_for(lambda r: run(*r), split(size, threads))


_EMPTY = {d: np.empty(0, d) for d in _DTYPES}


def relu6_swish(code, fval, dtype):
    """(input, a, lo, hi, d, divide) when the encoded program is `in:i + a, clip to [lo, hi], times in:i, / d` (or
    `* d`): a hand-written hard-swish, which jit_chain.relu6_swish runs as one loop with the same floats; else None."""
    if len(code) != 4:
        return None
    t = dtype.type
    c0, c1, c2, c3 = (tuple(int(v) for v in row) for row in code)
    if c0[0] != jit.PW_SUM or sorted(c0[1:]) != [jit.PW_INPUT, jit.PW_SCALAR]:
        return None
    x_in, a = (int(fval[0, 1]), t(fval[0, 2])) if c0[1] == jit.PW_SCALAR else (int(fval[0, 0]), t(fval[0, 3]))
    if c1 != (jit.PW_CLIP, jit.PW_STEP, 0) or int(fval[1, 0]) != 0:
        return None
    lo, hi = t(fval[1, 2]), t(fval[1, 3])
    if c2[0] != jit.PW_PROD or sorted(c2[1:]) != [jit.PW_INPUT, jit.PW_STEP] or \
            sorted([(c2[1], int(fval[2, 0])), (c2[2], int(fval[2, 1]))]) != [(jit.PW_INPUT, x_in), (jit.PW_STEP, 1)]:
        return None
    if c3[0] == jit.PW_DIV and c3[1:] == (jit.PW_STEP, jit.PW_SCALAR) and int(fval[3, 0]) == 2:
        return x_in, a, lo, hi, t(fval[3, 3]), True
    if c3[0] == jit.PW_PROD and sorted(c3[1:]) == [jit.PW_SCALAR, jit.PW_STEP] and \
            int(fval[3, 0 if c3[1] == jit.PW_STEP else 1]) == 2:
        return x_in, a, lo, hi, t(fval[3, 3 if c3[1] == jit.PW_STEP else 2]), False
    return None


_AFFINE_OPS = (jit.PW_PROD, jit.PW_SUM)


def relu6_swish_affine(code, fval, dtype):
    """relu6_swish's tuple + (op1, v1, op2, v2) when the encoded program is that hard-swish followed by one or two
    steps `previous step times / plus a scalar` (PaddleOCR v4's learnable affine block: hard-swish, * s, + t), which
    jit_chain.relu6_swish_affine runs as one loop with the same floats; else None. op: jit.PW_PROD or PW_SUM, 0 none."""
    if not 5 <= len(code) <= 6:
        return None
    head = relu6_swish(code[:4], fval[:4], dtype)
    if head is None:
        return None
    t = dtype.type
    tail = []
    for i in range(4, len(code)):
        op, ka, kb = (int(v) for v in code[i])
        if op not in _AFFINE_OPS or sorted((ka, kb)) != [jit.PW_SCALAR, jit.PW_STEP]:
            return None
        step, value = (0, 3) if ka == jit.PW_STEP else (1, 2)   # fval row: [index a, index b, value a, value b]
        if int(fval[i, step]) != i - 1:
            return None
        tail += [op, t(fval[i, value])]
    return head + tuple(tail + [0, t(0)] * (6 - len(code)))
