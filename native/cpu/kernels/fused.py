"""CPU kernels for fused work: the post-op epilogue shared by convolution and matrix multiply.

Contract: a Convolution / Deconvolution / MatrixMultiply node may carry params["post_ops"], a list of steps
applied in place to its result, in order:
    {"op": "bias", "weight": "<weights key>", "axis": 1}      add a per-channel bias from op.weights
    {"op": "activation", "type": "RELU", "alpha": .., "beta": ..}
    {"op": "add", "input": <index into the node's inputs>}     residual add of an extra input
Extra inputs referenced by "add" are appended after the node's normal inputs.
"""
import numpy as np


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
            y += inputs[step["input"]]
        else:
            raise ValueError(f"unknown post-op {kind!r}")
    return y
