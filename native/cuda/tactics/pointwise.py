"""Pointwise tactics on NVRTC kernels (pointwise.cu): broadcasting binary ops, activations, unary math,
softmax, and fused pointwise programs (the fusion passes' `Pointwise` layers) compiled into one generated kernel
each. FP32, FP16 and BF16 storage, float32 compute (one rounding per stored output)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, kernel_from_source, launch, source_key
from native.cuda.tactics.common import (FLOAT_PRECISIONS, as_storage, c_type, on_device, out_array, same_float,
                                        storage, suffix, weight)
from native.tactics import Tactic, TacticRefusal, register_tactic
from native.cuda.tactics.common import bcast_strides

SRC = "pointwise.cu"
_BINARY = {"SUM": "ew_sum", "SUB": "ew_sub", "PROD": "ew_prod", "DIV": "ew_div", "MAX": "ew_max", "MIN": "ew_min",
           "POW": "ew_pow"}
_ACT = {"RELU": "act_relu", "SIGMOID": "act_sigmoid", "TANH": "act_tanh", "LEAKY_RELU": "act_leaky_relu",
        "ELU": "act_elu", "CLIP": "act_clip", "HARD_SIGMOID": "act_hard_sigmoid", "GELU_ERF": "act_gelu_erf",
        "GELU_TANH": "act_gelu_tanh", "SILU": "act_silu", "HARD_SWISH": "act_hard_swish"}
_UNARY = {"EXP": "un_exp", "LOG": "un_log", "SQRT": "un_sqrt", "RECIP": "un_recip", "ABS": "un_abs",
          "NEG": "un_neg", "ERF": "un_erf", "SIN": "un_sin", "COS": "un_cos", "FLOOR": "un_floor",
          "CEIL": "un_ceil", "RECIPROCAL_SQRT": "un_rsqrt"}


def broadcast_params(out_shape, a_shape, b_shape) -> np.ndarray:
    """The Bcast struct of pointwise.cu: rank, n, dims[8], element strides of a and b (0 where broadcast)."""
    rank = len(out_shape)
    s = np.zeros(26, dtype=np.int64)
    s[0], s[1] = rank, int(np.prod(out_shape, dtype=np.int64))
    for which, shape in ((10, a_shape), (18, b_shape)):
        s[which:which + rank] = bcast_strides(out_shape, shape)
    s[2:2 + rank] = out_shape
    return s


def binary(name: str, a: GpuArray, b: GpuArray, out: GpuArray):
    """out = a (op) b with broadcasting; one storage type for all three."""
    sfx = suffix(same_float([a, b, out]))
    if out.size and tuple(a.shape) == tuple(out.shape):
        bs = tuple(b.shape)
        while bs and bs[0] == 1:
            bs = bs[1:]
        cols = 0 if tuple(b.shape) == tuple(out.shape) else (bs[0] if len(bs) == 1 and out.shape and
                                                             bs[0] == out.shape[-1] else None)
        if cols is not None:   # same shapes, or a bias along the last axis
            launch(kernel(SRC, name + sfx + "_f"), grid_for(out.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(a.ptr), np.uint64(b.ptr), np.int64(out.size), np.int64(cols)])
            return
    sfx += "_s" if out.size < 2 ** 31 else ""
    s = broadcast_params(out.shape, a.shape, b.shape)
    if s[1]:
        launch(kernel(SRC, name + sfx), grid_for(s[1]), (256, 1, 1), [np.uint64(out.ptr), np.uint64(a.ptr),
                                                                       np.uint64(b.ptr), s])


def activate(y: GpuArray, kind: str, alpha=0.0, beta=0.0, out: GpuArray | None = None):
    """An activation from _ACT (or a unary from _UNARY), in place unless `out` is given."""
    out = y if out is None else out
    name = _ACT.get(kind) or _UNARY[kind]
    if kind == "CLIP":
        alpha = -np.inf if alpha is None else alpha
        beta = np.inf if beta is None else beta
    if y.size:
        launch(kernel(SRC, name + suffix(same_float([y, out]))), grid_for(y.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(y.ptr), np.int64(y.size), np.float32(alpha or 0.0),
                np.float32(beta or 0.0)])
    return out


def _rank_ok(input_shapes):
    return not (input_shapes and any(s is not None and len(s) > 8 for s in input_shapes))


@register_tactic
class GpuElementWise(Tactic):
    kind, name, device = "ElementWise", "nvrtc-pointwise", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes = frozenset(FLOAT_PRECISIONS)   # integer operands: nvrtc-int (index.py)

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _BINARY:
            return f"op {op.params.get('op')} has no GPU kernel"
        shapes = [tuple(s) for s in input_shapes or () if s is not None]
        if len(shapes) == 2 and len(np.broadcast_shapes(*shapes)) > 8:
            return "rank above 8"
        return None if _rank_ok(input_shapes) else "rank above 8"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a, b = as_storage([on_device(inputs[0]), on_device(inputs[1])], op)
        dtype = same_float([a, b])
        shape = np.broadcast_shapes(a.shape, b.shape)
        if len(shape) > 8:
            raise TacticRefusal("rank above 8 runs on the host")
        out = out_array(outputs, 0, shape, dtype)
        binary(_BINARY[op.params["op"]], a, b, out)
        return [out]


class _UnaryKernel(Tactic):
    device = "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes = frozenset(FLOAT_PRECISIONS)
    dtype_inputs = (0,)
    table: dict = {}
    param = "op"

    def supports(self, op, input_shapes):
        if op.params.get(self.param) not in self.table:
            return f"{self.param} {op.params.get(self.param)} has no GPU kernel"
        if input_shapes and any(s is not None for s in list(input_shapes)[1:]):
            return "bounds/slopes given as tensors are run by the host tactic"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if len(inputs) > 1 and any(x is not None for x in inputs[1:]):
            raise TacticRefusal("bounds/slopes given as tensors are run by the host tactic")
        x = on_device(inputs[0])
        out = out_array(outputs, 0, x.shape, same_float([x]))
        return [activate(x, op.params[self.param], op.params.get("alpha", 0.0), op.params.get("beta", 0.0), out)]


@register_tactic
class GpuActivation(_UnaryKernel):
    kind, name, table, param = "Activation", "nvrtc-pointwise", _ACT, "type"


@register_tactic
class GpuUnary(_UnaryKernel):
    kind, name, table, param = "Unary", "nvrtc-pointwise", _UNARY, "op"


@register_tactic
class GpuSoftmax(Tactic):
    kind, name, device = "Softmax", "nvrtc-rows", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes = frozenset(FLOAT_PRECISIONS)

    def supports(self, op, input_shapes):
        if op.params.get("hard"):
            return "hardmax runs on the host"
        if input_shapes and input_shapes[0] is not None:
            rank = len(input_shapes[0])
            axis = int(op.params.get("axis", -1)) % max(rank, 1)
            if axis != rank - 1 and not op.params.get("flatten"):
                return "softmax over a non-last axis runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        sfx = suffix(same_float([x]))
        axis = int(op.params.get("axis", -1)) % max(x.ndim, 1)
        if axis != x.ndim - 1 and not op.params.get("flatten"):
            raise TacticRefusal("softmax over a non-last axis runs on the host")
        cols = int(np.prod(x.shape[axis:], dtype=np.int64)) if x.ndim else 1
        rows = x.size // max(cols, 1)
        out = out_array(outputs, 0, x.shape, x.dtype)
        launch_softmax("softmax_rows" + sfx, rows, cols, [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(rows),
                                                          np.int64(cols), np.int32(1 if op.params.get("log") else 0)])
        return [out]


def launch_softmax(name: str, rows: int, cols: int, args):
    """A row softmax kernel of pointwise.cu: the warp-per-row variant (`<name>_w`, 8 rows per block) for rows of up
    to 1024 columns, else one block per row."""
    if not rows:
        return
    if cols <= 1024:
        launch(kernel(SRC, name + "_w"), ((rows + 7) // 8, 1, 1), (256, 1, 1), args)
    else:
        launch(kernel(SRC, name), (rows, 1, 1), (256, 1, 1), args)


# fused pointwise programs ---------------------------------------------------------------------------------------

_EXPR_BINARY = {"SUM": "({a} + {b})", "SUB": "({a} - {b})", "PROD": "({a} * {b})", "DIV": "({a} / {b})",
                "MAX": "(({a} > {b} || {a} != {a}) ? {a} : {b})", "MIN": "(({a} < {b} || {a} != {a}) ? {a} : {b})",
                "POW": "powf({a}, {b})"}
_EXPR_UNARY = {
    "RELU": "(({x} > 0.f || {x} != {x}) ? {x} : 0.f)", "SIGMOID": "({x} >= 0.f ? 1.f / (1.f + expf(-{x})) : expf({x}) / (1.f + expf({x})))",
    "TANH": "tanhf({x})", "LEAKY_RELU": "({x} < 0.f ? {x} * {alpha} : {x})",
    "ELU": "({x} < 0.f ? {alpha} * expm1f({x}) : {x})",
    "CLIP": "({x} != {x} ? {x} : fminf(fmaxf({x}, {alpha}), {beta}))",
    "HARD_SIGMOID": "fminf(fmaxf({alpha} * {x} + {beta}, 0.f), 1.f)",
    "GELU_ERF": "(0.5f * {x} * erfcf({x} * -0.7071067811865476f))",
    "GELU_TANH": "(0.5f * {x} * (1.f + tanhf(0.7978845608028654f * {x} * (1.f + 0.044715f * {x} * {x}))))",
    "SILU": "(0.5f * {x} + 0.5f * {x} * tanhf(0.5f * {x}))",
    "HARD_SWISH": "({x} * fminf(fmaxf({x} * (1.f / 6.f) + 0.5f, 0.f), 1.f))",
    "EXP": "expf({x})", "LOG": "logf({x})", "SQRT": "sqrtf({x})", "RECIP": "(1.f / {x})", "ABS": "fabsf({x})",
    "NEG": "(-{x})", "ERF": "erff({x})", "SIN": "sinf({x})", "COS": "cosf({x})", "FLOOR": "floorf({x})",
    "CEIL": "ceilf({x})", "RECIPROCAL_SQRT": "(1.f / sqrtf({x}))"}


def _f(v) -> str:
    v = float(v)
    if np.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if np.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    return float(np.float32(v)).hex() + "f"


def program_source(program, arg_names) -> str | None:
    """CUDA source of one kernel running `program` (steps of ElementWise / Unary / Activation) per output element:
    each argument read at its broadcast offset, float32 compute, one store. None when a step has no expression."""
    lines = []
    for j, st in enumerate(program):
        p = st.get("params", {})
        args = [f"v_{arg_names.index(a)}" if not a.startswith("s:") else f"s_{a[2:]}" for a in st["args"]]
        if st["op"] == "ElementWise" and p.get("op") in _EXPR_BINARY:
            e = _EXPR_BINARY[p["op"]].format(a=args[0], b=args[1])
        elif st["op"] in ("Unary", "Activation"):
            key = p.get("op") if st["op"] == "Unary" else p.get("type")
            if key not in _EXPR_UNARY:
                return None
            alpha, beta = p.get("alpha", 0.0), p.get("beta", 0.0)
            if key == "CLIP":
                alpha = -np.inf if alpha is None else alpha
                beta = np.inf if beta is None else beta
            e = _EXPR_UNARY[key].format(x=args[0], alpha=_f(alpha or 0.0), beta=_f(beta or 0.0))
        else:
            return None
        lines.append(f"        float s_{j} = {e};")
    k = len(arg_names)
    params = ", ".join(f"const typename D::T* __restrict__ a{i}" for i in range(k))
    loads = "\n".join(f"        float v_{i} = D::ld(a{i}[o[{i}]]);" for i in range(k))
    call = ", ".join(f"a{i}" for i in range(k))
    ext_f = ", ".join(f"const {c_type('float32')}* a{i}" for i in range(k))
    ext_h = ", ".join(f"const {c_type('float16')}* a{i}" for i in range(k))   # float16 and bfloat16 bit patterns
    return f"""#include "common.cuh"
