"""Declared params per layer kind, with types: each kind's own params (DECLARED, below), the fused params the
builder's passes attach (with a schema each) and the other params passes attach (PASS_PARAMS). `Graph.lint()` checks nodes against it, and tactics
declare which fused params they implement (`Tactic.honours`), so a fused meaning can never be silently dropped.

Fused params (the only ones that change what a layer computes beyond its kind's own params):
    post_ops   list of epilogue steps applied in place to the result, in order (native/cpu/kernels/fused.py):
               {"op": "bias", "weight": <weights key>, "axis": int} | {"op": "activation", "type": str,
               "alpha": float, "beta": float} | {"op": "add", "input": <input index>}
    side       a 1x1 shortcut convolution merged into the GEMM: {"input": <input index>, "strides": [sh, sw]}
    integer    ConvInteger: exact int32 accumulation of zero-point-shifted operands (bool)
    col2im     ONNX Col2Im carried as a Deconvolution whose input holds the columns (bool)
    program    a fused pointwise chain: [{"op": kind, "args": [refs], "params": {...}}] (layers/fused.py)
    emulate    compute in another runtime's rounding order: "onnxruntime-mlas" (native/cpu/kernels/mlas_conv.py)
    residual_input  the input index added to input 0 before a LayerNorm normalises it (int; the sum its output 3
               where others read it: passes/fusion_residual_norm.py, native/cpu/kernels/norm_residual.py)
"""
from __future__ import annotations

import functools

from backends.engine import schema as S
from native.tactics import FUSED_PARAMS

POST_OP_KINDS = {"Convolution", "Deconvolution", "MatrixMultiply", "ConvolutionNHWC", "Pooling", "PoolingNHWC",
                 "Normalization"}   # Normalization: activation steps only, on the CPU (fusion_epilogue.fuse_norm_activation)
# fused param -> the layer kinds that may carry it
FUSED_ON = {
    "post_ops": POST_OP_KINDS,
    "side": {"Convolution"},
    "integer": {"Convolution"},
    "col2im": {"Deconvolution"},
    "program": {"Pointwise"},
    "emulate": {"Convolution"},
    "residual_input": {"Normalization"},
}
assert set(FUSED_ON) == set(FUSED_PARAMS)


def _post_ops(value, node):
    if not isinstance(value, list):
        return "must be a list of steps"
    n_in = len(node.inputs)
    for i, step in enumerate(value):
        op = step.get("op") if isinstance(step, dict) else None
        if op == "bias":
            if step.get("weight") not in node.weights:
                return f"step {i} (bias) names weight {step.get('weight')!r}, which the layer does not have"
        elif op == "activation":
            if not isinstance(step.get("type"), str):
                return f"step {i} (activation) has no activation type"
        elif op == "add":
            j = step.get("input")
            if not isinstance(j, int) or not 0 <= j < n_in or node.inputs[j] is None:
                return f"step {i} (add) reads input {j!r}; the layer has {n_in} inputs"
        else:
            return f"step {i} has unknown op {op!r} (bias, activation, add)"
    return None


def _side(value, node):
    if not isinstance(value, dict):
        return "must be a dict {input, strides}"
    j = value.get("input")
    if not isinstance(j, int) or not 0 <= j < len(node.inputs) or node.inputs[j] is None:
        return f"reads input {j!r}; the layer has {len(node.inputs)} inputs"
    if "side_kernel" not in node.weights:
        return "needs weights['side_kernel']"
    return None


def _bool(value, node):
    return None if isinstance(value, bool) else f"must be a bool, got {type(value).__name__}"


def _program(value, node):
    if not isinstance(value, list) or not value:
        return "must be a non-empty list of steps"
    for i, step in enumerate(value):
        if not isinstance(step, dict) or "op" not in step or not isinstance(step.get("args"), list):
            return f"step {i} must be {{op, args, params}}"
        for ref in step["args"]:
            kind, _, idx = str(ref).partition(":")
            if kind == "in" and not (idx.isdigit() and int(idx) < len(node.inputs)):
                return f"step {i} reads {ref!r}; the layer has {len(node.inputs)} inputs"
            if kind == "w" and idx not in node.weights:
                return f"step {i} reads weight {idx!r}, which the layer does not have"
            if kind == "s" and not (idx.isdigit() and int(idx) < i):
                return f"step {i} reads {ref!r}, not an earlier step"
    return None


def _emulate(value, node):
    return None if value == "onnxruntime-mlas" else f"must be 'onnxruntime-mlas', got {value!r}"


