"""Which layers the DLA runs: every per-layer rule of seed 000 («DLA 支持的层和限制», L139–382), each returning a
reason that names the rule, the value and the allowed range.

The checker sees a layer through `LayerFacts` (kind, params, weights, shapes, precision, dynamic ranges, its
consumers), so it works the same on a network layer (`config.can_run_on_dla(layer)`) and on an engine-graph node
after fusion (the partitioner). Fused engine layers are checked part by part: a convolution's post-ops, each step
of a Pointwise chain. Layers the DLA runs by decomposition (HardSigmoid / HardSwish as Scale + Clipped ReLU
[+ Product], a mean over H and W as staged AVERAGE pooling) are accepted with a note saying so.

`check(facts, ctx)` returns a `Verdict(ok, rule, reason, notes)`; `rule` is a stable id ("conv.kernel", ...)
that tests and `inspect capability` use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from native.dla.profiles import MAX_BATCH, MAX_DIM, DlaProfile, get_profile

DLA_PRECISIONS = ("float16", "int8")


@dataclass
class LayerFacts:
    name: str
    kind: str
    params: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    in_shapes: list = field(default_factory=list)    # per input: list of ints (-1 dynamic) or None
    out_shapes: list = field(default_factory=list)
    in_consts: list = field(default_factory=list)    # per input: constant value (np.ndarray) or None
    precision: str = "float16"                       # the precision the layer would run in on the DLA
    in_ranges: list = field(default_factory=list)    # per input: (lo, hi) INT8 dynamic range or None
    out_ranges: list = field(default_factory=list)
    consumers: list = field(default_factory=list)    # LayerFacts-like objects (kind, params, precision, explicit)
    is_output: bool = False                          # an output is a network output
    explicit_dla: bool = False                       # set_device_type(layer, DLA) was called for it
    precision_set: bool = False                      # a precision constraint was set on it
    fmt: str = "dla_linear"                          # tensor format the layer reads (groups rule)
    notes: list = field(default_factory=list)        # filled by the checker: decompositions, FP16 upgrades


@dataclass
class RuleContext:
    profile: DlaProfile = field(default_factory=lambda: get_profile("orin"))
    fp16: bool = True
    int8: bool = False
    calibrator: object = None


@dataclass
class Verdict:
    ok: bool
    rule: str = ""
    reason: str = ""
    notes: list = field(default_factory=list)

    def __bool__(self):
        return self.ok


class Reject(Exception):
    def __init__(self, rule, msg):
        super().__init__(f"[{rule}] {msg}")
        self.rule, self.msg = rule, msg


def _need(cond, rule, msg):
    if not cond:
        raise Reject(rule, msg)


def _in_range(values, lo, hi):
    return all(lo <= int(v) <= hi for v in values)


def _pair(v, default, n=2):
    if v is None:
        return [default] * n
    v = list(v) if isinstance(v, (list, tuple)) else [v] * n
    return [int(x) for x in v]


def dla_batch(shape) -> int:
    """DLA batch: product of every index dim but C, H, W (seed 000 L160: NPQRS -> N*P)."""
    if not shape:
        return 1
    return int(np.prod(shape[:-3])) if len(shape) >= 4 else int(shape[0])


def _non_batch(shape):
    return list(shape[-3:]) if len(shape) >= 4 else list(shape[1:])


def _uniform(a) -> bool:
    a = np.asarray(a)
    return a.size > 0 and bool(np.all(a == a.flat[0]))


# general limits ------------------------------------------------------------------------------------------------

def check_general(f: LayerFacts, ctx: RuleContext):
    if f.kind in ("Quantize", "Dequantize"):
        raise Reject("general.qdq", "explicit quantization (Q/DQ) is not supported on DLA; use calibration or "
                                    "dynamic ranges instead")
    _need(f.precision in DLA_PRECISIONS, "general.precision",
          f"DLA runs FP16 and INT8 only, layer precision is {f.precision}; enable BuilderFlag.FP16 or INT8")
    if f.precision == "int8" and ctx.calibrator is not None:
        algo = _calibrator_algorithm(ctx.calibrator)
        _need(algo == "ENTROPY_CALIBRATION_2", "general.calibrator",
              f"INT8 on DLA needs IInt8EntropyCalibrator2 (calibration before fusion), the calibrator is {algo}")
    for shape in list(f.in_shapes) + list(f.out_shapes):
        if shape is None:
            continue
        _need(all(int(d) >= 0 for d in shape), "general.dynamic",
              f"shape {list(shape)} has dynamic dims; DLA needs static shapes (profile min = opt = max)")
        b = dla_batch(shape)
        _need(b <= MAX_BATCH, "general.batch", f"DLA batch {b} of shape {list(shape)} exceeds {MAX_BATCH}")


def check_dims(f: LayerFacts):
    """After the layer's own rules (which name channel limits more precisely): every non-batch dim <= 8192."""
    for shape in list(f.in_shapes) + list(f.out_shapes):
        big = [d for d in _non_batch(shape or []) if int(d) > MAX_DIM]
        _need(not big, "general.dims", f"non-batch dim {big[0] if big else ''} of shape {list(shape or [])} "
                                       f"exceeds {MAX_DIM}")


