"""Importers: ONNX sequences and optionals -> Sequence layers (`op` says which). Sequences are Python lists at
run time, an empty optional is None. SequenceMap is a Sequence layer with op MAP and subgraph 'body'."""
from __future__ import annotations

from backends.engine.dtypes import DataType
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op


def _seq(ctx, op, inputs, params=None, subgraphs=None, n=1):
    p = {"op": op}
    p.update(params or {})
    return ctx.add_layer("Sequence", list(inputs), p, subgraphs=subgraphs, num_outputs=n).outputs


@onnx_op("SequenceConstruct", 11)
class SequenceConstruct(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "CONSTRUCT", inputs)


@onnx_op("SequenceEmpty", 11)
class SequenceEmpty(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        dtype = DataType.from_onnx(attrs["dtype"]).value if "dtype" in attrs else "float32"
        return _seq(ctx, "EMPTY", [], {"dtype": dtype})


@onnx_op("SequenceAt", 11)
class SequenceAt(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "AT", inputs)


@onnx_op("SequenceInsert", 11)
class SequenceInsert(OpImporter):
    """Insert at position input 2 (default: the end); the input sequence is not modified."""

    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "INSERT", inputs)


@onnx_op("SequenceErase", 11)
class SequenceErase(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "ERASE", inputs)


@onnx_op("SequenceLength", 11)
class SequenceLength(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "LENGTH", inputs)


@onnx_op("SplitToSequence", 11)
class SplitToSequence(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "SPLIT_TO", inputs, {"axis": attrs.get("axis", 0), "keepdims": attrs.get("keepdims", 1)})


@onnx_op("ConcatFromSequence", 11)
class ConcatFromSequence(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "CONCAT_FROM", inputs, {"axis": attrs["axis"], "new_axis": attrs.get("new_axis", 0)})


@onnx_op("SequenceMap", 17)
class SequenceMap(OpImporter):
    """Run subgraph 'body' per element of the input sequence(s); tensor inputs are passed to every call."""

    def convert(self, ctx, node, inputs, attrs):
        body = ctx.import_subgraph(attrs["body"], f"{node.name or node.op_type}/body")
        return _seq(ctx, "MAP", inputs, subgraphs={"body": body}, n=len(node.output))


@onnx_op("Optional", 15)
class Optional(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "OPTIONAL", inputs[:1])


@onnx_op("OptionalHasElement", 15)
class OptionalHasElement(OpImporter):
    """bool scalar: False for an empty optional or an absent input, True otherwise."""

    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "HAS_ELEMENT", inputs[:1])


@onnx_op("OptionalGetElement", 15)
class OptionalGetElement(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return _seq(ctx, "GET_ELEMENT", inputs[:1])
