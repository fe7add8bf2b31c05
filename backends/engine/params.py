"""Declared params per layer kind: each kind's own params (its layer class's `defaults`) plus the fused params the
builder's passes attach, with a schema for each fused one. `Graph.lint()` checks nodes against it, and tactics
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
"""
from __future__ import annotations

from native.tactics import FUSED_PARAMS

POST_OP_KINDS = {"Convolution", "Deconvolution", "MatrixMultiply", "ConvolutionNHWC", "Pooling", "PoolingNHWC"}
# fused param -> the layer kinds that may carry it
FUSED_ON = {
    "post_ops": POST_OP_KINDS,
    "side": {"Convolution"},
    "integer": {"Convolution"},
    "col2im": {"Deconvolution"},
    "program": {"Pointwise"},
    "emulate": {"Convolution"},
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


CHECKS = {"post_ops": _post_ops, "side": _side, "integer": _bool, "col2im": _bool, "program": _program,
          "emulate": _emulate}


def declared_params(kind: str) -> set:
    """The params a layer of `kind` declares: its layer class's defaults plus the fused params it may carry."""
    from backends.engine.network import LAYER_KINDS
    cls = LAYER_KINDS.get(kind)
    own = set(getattr(cls, "defaults", {}) or {}) if cls is not None else set()
    return own | {p for p, kinds in FUSED_ON.items() if kind in kinds}


def check_params(node) -> list[str]:
    """Problems with a node's fused params (empty when they match the schema)."""
    problems = []
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