def _calibrator_algorithm(cal) -> str:
    get = getattr(cal, "get_algorithm", None)
    algo = get() if callable(get) else getattr(cal, "algorithm", None)
    if algo is None:
        name = type(cal).__name__.lower()
        return "ENTROPY_CALIBRATION_2" if "entropy2" in name or "entropycalibrator2" in name else type(cal).__name__
    return str(getattr(algo, "name", algo)).upper().split(".")[-1]


def _four_d(f, rule_prefix, what="2 spatial dims only (a 4-D NCHW input)"):
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) == 4, f"{rule_prefix}.rank",
          f"{f.kind} on DLA supports {what}; input shape is {shape}")
    return shape


# convolution and fully connected ------------------------------------------------------------------------------

def check_convolution(f: LayerFacts, ctx: RuleContext):
    k = list(f.params.get("kernel_shape") or f.params.get("kernel_spatial") or [])
    _need(len(k) == 2, "conv.spatial", f"convolution with {len(k)} spatial dims; DLA supports 2 only")
    kernel = f.weights.get("kernel")
    _need(kernel is not None or (len(f.in_consts) > 1 and f.in_consts[1] is not None), "conv.weights",
          "the kernel must be a build-time constant on DLA")
    _need(_in_range(k, 1, 32), "conv.kernel", f"kernel {k}: each dim must be in [1, 32]")
    pre, post = _pair(f.params.get("pre_padding"), 0), _pair(f.params.get("post_padding"), 0)
    _need(_in_range(pre + post, 0, 31), "conv.padding", f"padding {pre}/{post}: each must be in [0, 31]")
    _need(all(p < kd for p, kd in zip(pre, k)) and all(p < kd for p, kd in zip(post, k)), "conv.padding_lt_kernel",
          f"padding {pre}/{post} must be smaller than the kernel {k} in each dim")
    s = _pair(f.params.get("strides"), 1)
    _need(_in_range(s, 1, 8), "conv.stride", f"stride {s}: each must be in [1, 8]")
    d = _pair(f.params.get("dilations"), 1)
    _need(_in_range(d, 1, 32), "conv.dilation", f"dilation {d}: each must be in [1, 32]")
    shape = _four_d(f, "conv")
    m = int(f.params.get("num_output_maps") or (kernel.shape[0] if kernel is not None else 0))
    _need(1 <= m <= 8192, "conv.output_maps", f"{m} output maps; must be in [1, 8192]")
    c = int(shape[1])
    _need(1 <= c <= 8192, "conv.input_channels", f"{c} input channels; must be in [1, 8192]")
    g = int(f.params.get("groups") or 1)
    if f.fmt == "dla_hwc4":
        _need(1 <= g <= 4, "conv.groups_hwc4", f"{g} groups with kDLA_HWC4 input; must be in [1, 4]")
    else:
        _need(1 <= g <= 8192, "conv.groups", f"{g} groups; must be in [1, 8192] for kDLA_LINEAR, kCHW16, kCHW32")
    _check_cbuf(f, ctx, k, d, pre, post, c, g, int(shape[3]))
    _check_post_ops(f, ctx)


