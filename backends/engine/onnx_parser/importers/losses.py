"""Importers: loss functions (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

Both import onto the built-in loss plugins in native/cpu/kernels/losses.py (see its docstring for why a plugin
rather than a chain of Softmax/Gather/Reduce layers). The importers fill in the schema defaults explicitly so the
kernel reads plain fields: `reduction` ('mean' unless given) and `ignore_index` (None when absent).
"""
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from backends.engine.onnx_parser.importers.plugins import import_as_plugin
from native.errors import ParseError

_REDUCTIONS = ("none", "sum", "mean")


def _fields(attrs):
    reduction = attrs.get("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in _REDUCTIONS:
        raise ParseError(f"reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    ignore = attrs.get("ignore_index")
    return {"reduction": reduction, "ignore_index": None if ignore is None else int(ignore)}


@onnx_op("NegativeLogLikelihoodLoss", since_version=12)
class NegativeLogLikelihoodLoss(OpImporter):
    """(input, target[, weight]) -> loss, through the NegativeLogLikelihoodLoss plugin."""

    def convert(self, ctx, node, inputs, attrs):
        return import_as_plugin(ctx, node, inputs, {}, _fields(attrs))


@onnx_op("SoftmaxCrossEntropyLoss", since_version=12)
class SoftmaxCrossEntropyLoss(OpImporter):
    """(scores, labels[, weights]) -> (loss[, log_prob]), through the SoftmaxCrossEntropyLoss plugin."""

    def convert(self, ctx, node, inputs, attrs):
        fields = _fields(attrs)
        fields["with_log_prob"] = len(node.output) > 1 and bool(node.output[1])
        outs = import_as_plugin(ctx, node, inputs, {}, fields)
        return list(outs) + [None] * (len(node.output) - len(outs))
