"""Probability outputs stay FP32 in reduced-precision builds.

A network output computed through an exponential-tail function (Sigmoid, Softmax, Exp, Softplus) is usually a map
of probabilities whose small values carry the information: a text detector's background, a classifier's unlikely
classes. FP16 stores values below 2^-14 (6.1e-5) as subnormals with a fixed spacing of 2^-24 (6e-8), so a
probability of 1e-5 keeps 0.6% relative precision and one of 1e-6 keeps 6%. Measured on ppocr_v4_det (real
weights, random inputs, every probability below 1e-4): rounding the FP32 output to FP16 alone drops its cosine
against FP32 to 0.9915, while each of its 54 intermediate tensors stays >= 0.99998 in FP16.

The rule: in a build with FP16 (or FP8, whose companion is FP16), the layer that computes such an output, seen
through data movement only (Shuffle, Concatenation, Slice, ...), runs in FP32 instead of FP16, and so do the
data-movement layers between it and the output. Where the function is fused into a convolution or matrix multiply
epilogue or a pointwise chain, the fused layer runs in FP32 (its logits are never rounded either). Its inputs stay
FP16, so the cost is one layer's FP32 arithmetic (docs/PRECISION.md has the measurements). BF16 layers are left
alone: BF16 has FP32's exponent range, so nothing is subnormal, and on ppocr_v4_det its error comes from the whole
network (cosine 0.9836 with the last layer in FP32 or not).

It yields to the user: a layer with a precision constraint keeps it, an output the network declares FP16/BF16
(`tensor.dtype`) is left alone, and `BuilderFlag.REDUCED_PROBABILITY_OUTPUTS` (`--reduced-probability-outputs`)
turns the rule off.
"""
from __future__ import annotations

from backends.engine.builder.config import BuilderFlag

# functions with an exponential tail toward 0 (activation types, unary ops, SOFTMAX for the Softmax layer)
TAIL_FUNCTIONS = {"SIGMOID", "SOFTMAX", "EXP", "SOFTPLUS"}
# layers that move values without computing: the rule looks through them to the layer that computed the output
DATA_MOVEMENT = ("Shuffle", "Concatenation", "Slice", "Split", "Gather", "Identity", "Expand", "Tile")
REDUCED_FLOAT = ("float16", "fp8")   # the precisions whose outputs FP16 stores


def last_function(node) -> str | None:
    """The name of the function a layer applies last (an activation type, a unary op, SOFTMAX), else None."""
    if node.kind == "Softmax":
        return "SOFTMAX"
    if node.kind == "Activation":
        return node.params.get("type")
    if node.kind == "Unary":
        return node.params.get("op")
    if node.kind == "Pointwise":
        program = node.params.get("program") or []
        return last_function_of_step(program[-1]) if program else None
    post = node.params.get("post_ops")
    if post and post[-1].get("op") == "activation":
        return post[-1].get("type")
    return None


def last_function_of_step(step) -> str | None:
    params = step.get("params") or {}
    if step.get("op") == "Activation":
        return params.get("type")
    if step.get("op") == "Unary":
        return params.get("op")
    return None


def probability_layers(graph, enabled, config=None) -> dict:
    """{id(node): (output name, function)} for the layers the rule keeps in FP32: each layer that computes a float32
    network output through a tail function, and the data-movement layers between it and that output. Empty when
    neither FP16 nor FP8 is enabled or the config sets REDUCED_PROBABILITY_OUTPUTS."""
    if not set(enabled) & set(REDUCED_FLOAT):
        return {}
    if config is not None and config.get_flag(BuilderFlag.REDUCED_PROBABILITY_OUTPUTS):
        return {}
    producers = graph.producers()
    keep = {}
    for out in graph.outputs:
        if out.dtype not in (None, "float32"):
            continue
        stack, seen = [(out.name, [])], set()
        while stack:
            name, path = stack.pop()
            node = producers.get(name)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if node.kind in DATA_MOVEMENT:
                sources = node.inputs if node.kind == "Concatenation" else node.inputs[:1]
                stack.extend((i, path + [node]) for i in sources if i is not None)
                continue
            fn = last_function(node)
            if fn in TAIL_FUNCTIONS:
                for n in path + [node]:
                    keep.setdefault(id(n), (out.name, fn))
    return keep


def precision_for(node, chosen, why, logger) -> str:
    """The precision of a layer the rule names (`why` = (output, function)), given the one the precision pass
    chose: float32 instead of a reduced float precision, unless a user constraint chose it."""
    if chosen not in REDUCED_FLOAT:
        return chosen
    out, fn = why
    if node.meta.get("precision_constraint") is not None:
        logger.verbose(f"layer '{node.name}' computes network output '{out}' through {fn} but keeps its precision "
                       f"constraint ({chosen})")
        return chosen
    what = (f"carries {fn} values to network output '{out}'" if node.kind in DATA_MOVEMENT
            else f"computes network output '{out}' through {fn}")
    logger.verbose(f"layer '{node.name}' ({node.kind}) runs in float32, not {chosen}: it {what}, whose small probabilities {chosen} stores badly (FP16: subnormal below 6.1e-5); "
                   f"BuilderFlag.REDUCED_PROBABILITY_OUTPUTS (--reduced-probability-outputs) lets it run in {chosen}")
    return "float32"