def cbuf_banks(ctx, k, d, pre, post, c, g, w, precision):
    """(wtBanksForOneKernel, minDataBanks) in our CBUF model: the weights of one kernel (one output map) and the
    input rows one output row needs, channels padded to a 32-byte atom, banks of profile.cbuf_bank_bytes."""
    elem = 1 if precision == "int8" else 2
    atom_c = 32 // elem
    cg = -(-(c // max(g, 1)) // atom_c) * atom_c
    bank = ctx.profile.cbuf_bank_bytes
    wt = math.ceil(k[0] * k[1] * cg * elem / bank)
    rows = (k[0] - 1) * d[0] + 1
    data = math.ceil((w + pre[1] + post[1]) * rows * -(-c // atom_c) * atom_c * elem / bank)
    return wt, data


def _check_cbuf(f, ctx, k, d, pre, post, c, g, w):
    wt, data = cbuf_banks(ctx, k, d, pre, post, c, g, w, f.precision)
    n = ctx.profile.cbuf_banks
    _need(wt + data <= n, "conv.cbuf", f"CBUF needs wtBanksForOneKernel {wt} + minDataBanks {data} = {wt + data} "
                                       f"banks > numConvBufBankAllotted {n}")


def _check_post_ops(f, ctx):
    for step in f.params.get("post_ops") or []:
        if step["op"] == "activation":
            _check_activation_type(step["type"], step.get("alpha", 0.0), step.get("beta", 0.0), f, ctx)


def check_fully_connected(f: LayerFacts, ctx: RuleContext):
    """A MatrixMultiply with a constant right operand is TensorRT's FullyConnected: DLA runs it as a 1x1 conv."""
    b = f.weights.get("b")
    if b is None and len(f.in_consts) > 1:
        b = f.in_consts[1]
    _need(b is not None, "matmul.constant", "matrix multiply of two tensors is not supported on DLA; only a fully "
                                            "connected layer (constant weights)")
    _need(np.ndim(b) == 2, "matmul.constant", f"fully connected weights must be 2-D, got {np.shape(b)}")
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) in (2, 4), "fc.rank",
          f"fully connected on DLA needs a 2-D [N, K] or 4-D [N, C, H, W] input, got {shape}")
    tb = bool(f.params.get("transpose_b"))
    kdim, m = (b.shape[1], b.shape[0]) if tb else (b.shape[0], b.shape[1])
    _need(1 <= m <= 8192, "conv.output_maps", f"{m} output maps; must be in [1, 8192]")
    _need(1 <= kdim <= 8192, "conv.input_channels", f"{kdim} input channels; must be in [1, 8192]")
    _need(not f.params.get("transpose_a"), "fc.transpose", "fully connected input cannot be transposed on DLA")
    _check_post_ops(f, ctx)


# deconvolution --------------------------------------------------------------------------------------------------

def _deconv_dims_ok(v):
    if _in_range(v, 1, 32):
        return True
    return (v[0] == 1 and v[1] in (64, 96, 128)) or (v[1] == 1 and v[0] in (64, 96, 128))


def check_deconvolution(f: LayerFacts, ctx: RuleContext):
    k = list(f.params.get("kernel_shape") or [])
    _need(len(k) == 2, "deconv.spatial", f"deconvolution with {len(k)} spatial dims; DLA supports 2 only")
    s = _pair(f.params.get("strides"), 1)
    _need(_deconv_dims_ok(k), "deconv.kernel", f"kernel {k}: dims must be in [1, 32], or 1x[64, 96, 128] / "
                                                f"[64, 96, 128]x1")
    _need(_deconv_dims_ok(s), "deconv.stride", f"stride {s}: dims must be in [1, 32], or 1x[64, 96, 128] / "
                                                f"[64, 96, 128]x1")
    for what, v in (("kernel", k), ("stride", s)):
        _need(not (v[0] == v[1] and 23 <= v[0] <= 32), "deconv.square_23_32",
              f"square {what} {v} in [23, 32] is disabled on DLA (compile time)")
    pads = _pair(f.params.get("pre_padding"), 0) + _pair(f.params.get("post_padding"), 0)
    _need(all(p == 0 for p in pads), "deconv.padding", f"padding {pads} must be 0")
    g = int(f.params.get("groups") or 1)
    _need(g == 1, "deconv.groups", f"{g} groups; deconvolution on DLA needs 1")
    d = _pair(f.params.get("dilations"), 1)
    _need(all(x == 1 for x in d), "deconv.dilation", f"dilation {d}; deconvolution on DLA needs 1")
    shape = _four_d(f, "deconv")
    c = int(shape[1])
    _need(1 <= c <= 8192, "deconv.input_channels", f"{c} input channels; must be in [1, 8192]")
    kernel = f.weights.get("kernel")
    m = int(f.params.get("num_output_maps") or (kernel.shape[1] * g if kernel is not None else 0))
    _need(1 <= m <= 8192, "deconv.output_channels", f"{m} output channels; must be in [1, 8192]")
    _check_post_ops(f, ctx)


# pooling -------------------------------------------------------------------------------------------------------

def check_pooling(f: LayerFacts, ctx: RuleContext):
    shape = _four_d(f, "pool")
    t = f.params.get("type", "MAX")
    _need(t in ("MAX", "AVERAGE"), "pool.type", f"pooling type {t}; DLA supports MAX and AVERAGE")
    window = list(shape[2:]) if f.params.get("global") else list(f.params.get("window") or [])
    _need(len(window) == 2, "pool.spatial", f"pooling over {len(window)} spatial dims; DLA supports 2 only")
    if f.params.get("global") and not _in_range(window, 1, 8):
        stages = [pool_stages(int(w)) for w in window]
        _need(all(s is not None for s in stages), "pool.window",
              f"global pooling window {window} cannot be staged into windows <= 8")
        f.notes.append(f"global pooling runs in stages {stages[0]} x {stages[1]}")
        return
    _need(_in_range(window, 1, 8), "pool.window", f"window {window}: each dim must be in [1, 8]")
    pads = _pair(f.params.get("pre_padding"), 0) + _pair(f.params.get("post_padding"), 0)
    _need(_in_range(pads, 0, 7), "pool.padding", f"padding {pads}: each must be in [0, 7]")
    s = window if f.params.get("global") else _pair(f.params.get("strides"), 1)
    _need(_in_range(s, 1, 16), "pool.stride", f"stride {s}: each must be in [1, 16]")
    d = _pair(f.params.get("dilations"), 1)
    _need(all(x == 1 for x in d), "pool.dilation", f"dilation {d}; DLA pooling has none")
    if f.precision == "int8":
        _check_equal_ranges([_r(f.in_ranges, 0), _r(f.out_ranges, 0)], "pool.int8_scales",
                            "INT8 pooling needs equal input and output scales")


def _r(ranges, i):
    return ranges[i] if i < len(ranges) else None


def _scale_of(r):
    return None if r is None else max(abs(float(r[0])), abs(float(r[1]))) / 127.0


def _check_equal_ranges(ranges, rule, msg):
    scales = [_scale_of(r) for r in ranges]
    _need(all(s is not None for s in scales), rule, f"{msg}; a dynamic range is missing")
    _need(all(np.isclose(s, scales[0], rtol=1e-6, atol=0) for s in scales), rule,
          f"{msg}; scales are {[round(s, 6) for s in scales]}")


# activations ---------------------------------------------------------------------------------------------------

def _check_activation_type(t, alpha, beta, f, ctx):
    if t == "RELU":
        _need(float(alpha or 0.0) == 0.0, "act.relu_slope", f"ReLU with negative slope {alpha} is not supported")
    elif t == "CLIP":
        _need(float(alpha) == 0.0 and 1 <= float(beta) <= 127, "act.clip_range",
              f"Clipped ReLU [{alpha}, {beta}]: lower bound must be 0 and the upper in [1, 127]")
    elif t in ("HARD_SIGMOID", "HARD_SWISH"):
        # HardSigmoid = Clipped ReLU(1) of a Scale (alpha*x + beta); HardSwish = x * HardSigmoid(x)
        f.notes.append(f"{t} runs as Scale + Clipped ReLU(1){' + Product' if t == 'HARD_SWISH' else ''}")
    elif t == "SILU":   # what the ONNX graph had before fusion: Sigmoid then Mul
        f.notes.append("SILU runs as Sigmoid + Product")
    elif t in ("SIGMOID", "TANH"):
        if f.precision == "int8":
            f.notes.append(f"{t} in INT8 runs upgraded to FP16")
    elif t == "LEAKY_RELU":
        pass
    else:
        raise Reject("act.type", f"activation {t}; DLA supports ReLU, Sigmoid, TanH, Clipped ReLU, Leaky ReLU")


def check_activation(f: LayerFacts, ctx: RuleContext):
    _four_d(f, "act")
    t = f.params.get("type", "RELU")
    if t == "PRELU":
        slope = f.in_consts[1] if len(f.in_consts) > 1 else f.weights.get("slope")
        _need(slope is not None, "prelu.slope", "PReLU slope must be a build-time constant")
        _need(np.ndim(slope) == len(f.in_shapes[0]), "prelu.slope",
              f"PReLU slope rank {np.ndim(slope)} must equal the input rank {len(f.in_shapes[0])}")
        return
    if t == "CLIP" and len(f.in_shapes) > 1:
        lo = f.in_consts[1] if len(f.in_consts) > 1 else None
        hi = f.in_consts[2] if len(f.in_consts) > 2 else None
        _need((lo is not None or len(f.in_shapes) < 2) and (hi is not None or len(f.in_shapes) < 3),
              "act.clip_range", "Clipped ReLU bounds must be build-time constants")
        alpha = float(lo) if lo is not None else -np.inf
        beta = float(hi) if hi is not None else np.inf
        _check_activation_type(t, alpha, beta, f, ctx)
        return
    _check_activation_type(t, f.params.get("alpha", 0.0), f.params.get("beta", 0.0), f, ctx)


# element-wise and comparison ----------------------------------------------------------------------------------

ELTWISE_OPS = ("SUM", "SUB", "PROD", "MAX", "MIN", "DIV", "POW", "EQUAL", "GREATER", "LESS")
COMPARISONS = ("EQUAL", "GREATER", "LESS")


def broadcast_form(shape, out):
    """'NCHW', 'NC11', 'N111' or None for an operand shape against the output shape."""
    shape = [1] * (4 - len(shape)) + list(shape)
    if list(shape) == list(out):
        return "NCHW"
    if shape[0] == out[0] and shape[1] == out[1] and shape[2] == shape[3] == 1:
        return "NC11"
    if shape[0] == out[0] and shape[1] == shape[2] == shape[3] == 1:
        return "N111"
    return None


def check_elementwise(f: LayerFacts, ctx: RuleContext, op=None):
    op = op or f.params.get("op", "SUM")
    _need(op in ELTWISE_OPS, "eltwise.op", f"element-wise {op}; DLA supports {', '.join(ELTWISE_OPS)}")
    out = f.out_shapes[0] if f.out_shapes else None
    _need(out is not None and len(out) == 4, "eltwise.rank",
          f"element-wise on DLA supports 2 spatial dims only (4-D NCHW); output shape is {out}")
    for shape in f.in_shapes[:2]:
        _need(shape is not None and len(shape) <= 4 and broadcast_form(shape, out) is not None, "eltwise.broadcast",
              f"operand shape {shape} against output {list(out)}: DLA broadcasts NCHW (equal), NC11 and N111 only")
    consts = (list(f.in_consts) + [None, None])[:2]
    if op == "DIV":
        a, b = consts
        _need(b is not None or f.precision == "int8", "eltwise.div",
              "Div divisor must be INT8 or an FP32 constant")
        for i, c in enumerate((a, b)):
            if c is not None:
                _need(_uniform(c), "eltwise.div", "Div constant operand must have all values equal")
                _need(consts[1 - i] is None and f.precision == "int8", "eltwise.div",
                      "Div with a constant operand needs the other operand non-constant in INT8")
    elif op == "POW":
        _need(sum(c is not None for c in consts) == 1 and all(_uniform(c) for c in consts if c is not None),
              "eltwise.pow", "Pow needs one FP32 constant operand with all values equal")
        _need(f.precision == "int8", "eltwise.pow", "Pow needs the non-constant operand in INT8")
    elif op in COMPARISONS:
        check_comparison(f, ctx, consts)
    elif op == "SUB" and ctx.profile.sub_emulated:
        f.notes.append("SUB runs as Scale + ElementWise SUM on Xavier")


def check_comparison(f: LayerFacts, ctx: RuleContext, consts):
    _need(ctx.int8, "cmp.int8_flag", "comparison on DLA needs the INT8 builder flag")
    _need(f.precision == "int8" and f.precision_set, "cmp.int8",
          "comparison on DLA needs INT8 layer precision set explicitly (and INT8 inputs)")
    for c in consts:
        _need(c is None or _uniform(c), "cmp.int8", "comparison constants must be FP32 with all values equal")
    _need(f.explicit_dla, "cmp.explicit", "comparison runs on DLA only with its device type set to DLA explicitly")
    _need(not f.is_output, "cmp.output", "comparison output cannot be a network or DLA subnetwork output; "
                                         "follow it with a Cast to FP16/INT8")
    cons = f.consumers
    ok = len(cons) == 1 and cons[0].kind in ("Cast", "Identity") and \
        (cons[0].kind == "Identity" or cons[0].params.get("to") in ("float16", "int8"))
    _need(ok, "cmp.cast", "comparison must be followed by a Cast/Identity to FP16 or INT8 as its only consumer")
    _need(cons[0].explicit_dla and cons[0].precision == "int8", "cmp.cast",
          "the Cast after a comparison needs device type DLA and INT8 precision set explicitly")


def check_cast(f: LayerFacts, ctx: RuleContext):
    """Cast / Identity run on DLA only as the Cast that follows a comparison (seed 000 L183)."""
    _need(f.params.get("from_comparison"), "kind", f"{f.kind} runs on DLA only right after a comparison")
    _need(f.kind == "Identity" or f.params.get("to") in ("float16", "int8"), "cmp.cast",
          "the Cast after a comparison must produce FP16 or INT8")
    _need(f.explicit_dla and f.precision == "int8", "cmp.cast",
          "the Cast after a comparison needs device type DLA and INT8 precision set explicitly")


# scale, LRN, concat, resize ------------------------------------------------------------------------------------

def check_scale(f: LayerFacts, ctx: RuleContext):
    _four_d(f, "scale")
    mode = f.params.get("mode", "CHANNEL")
    _need(mode in ("UNIFORM", "CHANNEL", "ELEMENTWISE"), "scale.mode",
          f"scale mode {mode}; DLA supports Uniform, Per-Channel, ElementWise")
    p = f.weights.get("power")
    _need(p is None or np.all(np.asarray(p) == 1), "scale.power", "Scale with power is not supported; scale and "
                                                                  "shift only")
    if ctx.profile.fp19_nonconv_weights and mode == "ELEMENTWISE":
        f.notes.append("Orin stores these weights as FP19 in 4-byte containers, channels padded to 16/32")


def check_lrn(f: LayerFacts, ctx: RuleContext):
    w = int(f.params.get("window", 5))
    _need(w in (3, 5, 7, 9), "lrn.window", f"LRN window {w}; DLA supports 3, 5, 7, 9")
    _need(f.params.get("region", "ACROSS_CHANNELS") == "ACROSS_CHANNELS", "lrn.region",
          "LRN on DLA normalises ACROSS_CHANNELS only")
    if f.precision == "int8":
        f.notes.append("LRN in INT8 runs upgraded to FP16")


def check_concatenation(f: LayerFacts, ctx: RuleContext):
    _need(len(f.in_shapes) >= 2, "concat.inputs", f"concatenation of {len(f.in_shapes)} input; DLA needs >= 2")
    shapes = f.in_shapes
    _need(all(s is not None and len(s) == 4 for s in shapes), "concat.axis",
          f"concatenation on DLA needs 4-D inputs, got {shapes}")
    axis = int(f.params.get("axis", 1)) % 4
    _need(axis == 1, "concat.axis", f"concatenation along axis {axis}; DLA concatenates on channels (axis 1) only")
    _need(all(list(s[2:]) == list(shapes[0][2:]) for s in shapes), "concat.spatial",
          f"inputs have different spatial dims {[list(s[2:]) for s in shapes]}")
    if f.precision == "int8":
        _check_equal_ranges([_r(f.in_ranges, i) for i in range(len(shapes))] + [_r(f.out_ranges, 0)],
                            "concat.int8_ranges", "INT8 concatenation needs equal input and output dynamic ranges")


def resize_scales(f: LayerFacts):
    if f.params.get("scales"):
        return [float(x) for x in f.params["scales"]]
    consts = list(f.in_consts) + [None] * 4
    if consts[2] is not None and np.size(consts[2]):
        return [float(x) for x in np.ravel(consts[2])]
    i, o = (f.in_shapes or [None])[0], (f.out_shapes or [None])[0]
    if i is not None and o is not None and len(i) == len(o):
        return [float(b) / float(a) if a else 0.0 for a, b in zip(i, o)]
    return None


def check_resize(f: LayerFacts, ctx: RuleContext):
    scales = resize_scales(f)
    _need(scales is not None and len(scales) == 4, "resize.scales", f"resize scales {scales}: DLA needs exactly 4")
    _need(scales[0] == 1 and scales[1] == 1, "resize.scales", f"resize scales {scales}: N and C scales must be 1")
    mode = f.params.get("mode", "NEAREST")
    _need(mode in ("NEAREST", "LINEAR"), "resize.mode", f"resize mode {mode}; DLA supports nearest and bilinear")
    hi = 32 if mode == "NEAREST" else 4
    hw = scales[2:]
    _need(all(float(s).is_integer() and 1 <= s <= hi for s in hw), "resize.hw_scales",
          f"H/W scales {hw} must be integers in [1, {hi}] ({'nearest' if mode == 'NEAREST' else 'bilinear'})")
    if mode == "LINEAR" and f.precision == "int8":
        ri, ro = _scale_of(_r(f.in_ranges, 0)), _scale_of(_r(f.out_ranges, 0))
        if ri is not None and ro is not None and ri > ro:
            f.notes.append("bilinear INT8 resize with input range > output range runs upgraded to FP16")


# unary, slice, softmax, shuffle, reduce -------------------------------------------------------------------------

def _dims_in_range(f, rule):
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None, rule, "input shape unknown")
    nb = _non_batch(shape)
    _need(_in_range(nb, 1, MAX_DIM), rule, f"non-batch dims {nb} must be in [1, {MAX_DIM}]")
    return shape


def check_unary(f: LayerFacts, ctx: RuleContext, op=None):
    op = op or f.params.get("op", "EXP")
    _need(op in ("ABS", "SIN", "COS", "ATAN"), "unary.op", f"unary {op}; DLA supports ABS, SIN, COS, ATAN")
    if op != "ABS":
        _need(f.precision == "int8", "unary.int8", f"unary {op} on DLA needs INT8 input precision")
    _dims_in_range(f, "unary.dims")


def check_slice(f: LayerFacts, ctx: RuleContext):
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) == 4, "slice.rank", f"slice on DLA needs a 4-D input, got {shape}")
    _dims_in_range(f, "slice.dims")
    consts = list(f.in_consts) + [None] * 5
    dynamic = [name for i, name in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))
               if i < len(f.in_shapes) and f.in_shapes[i] is not None and consts[i] is None]
    _need(not dynamic, "slice.static", f"slice {', '.join(dynamic)} must be build-time constants (static slicing)")
    axes = f.params.get("axes")
    if axes is None and consts[3] is not None:
        axes = [int(a) for a in np.ravel(consts[3])]
    if axes is None:
        starts = f.params.get("starts") if f.params.get("starts") is not None else consts[1]
        axes = list(range(len(np.ravel(starts)))) if starts is not None else []
    out = f.out_shapes[0] if f.out_shapes else None
    touched = [int(a) % 4 for a in axes]
    batch_sliced = 0 in touched and (out is None or int(out[0]) != int(shape[0]))
    _need(not batch_sliced, "slice.batch", "slicing the batch dim is not supported on DLA (CHW slicing only)")