struct Prog {{ long long rank, n; long long dims[8]; long long s[{k}][8]; }};
template <class D>
__device__ __forceinline__ void prog_k(typename D::T* __restrict__ out, {params}, const Prog& p) {{
    GRID_LOOP(p.n) {{
        long long o[{k}];
        for (int a = 0; a < {k}; ++a) o[a] = 0;
        long long r = i;
        for (int d = (int)p.rank - 1; d >= 0; --d) {{
            long long q = r % p.dims[d];
            r /= p.dims[d];
            for (int a = 0; a < {k}; ++a) o[a] += q * p.s[a][d];
        }}
{loads}
{chr(10).join(lines)}
        out[i] = D::st(s_{len(program) - 1});
    }}
}}
extern "C" __global__ void prog_f32({c_type("float32")}* out, {ext_f}, Prog p) {{ prog_k<F32>(out, {call}, p); }}
extern "C" __global__ void prog_f16({c_type("float16")}* out, {ext_h}, Prog p) {{ prog_k<F16>(out, {call}, p); }}
extern "C" __global__ void prog_bf16({c_type("bfloat16")}* out, {ext_h}, Prog p) {{ prog_k<BF16>(out, {call}, p); }}
"""


def _program_args(program):
    names = []
    for st in program:
        for a in st["args"]:
            if not a.startswith("s:") and a not in names:
                names.append(a)
    return names


@register_tactic
class GpuPointwiseProgram(Tactic):
    """A fused pointwise chain as one generated NVRTC kernel (one read per operand, one write)."""

    kind, name, device = "Pointwise", "nvrtc-fused", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes = frozenset(FLOAT_PRECISIONS)
    honours = {"program"}

    def supports(self, op, input_shapes):
        program = op.params.get("program") or []
        names = _program_args(program)
        if not program or program_source(program, names) is None:
            return "a step of the program has no GPU expression"
        if len(names) > 16:
            return "more than 16 operands"
        return None if _rank_ok(input_shapes) else "rank above 8"

    def _compiled(self, program):
        """(operand names, source, source key) of a program: generated and hashed once per program object, not
        on every execution (the engine's params hold the same program object for the engine's life)."""
        cache = self.__dict__.setdefault("_programs", {})
        hit = cache.get(id(program))
        if hit is None or hit[0] is not program:
            if len(cache) >= 1024:      # a long-lived process building many engines: start over
                cache.clear()
            names = _program_args(program)
            src = program_source(program, names)
            hit = cache[id(program)] = (program, names, src, source_key(src))
        return hit[1:]

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        program = op.params["program"]
        names, src, key = self._compiled(program)
        dtype = storage(op)
        vals = []
        for a in names:    # (not `key`: that names the program's source, passed to kernel_from_source below)
            kind, _, ref = a.partition(":")
            if kind == "in":
                vals.append(on_device(inputs[int(ref)]))
            elif kind == "w":
                vals.append(weight(op.weights[ref], dtype))
            else:
                raise TacticRefusal(f"program argument {a!r} has no GPU binding")
        vals = as_storage(vals, op)
        dtype = same_float(vals)
        try:
            shape = np.broadcast_shapes(*[v.shape for v in vals])
        except ValueError as e:   # operands that meet only through intermediate shapes: the host program runs it
            raise TacticRefusal(f"program operands do not broadcast together ({e})") from None
        if len(shape) > 8:
            raise TacticRefusal("rank above 8")
        out = out_array(outputs, 0, shape, dtype)
        k = len(vals)
        p = np.zeros(10 + 8 * k, dtype=np.int64)
        p[0], p[1] = len(shape), out.size
        p[2:2 + len(shape)] = shape
        for i, v in enumerate(vals):
            p[10 + 8 * i:10 + 8 * i + len(shape)] = bcast_strides(shape, v.shape)
        if out.size:
            fn = kernel_from_source(src, "prog" + suffix(dtype), "pointwise_program.cu", key)
            launch(fn, grid_for(out.size), (256, 1, 1), [np.uint64(out.ptr)] + [np.uint64(v.ptr) for v in vals] + [p])
        return [out]
