"""ONNX model helpers the runners share: load with clear errors, hash, list tensors that can be observed."""
from __future__ import annotations

import hashlib
import os

import onnx

from backends.engine.onnx_parser.parser import load_onnx  # noqa: F401  (one loader, one set of error messages)
from backends.runners.base import TensorMeta


def model_sha256(model) -> str:
    """sha256 of a model file (or of a ModelProto's serialisation)."""
    h = hashlib.sha256()
    if isinstance(model, onnx.ModelProto):
        h.update(model.SerializeToString())
    elif isinstance(model, (bytes, bytearray, memoryview)):
        h.update(bytes(model))
    else:
        with open(os.fspath(model), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def topological_nodes(graph: onnx.GraphProto) -> list:
    """The graph's nodes in a topological order (stable: keeps file order where it is already valid)."""
    produced = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    order = []
    while pending:
        rest = []
        for n in pending:
            if all(i in produced for i in n.input):
                order.append(n)
                produced.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):  # reads a tensor nobody produces (or a cycle): keep file order
            order.extend(rest)
            break
        pending = rest
    return order


def markable_onnx_tensors(model: onnx.ModelProto) -> list[str]:
    """Every tensor a node of the main graph produces (Constant nodes excluded), in topological order."""
    names, seen = [], set()
    for n in topological_nodes(model.graph):
        if n.op_type == "Constant":
            continue
        for o in n.output:
            if o and o not in seen:
                seen.add(o)
                names.append(o)
    return names


def onnx_input_metadata(model: onnx.ModelProto) -> dict:
    """{name: TensorMeta} for the graph inputs that are not initializers; dynamic dims as their dim_param or -1."""
    import numpy as np
    from onnx import helper
    inits = {i.name for i in model.graph.initializer}
    meta = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:
            dtype = np.dtype(np.float32)
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or -1) for d in tt.shape.dim)
        meta[vi.name] = TensorMeta(vi.name, dtype, shape)
    return meta


def output_names(model: onnx.ModelProto) -> list[str]:
    return [o.name for o in model.graph.output]