def check_split(f: LayerFacts, ctx: RuleContext):
    """TensorRT builds Split from Slice layers; the DLA runs them under the Slice rules."""
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) == 4, "slice.rank", f"split (as slices) needs a 4-D input, got {shape}")
    _dims_in_range(f, "slice.dims")
    _need(len(f.in_shapes) < 2 or (len(f.in_consts) > 1 and f.in_consts[1] is not None), "slice.static",
          "split sizes must be build-time constants (static slicing)")
    _need(int(f.params.get("axis", 0)) % 4 != 0, "slice.batch",
          "splitting the batch dim is not supported on DLA (CHW slicing only)")
    f.notes.append(f"split runs as {len(f.out_shapes)} Slice layers")


def softmax_mode(shape, axis) -> str:
    """'accurate' when every non-batch, non-axis dim is 1, else 'optimized' (seed 000 L370)."""
    others = [d for i, d in enumerate(shape) if i not in (0, axis)]
    return "accurate" if all(int(d) == 1 for d in others) else "optimized"


def check_softmax(f: LayerFacts, ctx: RuleContext):
    _need(ctx.profile.softmax, "softmax.profile", f"softmax runs on DLA on Orin only, not on {ctx.profile.name}")
    _need(not f.params.get("log") and not f.params.get("hard"), "softmax.kind",
          "LogSoftmax / Hardmax are not supported on DLA")
    shape = _dims_in_range(f, "softmax.dims")
    axis = int(f.params.get("axis", -1)) % len(shape)
    _need(axis != 0 and not f.params.get("flatten"), "softmax.axis", "softmax axis must be a non-batch dim")
    if softmax_mode(shape, axis) == "optimized":
        _need(int(shape[axis]) <= 1024, "softmax.optimized_axis",
              f"optimized-mode softmax (non-axis dims > 1) limits the axis to 1024, got {shape[axis]}")
        f.notes.append(f"softmax runs in optimized mode (approximate, axis {shape[axis]})")
    else:
        f.notes.append("softmax runs in accurate mode")


