"""Re-run a few ONNX nodes with onnx's reference evaluator, one node at a time, from given boundary values.

Used to look inside what the engine shows as one tensor: which node of a fused region made the first NaN/Inf
(nonfinite.py), and how much of a tensor's error the node made itself versus what its inputs carried in (origin.py).
"""
from __future__ import annotations

import numpy as np


def constants(model, names) -> dict:
    """Values of initializers among `names`."""
    from onnx import numpy_helper
    inits = {i.name: i for i in model.graph.initializer}
    return {t: numpy_helper.to_array(inits[t]) for t in names if t in inits}


def evaluate(model, nodes, env: dict, on_output=None) -> dict | None:
    """Run `nodes` (topological order) on `env` {tensor: value}, adding their outputs to it. on_output(node, name,
    value) may return a truthy value to stop there. Returns env, or None when some node input has no value."""
    import onnx
    from onnx.reference import ReferenceEvaluator
    opsets = {o.domain: o.version for o in model.opset_import}
    for n in nodes:
        if any(i and i not in env for i in n.input):
            return None
        ins = [onnx.helper.make_tensor_value_info(i, onnx.TensorProto.UNDEFINED, None) for i in n.input if i]
        outs = [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in n.output if o]
        g = onnx.helper.make_graph([n], "replay", ins, outs)
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
        with np.errstate(all="ignore"):
            vals = ReferenceEvaluator(m).run(None, {i: env[i] for i in n.input if i})
        for o, v in zip([o for o in n.output if o], vals):
            env[o] = v
            if on_output is not None and on_output(n, o, v):
                return env
    return env