def _residual(value, node):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < len(node.inputs) or \
            node.inputs[value] is None:
        return f"reads input {value!r}; the layer has {len(node.inputs)} inputs"
    return None


CHECKS = {"post_ops": _post_ops, "side": _side, "integer": _bool, "col2im": _bool, "program": _program,
          "emulate": _emulate, "residual_input": _residual}


# --- every layer kind's own params, with types ---------------------------------------------------------------
# One line per kind: "name:type" where type is int, num (int or float), bool, str, ints, nums, strs, obj (a JSON
# object), objs (a list of them); a trailing "?" allows null. `Graph.lint()` rejects a param a kind does not declare
# and a declared one of the wrong type; the plan schema (plan_schema.py) holds loaded plans to the same table. A
# new param (an importer's or a pass's) is declared here, on the line of its kind.
_CONV = ("num_output_maps:int kernel_shape:ints strides:ints? pre_padding:ints? post_padding:ints? dilations:ints? "
         "groups:int auto_pad:str?")
_POOL = ("type:str window:ints strides:ints? pre_padding:ints? post_padding:ints? dilations:ints? ceil_mode:bool "
         "average_count_excludes_padding:bool p:int global:bool storage_order:int num_outputs:int auto_pad:str?")
DECLARED = {
    "Activation": "type:str alpha:num? beta:num?",
    "ArgReduce": "axis:int keep_dims:bool op:str select_last_index:bool",
    "Assertion": "message:str",
    "Attention": "columns:ints? heads:int? mask_kind:str nan_to_zero:bool scale:num? softmax_axis:int transpose_k:bool",
    "Cast": "round_mode:str saturate:bool to:str?",
    "Concatenation": "axis:int",
    "Constant": "shape:ints",
    "Convolution": _CONV,
    "ConvolutionNHWC": _CONV + " kernel_spatial:ints",
    "Cumulative": "exclusive:bool op:str reverse:bool",
    "Deconvolution": _CONV + " output_padding:ints? output_shape:ints?",
    "Dequantize": "axis:int block_size:int output_dtype:str?",
    "DlaLoadable": "batch:int core:int hwc4_align:int inputs:objs outputs:objs pools:obj precision:str profile:str",
    "DlaReformat": "direction:str dtype:str format:str hwc4_align:int name:str scale:num? shape:ints",
    "Einsum": "equation:str",
    "ElementWise": "op:str",
    "Expand": "",
    "Fill": "alpha:num? beta:num? dtype:str? k:int op:str seed:num? shape:ints?",
    "Gather": "axis:int batch_dims:int mode:str",
    "InvertedResidual": ("dw_ops:objs excite_ops:objs expand_ops:objs kernel_shape:ints post_padding:ints pre_padding:ints "
                         "residual:bool squeeze_ops:objs strides:ints"),
    "Identity": "",
    "If": "",
    "LRN": "alpha:num beta:num k:num window:int",
    "Loop": "num_carried:int scan_outputs:objs",
    "MatrixMultiply": "transpose_a:bool transpose_b:bool",
    "NonZero": "",
    "Normalization": "axes:ints epsilon:num mode:str momentum:num num_groups:int p:int stash_type:int training_mode:bool",
    "OneHot": "axis:int",
    "Padding": "axes:ints? mode:str pads:ints? value:num?",
    "Plugin": "fields:obj plugin_type:str plugin_version:str",
    "Pointwise": "",
    "Pooling": _POOL,
    "PoolingNHWC": _POOL,
    "Quantize": "axis:int block_size:int dynamic:bool output_dtype:str? saturate:bool",
    "RNN": ("activation_alpha:nums? activation_beta:nums? activations:strs? cell:str clip:num? direction:str "
            "hidden_size:int input_forget:int layout:int linear_before_reset:int"),
    "Range": "",
    "Reduce": "axes:ints? keep_dims:bool noop_with_empty_axes:bool op:str",
    "Reformat": "from:str to:str scale:num? rounding:str? pack:obj?",
    "Resize": ("align_corners:int antialias:bool axes:ints? coordinate_transformation:str cubic_coeff:num "
               "exclude_outside:bool extrapolation_value:num grid_mode:str keep_aspect_ratio_policy:str mode:str "
               "nearest_rounding:str padding_mode:str"),
    "Scale": "mode:str channel_axis:int",
    "Scan": ("batched:bool num_scan_inputs:int scan_input_axes:ints? scan_input_directions:ints? "
             "scan_output_axes:ints? scan_output_directions:ints?"),
    "Scatter": "axis:int mode:str reduction:str",
    "Select": "",
    "Sequence": "axis:int dtype:str? keepdims:int new_axis:int op:str",
    "Shape": "end:int? start:int",
    "Shuffle": "first_transpose:ints? reshape_dims:ints? second_transpose:ints? zero_is_placeholder:bool",
    "Slice": "axes:ints? ends:ints? starts:ints? steps:ints?",
    "Softmax": "axis:int flatten:bool hard:bool log:bool",
    "Split": "axis:int num_outputs:int split:ints?",
    "SqueezeExcite": "excite_ops:objs mean_dtype:str squeeze_ops:objs",
    "Tile": "",
    "TopK": "axis:int k:int? op:str sorted:bool",
    "Unary": "op:str detect_negative:bool detect_positive:bool",
}
# params builder passes attach beyond the fused ones: the DLA pass's per-layer settings (any kind it places), the
# INT8 pass's scales, the Q/DQ emulation mode
PASS_PARAMS = {
    "dla": ("obj", None),
    "int8": ("obj", {"Convolution", "ConvolutionNHWC", "MatrixMultiply", "Pooling", "PoolingNHWC"}),
    "emulate": ("str", {"Convolution", "ConvolutionNHWC"}),
}