def check_shuffle(f: LayerFacts, ctx: RuleContext):
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) == 4, "shuffle.rank", f"shuffle on DLA needs a 4-D input, got {shape}")
    _dims_in_range(f, "shuffle.dims")
    for key in ("first_transpose", "second_transpose"):
        perm = f.params.get(key)
        _need(perm is None or int(perm[0]) == 0, "shuffle.batch",
              f"{key} {perm} moves the batch dim; the batch dim cannot take part in a transpose on DLA")
    dims = f.params.get("reshape_dims")
    if dims is None and len(f.in_consts) > 1 and f.in_consts[1] is not None:
        dims = [int(x) for x in np.ravel(f.in_consts[1])]
    if dims is None and len(f.in_shapes) > 1:
        raise Reject("shuffle.static", "reshape dims must be build-time constants on DLA")
    out = f.out_shapes[0] if f.out_shapes else None
    if dims is not None or out is not None:
        first = f.params.get("first_transpose")
        mid = [shape[i] for i in first] if first else list(shape)
        target = out if out is not None else dims
        _need(int(target[0]) == int(mid[0]) or (dims is not None and int(dims[0]) == 0), "shuffle.batch",
              f"reshape {list(mid)} -> {list(target)} changes the batch dim; it cannot take part in a reshape on DLA")
        if out is not None:
            big = [d for d in out[1:] if not 1 <= int(d) <= MAX_DIM]
            _need(not big, "shuffle.dims", f"reshaped dims {list(out)} must be in [1, {MAX_DIM}]")


