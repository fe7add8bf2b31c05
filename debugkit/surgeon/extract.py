"""Cut the subgraph between named tensors (`surgeon extract`); 'auto' shapes and dtypes come from shape inference."""
from __future__ import annotations

import re

import numpy as np
import onnx

from debugkit.surgeon.cleanup import cleanup_graph
from debugkit.surgeon.graphutil import node_reads, producers, tensor_types
from debugkit.surgeon.shapes import infer_shapes, override_input_shapes, set_dims
from native.errors import UsageError
from native.logger import G_LOGGER

AUTO = "auto"


def _dtype(text):
    if text == AUTO:
        return AUTO
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(text))
    except Exception:
        raise UsageError(f"unknown dtype '{text}' (use numpy names such as float32, int64, or auto)") from None


def _shape(text):
    if text == AUTO:
        return AUTO
    from debugkit.cli._args import parse_dims
    return list(parse_dims(text, what="--inputs", symbolic=True))


def parse_input_specs(specs):
    """`name:shape:dtype`, `name:auto:auto`, `name:auto` or `name` -> {name: (shape|auto, dtype|auto)}."""
    if specs is None:
        return None
    out = {}
    for spec in specs:
        # the shape may contain ':'-free brackets; split from the right
        parts = spec.rsplit(":", 2)
        if len(parts) == 3 and (parts[1].startswith("[") or parts[1] == AUTO or re.fullmatch(r"\d+(x\d+)*", parts[1])):
            name, shape, dtype = parts
        elif len(parts) >= 2 and parts[-1] == AUTO:
            name, shape, dtype = spec[: -len(":auto")], AUTO, AUTO
        else:
            name, shape, dtype = spec, AUTO, AUTO
        out[name] = (_shape(shape), _dtype(dtype))
    return out


def parse_output_specs(specs):
    """`name:dtype`, `name:auto` or `name` -> {name: dtype|auto}."""
    if specs is None:
        return None
    out = {}
    for spec in specs:
        name, _, dtype = spec.rpartition(":")
        if not name or (dtype != AUTO and not _is_dtype(dtype)):
            name, dtype = spec, AUTO
        out[name] = _dtype(dtype)
    return out


def _is_dtype(text):
    try:
        np.dtype(text)
        return True
    except Exception:
        return False


def extract_model(model, inputs: dict | None, outputs: dict | None, model_input_shapes: dict | None = None):
    """A new model holding the nodes between `inputs` and `outputs` (None: keep the model's own)."""
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    model = model_copy
    graph = model.graph
    inputs = inputs if inputs is not None else {i.name: (AUTO, AUTO) for i in graph.input
                                                if i.name not in {t.name for t in graph.initializer}}
    outputs = outputs if outputs is not None else {o.name: AUTO for o in graph.output}
    need_auto = any(s == AUTO or d == AUTO for s, d in inputs.values()) or any(d == AUTO for d in outputs.values())
    if model_input_shapes:
        override_input_shapes(model, model_input_shapes)
    if need_auto:
        G_LOGGER.info("Running shape inference to derive shapes and/or data types for 'auto' arguments")
        infer_shapes(model)
    types = tensor_types(graph)
    inits = {t.name: t for t in graph.initializer}
    prod = producers(graph)
    known = set(prod) | {i.name for i in graph.input} | set(inits)
    missing = [n for n in list(inputs) + list(outputs) if n not in known]
    if missing:
        raise UsageError(f"tensors {missing} are not in the model (no node, input or initializer has that name)")

    # walk back from the outputs, stopping at the new inputs
    stop = set(inputs)
    keep, seen, stack = set(), set(), [n for n in outputs if n not in stop]
    extra_inputs = []
    while stack:
        name = stack.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        node = prod.get(name)
        if node is None:
            if name not in inits:
                extra_inputs.append(name)
            continue
        if id(node) in keep:
            continue
        keep.add(id(node))
        stack.extend(node_reads(node))
    if extra_inputs:
        G_LOGGER.warning(f"the subgraph also reads model inputs {sorted(extra_inputs)}, which stay inputs")
    new_inputs = []
    for name, (shape, dtype) in list(inputs.items()) + [(n, (AUTO, AUTO)) for n in sorted(extra_inputs)]:
        new_inputs.append(_value_info(name, shape, dtype, types, inits, "input"))
    new_outputs = [_value_info(name, AUTO, dtype, types, inits, "output", allow_unknown_shape=True)
                   for name, dtype in outputs.items()]
    nodes = [n for n in graph.node if id(n) in keep]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.input[:]
    graph.input.extend(new_inputs)
    del graph.output[:]
    graph.output.extend(new_outputs)
    # an initializer that became an input must not stay an initializer
    inits_kept = [t for t in graph.initializer if t.name not in inputs]
    del graph.initializer[:]
    graph.initializer.extend(inits_kept)
    cleanup_graph(graph, remove_unused_inputs=False)
    return model


def _value_info(name, shape, dtype, types, inits, what, allow_unknown_shape=False):
    tp = types.get(name)
    if name in inits:
        tp = onnx.helper.make_tensor_type_proto(inits[name].data_type, list(inits[name].dims))
    if dtype == AUTO:
        dtype = tp.tensor_type.elem_type if tp is not None and tp.WhichOneof("value") == "tensor_type" else 0
        if not dtype:
            raise UsageError(f"cannot infer the dtype of {what} '{name}'; give it as {name}:<shape>:<dtype>")
    vi = onnx.helper.make_tensor_value_info(name, dtype, None)
    if shape == AUTO:
        if tp is not None and tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.CopyFrom(tp.tensor_type.shape)
        elif not allow_unknown_shape:
            raise UsageError(f"cannot infer the shape of {what} '{name}'; give it as {name}:[d0,d1,...]:<dtype> "
                             f"or pass --model-input-shapes")
    else:
        set_dims(vi.type, shape)
    return vi
