"""Op importers: one small class per ONNX op, registered by op type and the opset it appeared in.

An importer's `convert(ctx, node, inputs, attrs)` adds layers through `ctx.add_layer` and returns the tensors
for the node's outputs (None for an unused optional output). `inputs` are Tensors (None where the node left an
optional input empty); `attrs` are plain Python values with the schema's defaults left to the importer.
"""
from __future__ import annotations

from backends.engine.onnx_parser.importers.registry import _IMPORTERS, OpImporter, onnx_op  # noqa: F401

def find_importer(domain: str, op_type: str, opset: int):
    _load()
    domain = "" if domain in ("", "ai.onnx") else domain
    found = None
    for imp in _IMPORTERS.get((domain, op_type), []):
        if imp.since_version <= opset:
            found = imp
    if found is None and _IMPORTERS.get((domain, op_type)):
        found = _IMPORTERS[(domain, op_type)][0]
    return found


def supported_ops() -> list[str]:
    _load()
    return sorted(f"{d + '.' if d else ''}{op}" for d, op in _IMPORTERS)


_loaded = False


def _load():
    global _loaded
    if _loaded:
        return
    _loaded = True
    from backends.engine.onnx_parser.importers import (  # noqa: F401
        elementwise, reduce, nn, tensor, control, sequence, quantize, plugins, misc, losses, training)
