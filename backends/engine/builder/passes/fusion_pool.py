"""Monotonic activation before a max pooling becomes the pooling's epilogue: pool(f(x)) == f(pool(x)) for any
non-decreasing f, so f runs on the pooled map (4x fewer elements after ResNet's 3x3/2 stem pool) as a post-op of
the Pooling layer ("maxpool + relu") instead of on the full map before it.

Only activations that stay exactly non-decreasing in floating point (piecewise linear ones) move, so the result
is bit-identical; a smooth f (sigmoid, tanh) could differ by an ulp where rounding breaks monotonicity.
"""
from __future__ import annotations

from backends.engine.builder.passes.fusion_util import View, fused_node, same_precision


def _monotonic(act) -> bool:
    p = act.params
    kind = p.get("type")
    if len(act.inputs) != 1:           # PReLU slope / Clip bounds as inputs
        return False
    if kind in ("RELU", "CLIP"):
        return True
    if kind in ("LEAKY_RELU", "HARD_SIGMOID"):
        return float(p.get("alpha", 0.0)) >= 0
    return False


def move_activation_past_maxpool(graph, config, logger) -> int:
    view, count = View(graph), 0
    for act in list(graph.nodes):
        if act.kind != "Activation" or not _monotonic(act) or act.subgraphs:
            continue
        pool = view.sole_consumer(act.outputs[0])
        if (pool is None or pool.kind != "Pooling" or pool.params.get("type") != "MAX" or pool.params.get("global")
                or len(pool.outputs) != 1 or pool.inputs[0] != act.outputs[0] or pool.params.get("post_ops")
                or not same_precision([act, pool])):
            continue
        step = {"op": "activation", "type": act.params["type"], "alpha": act.params.get("alpha", 0.0),
                "beta": act.params.get("beta", 0.0)}
        fused = fused_node([pool, act], "Pooling", [act.inputs[0]] + list(pool.inputs[1:]), pool.outputs,
                           params=dict(pool.params, post_ops=[step]), weights=dict(pool.weights))
        graph.replace_nodes([act, pool], fused)
        view.refresh()
        logger.verbose(f"fusion: {act.params['type']} '{act.name}' moved after max pool '{pool.name}' as its "
                       f"epilogue")
        count += 1
    return count
