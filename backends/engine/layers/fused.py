"""Layers the builder's fusion passes create (never the parser)."""
from backends.engine.network import Layer

__all__ = ["PointwiseLayer", "AttentionLayer"]


class PointwiseLayer(Layer):
    """A chain of pointwise ops fused into one kernel. params['program'] is a list of steps
    {"op": kind/op, "args": [operand refs], "params": {...}} evaluated in order; operand refs are
    "in:<i>" (layer input), "w:<name>" (weight) or "s:<j>" (result of step j). The last step is the output."""
    kind = "Pointwise"
    defaults = {"program": []}


class AttentionLayer(Layer):
    """softmax(Q @ K^T * scale + mask) @ V as one layer. Inputs q, k, v, optional mask; params scale,
    mask_kind (none, add, bool), transpose_k."""
    kind = "Attention"
    defaults = {"scale": None, "mask_kind": "none", "transpose_k": True, "softmax_axis": -1}