def _schema(spec: str):
    base = spec.rstrip("?")
    table = {"int": S.Int, "num": S.Num, "bool": S.Bool, "str": S.Str, "ints": lambda: S.List(S.Int()),
             "nums": lambda: S.List(S.Num()), "strs": lambda: S.List(S.Str()), "obj": lambda: S.Map(S.Any()),
             "objs": lambda: S.List(S.Map(S.Any()))}
    if base not in table:
        raise ValueError(f"unknown param type {spec!r} (known: {sorted(table)}, '?' for nullable)")
    t = table[base]()
    return S.Opt(t) if spec.endswith("?") else t


@functools.lru_cache(maxsize=None)
def param_types(kind: str) -> dict | None:
    """{param: schema} for every param a layer of `kind` may carry: its own (DECLARED), the fused ones it may carry
    (checked by CHECKS) and those passes attach (PASS_PARAMS). None: the kind declares none."""
    if kind not in DECLARED:
        return None
    types = {}
    for item in DECLARED[kind].split():
        name, _, spec = item.partition(":")
        types[name] = _schema(spec)
    for p, kinds in FUSED_ON.items():
        if kind in kinds:
            types[p] = S.Any()
    for p, (spec, kinds) in PASS_PARAMS.items():
        if kinds is None or kind in kinds:
            types[p] = _schema(spec)
    return types


def declared_params(kind: str) -> set:
    """The params a layer of `kind` declares: its own, the fused params it may carry and those passes attach."""
    return set(param_types(kind) or ())


def params_schema(kind: str):
    """The declared params of `kind` as one strict plan_schema object (None when the kind declares none): what the
    plan schema holds a loaded plan's params to."""
    types = param_types(kind)
    return None if types is None else S.Obj({f"?{k}": v for k, v in types.items()})


def check_params(node) -> list[str]:
    """Problems with a node's params: undeclared or mistyped params of its kind, fused params off their schema
    (empty when they match)."""
    problems = []
    types = param_types(node.kind)
    if types is None:
        if node.params:
            problems.append(f"layer kind '{node.kind}' declares no params, but the layer carries "
                            f"{sorted(node.params)[:5]}; declare them in backends/engine/params.py DECLARED")
    else:
        for k, v in node.params.items():
            if k in FUSED_PARAMS and not v:
                continue        # an empty fused param means none
            schema = types.get(k)
            if schema is None:
                if k not in FUSED_PARAMS:
                    problems.append(f"param '{k}' is not declared for {node.kind} (declared: "
                                    f"{', '.join(sorted(types))}); declare it in backends/engine/params.py")
                continue
            errors = []
            schema.check(v, k, errors)
            problems.extend(f"param '{path}' {msg}" for path, msg in errors[:3])
    for p in FUSED_PARAMS:
        value = node.params.get(p)
        if not value:
            continue
        if node.kind not in FUSED_ON[p]:
            problems.append(f"fused param '{p}' on a {node.kind} layer (allowed on {sorted(FUSED_ON[p])})")
            continue
        why = CHECKS[p](value, node)
        if why:
            problems.append(f"fused param '{p}' {why}")
    return problems
