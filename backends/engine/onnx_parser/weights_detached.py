"""`weights_detached(model)`: a copy of the model for ONNX shape inference, without its large initializers' bytes.

ONNX shape inference serialises the whole model, parses it back and copies it again for its result: for a model
whose weights are tens of MiB that is most of a parse (and of a warm-cache rebuild). It needs every initializer's
type and dims, and the values only of the small integer tensors that feed shapes (data propagation); float weights
are never read. So it gets a skeleton: the graph's nodes, inputs, outputs and value infos, the opsets and local
functions, the small initializers as they are and the others (`min_elements` or more elements, not INT32/INT64)
with name, type and dims but no data. The caller's model is not touched."""
from __future__ import annotations

import math

import onnx

MIN_ELEMENTS = 4096   # shape tensors are a few int64s: anything this large is a weight


def weights_detached(model: onnx.ModelProto, min_elements: int = MIN_ELEMENTS) -> onnx.ModelProto:
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    src, g = model.graph, skel.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    for t in src.initializer:
        if t.data_type not in (6, 7) and math.prod(t.dims) >= min_elements:   # sized from dims: no data copied
            shell = g.initializer.add()
            shell.name, shell.data_type = t.name, t.data_type
            shell.dims.extend(t.dims)
        else:
            g.initializer.add().CopyFrom(t)
    return skel
