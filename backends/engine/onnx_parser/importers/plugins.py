"""Importers: ops served by plugins. Any op with a registered plugin imports as a Plugin layer."""
import numpy as np

from native.errors import ParseError


def import_as_plugin(ctx, node, inputs, attrs, extra_fields=None, drop=()):
    """Generic fallback: attributes become plugin fields (arrays become weights).

    `extra_fields` adds or overrides fields (what a dedicated importer in misc.py computed, e.g. a dtype name
    from an ONNX enum); `drop` names attributes not to pass on.
    """
    fields, weights = {}, {}
    for k, v in attrs.items():
        if k in drop:
            continue
        if isinstance(v, np.ndarray):
            weights[k] = v
        elif hasattr(v, "node"):  # a GraphProto
            raise ParseError(f"plugin op '{node.op_type}' has a graph attribute '{k}', which plugins cannot take")
        elif isinstance(v, list) and v and hasattr(v[0], "node"):
            raise ParseError(f"plugin op '{node.op_type}' has graph attributes '{k}', which plugins cannot take")
        else:
            fields[k] = v
    fields.update(extra_fields or {})
    layer = ctx.add_layer("Plugin", inputs, params={"plugin_type": node.op_type, "plugin_version": "1",
                                                    "fields": fields}, weights=weights,
                          num_outputs=len(node.output))
    return layer.outputs