def check_reduce(f: LayerFacts, ctx: RuleContext):
    shape = f.in_shapes[0] if f.in_shapes else None
    _need(shape is not None and len(shape) == 4, "reduce.rank", f"reduce on DLA needs a 4-D input, got {shape}")
    _dims_in_range(f, "reduce.dims")
    axes = f.params.get("axes")
    if axes is None and len(f.in_consts) > 1 and f.in_consts[1] is not None:
        axes = [int(a) for a in np.ravel(f.in_consts[1])]
    axes = sorted(int(a) % 4 for a in (axes if axes is not None else range(4)))
    _need(0 not in axes, "reduce.axes", f"reduce over axes {axes} includes the batch dim; DLA reduces C/H/W only")
    op = f.params.get("op", "SUM")
    if op == "AVG" and axes == [2, 3] and f.params.get("keep_dims", True):
        stages = [pool_stages(int(shape[2])), pool_stages(int(shape[3]))]
        _need(all(s is not None for s in stages), "reduce.op",
              f"mean over H x W = {shape[2]}x{shape[3]} cannot be staged into AVERAGE pools of windows <= 8")
        f.notes.append(f"mean over H, W runs as AVERAGE pooling in stages {stages[0]} x {stages[1]}")
        return
    _need(op == "MAX", "reduce.op", f"reduce {op}; DLA supports MAX only")


