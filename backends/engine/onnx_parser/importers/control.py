"""Importers: control flow. If, Loop and Scan import their bodies as subnetworks (`layer.subgraphs`); bodies read
outer-scope tensors by name, which the executor supplies from the enclosing scope at run time."""
from __future__ import annotations

from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from native.errors import ParseError


def _label(node):
    return node.name or node.op_type


def _output_infos(sub):
    """dtype/shape of a body's outputs (used to shape empty scan outputs of zero-trip loops)."""
    return [{"dtype": t.dtype.value if t.dtype is not None else None,
             "shape": list(t.shape) if t.shape is not None else None} for t in sub.outputs]


@onnx_op("If")
class If(OpImporter):
    """IfConditional: input 0 is the bool condition; subgraphs 'then' and 'else'."""

    def convert(self, ctx, node, inputs, attrs):
        then = ctx.import_subgraph(attrs["then_branch"], f"{_label(node)}/then")
        other = ctx.import_subgraph(attrs["else_branch"], f"{_label(node)}/else")
        if len(then.outputs) != len(other.outputs):
            raise ParseError(f"If branches have {len(then.outputs)} and {len(other.outputs)} outputs")
        return ctx.add_layer("If", [inputs[0]], subgraphs={"then": then, "else": other},
                             num_outputs=len(node.output)).outputs


@onnx_op("Loop")
class Loop(OpImporter):
    """Loop: inputs max_trip_count (or None), cond (or None), loop-carried initial values; subgraph 'body'
    (iteration, cond, carried...) -> (cond, carried..., scan outputs...). Outputs: final carried values, then
    the scan outputs stacked along a new axis 0."""

    def convert(self, ctx, node, inputs, attrs):
        body = ctx.import_subgraph(attrs["body"], f"{_label(node)}/body")
        n_carried = len(inputs) - 2
        if len(body.inputs) != n_carried + 2:
            raise ParseError(f"Loop body takes {len(body.inputs)} inputs, expected {n_carried + 2}")
        params = {"num_carried": n_carried, "scan_outputs": _output_infos(body)[1 + n_carried:]}
        return ctx.add_layer("Loop", list(inputs), params, subgraphs={"body": body},
                             num_outputs=len(node.output)).outputs


@onnx_op("Scan", 8)
class Scan8(OpImporter):
    """Scan-8: input 0 optional sequence_lens, then states and scan inputs, all with a leading batch axis
    (scan axis 1); `directions`. Runs the body per batch entry."""

    def convert(self, ctx, node, inputs, attrs):
        body = ctx.import_subgraph(attrs["body"], f"{_label(node)}/body")
        m = attrs["num_scan_inputs"]
        params = {"num_scan_inputs": m, "scan_input_directions": list(attrs.get("directions", [0] * m)),
                  "batched": True}
        return ctx.add_layer("Scan", list(inputs), params, subgraphs={"body": body},
                             num_outputs=len(node.output)).outputs


@onnx_op("Scan", 9)
class Scan(OpImporter):
    """Scan-9+: states then `num_scan_inputs` scan inputs; scan_input/output_axes and _directions."""

    def convert(self, ctx, node, inputs, attrs):
        body = ctx.import_subgraph(attrs["body"], f"{_label(node)}/body")
        params = {"num_scan_inputs": attrs["num_scan_inputs"]}
        for k in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"):
            params[k] = list(attrs[k]) if k in attrs else None
        return ctx.add_layer("Scan", list(inputs), params, subgraphs={"body": body},
                             num_outputs=len(node.output)).outputs