def pool_stages(n: int):
    """Factor a window n into windows <= 8 whose product is n (staged average pooling), or None."""
    if n <= 8:
        return [n]
    for k in range(8, 1, -1):
        if n % k == 0:
            rest = pool_stages(n // k)
            if rest is not None:
                return [k] + rest
    return None


# pointwise chains and the dispatcher ---------------------------------------------------------------------------

def check_pointwise(f: LayerFacts, ctx: RuleContext):
    """A fused chain is DLA-eligible if every step is (the DLA runs each step as its own layer)."""
    out = f.out_shapes[0] if f.out_shapes else None
    shapes = {}
    for j, st in enumerate(f.params.get("program") or []):
        arg_shapes, arg_consts = [], []
        for a in st["args"]:
            kind, key = a.split(":", 1)
            if kind == "in":
                i = int(key)
                arg_shapes.append(f.in_shapes[i] if i < len(f.in_shapes) else None)
                arg_consts.append(f.in_consts[i] if i < len(f.in_consts) else None)
            elif kind == "w":
                w = np.asarray(f.weights[key])
                arg_shapes.append(list(w.shape))
                arg_consts.append(w)
            else:
                arg_shapes.append(shapes.get(int(key), out))
                arg_consts.append(None)
        shapes[j] = out
        step = LayerFacts(f"{f.name} step {j}", st["op"], dict(st.get("params", {})), {}, arg_shapes, [out],
                          arg_consts, f.precision, f.in_ranges, f.out_ranges, f.consumers, f.is_output,
                          f.explicit_dla, f.precision_set, f.fmt)
        step.notes = f.notes
        try:
            CHECKS[st["op"]](step, ctx)
        except Reject as r:
            raise Reject(r.rule, f"fused step {j} ({st['op']} {st.get('params', {}).get('op') or st.get('params', {}).get('type', '')}): {r.msg}")
        except KeyError:
            raise Reject("kind", f"fused step {j} of kind {st['op']} is not supported on DLA")


def check_constant(f: LayerFacts, ctx: RuleContext):
    """Constants become the weights of the loadable that reads them."""


CHECKS = {
    "Convolution": check_convolution, "Deconvolution": check_deconvolution, "MatrixMultiply": check_fully_connected,
    "Pooling": check_pooling, "Activation": check_activation, "ElementWise": check_elementwise,
    "Scale": check_scale, "LRN": check_lrn, "Concatenation": check_concatenation, "Resize": check_resize,
    "Unary": check_unary, "Slice": check_slice, "Split": check_split, "Softmax": check_softmax, "Shuffle": check_shuffle,
    "Reduce": check_reduce, "Pointwise": check_pointwise, "Cast": check_cast, "Identity": check_cast,
    "Constant": check_constant,
}


def check(f: LayerFacts, ctx: RuleContext | None = None) -> Verdict:
    """Whether the DLA runs this layer; the first rule it breaks otherwise."""
    ctx = ctx or RuleContext()
    f.notes = []
    try:
        if f.kind == "Constant":
            return Verdict(True, "ok", "constant: weights of the loadable that reads it", [])
        if f.kind not in CHECKS and f.kind not in ("Quantize", "Dequantize"):
            raise Reject("kind", f"layer kind {f.kind} is not supported on DLA")
        check_general(f, ctx)
        CHECKS[f.kind](f, ctx)
        check_dims(f)
    except Reject as r:
        return Verdict(False, r.rule, f"[{r.rule}] {r.msg}", f.notes)
    return Verdict(True, "ok", "runs on DLA" + (f" ({'; '.join(f.notes)})" if f.notes else ""), f.notes)
