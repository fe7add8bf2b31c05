"""Input-shape overrides and ONNX shape inference written back into the model (symbolic dims kept).

Shape inference runs on a weightless proxy: large initializers become typed graph inputs, so inference
never serialises the weights (fast, and works for models over 2 GB).
"""
from __future__ import annotations

import re

import onnx

from debugkit.surgeon.graphutil import subgraphs
from native.errors import UsageError
from native.logger import G_LOGGER

PROXY_MIN_ELEMENTS = 4096  # initializers at least this big are replaced by typed inputs during inference


def parse_shape_spec(specs) -> dict:
    """`["x:[1,3,224,224]", "y:[batch,16]", "z:1x16"]` (or one string with spaces) -> {"x": [1,3,224,224], ...};
    the CLI's one shape syntax (debugkit.cli._args.parse_shape_list), with dim names allowed."""
    from debugkit.cli._args import parse_shape_list
    if isinstance(specs, str):
        specs = specs.split()
    return {k: list(v) for k, v in parse_shape_list(specs or [], what="shape", symbolic=True).items()}


def set_dims(tp, dims):
    """Write `dims` (ints; names or negatives for dynamic) into a TypeProto's tensor shape."""
    shape = tp.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int) and d >= 0:
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d


def override_input_shapes(model, shapes: dict):
    """Set the shapes of graph inputs; stale intermediate and output shapes are dropped for re-inference."""
    graph = model.graph
    by_name = {i.name: i for i in graph.input}
    unknown = [n for n in shapes if n not in by_name]
    if unknown:
        raise UsageError(f"--override-input-shapes names {unknown}, which are not graph inputs; inputs are "
                         f"{[i.name for i in graph.input]}")
    for name, dims in shapes.items():
        set_dims(by_name[name].type, dims)
    del graph.value_info[:]
    for out in graph.output:
        if out.type.WhichOneof("value") == "tensor_type":
            out.type.tensor_type.ClearField("shape")


def _proxy(model):
    """A copy of `model` without the weights: small initializers stay (shape inference may read their values),
    large ones become typed graph inputs. Nothing is serialised, so this is cheap and works past 2 GB."""
    proxy = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    proxy.opset_import.extend(model.opset_import)
    proxy.functions.extend(model.functions)
    src, g = model.graph, proxy.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    input_names = {i.name for i in src.input}
    for t in src.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n < PROXY_MIN_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in input_names:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return proxy


def infer_shapes(model, strict=False) -> bool:
    """Run ONNX shape inference (with data propagation) and write value_info, output types and body
    value_info back into `model`. Returns False (with a warning) if inference failed."""
    proxy = _proxy(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proxy, check_type=False, strict_mode=strict, data_prop=True)
    except Exception as e:
        G_LOGGER.warning(f"ONNX shape inference failed: {str(e).splitlines()[0][:300]}; continuing with the "
                         f"shapes the model declares")
        return False
    graph, ig = model.graph, inferred.graph
    known_inputs = {i.name for i in graph.input}
    inits = {t.name for t in graph.initializer}
    vis = [v for v in ig.value_info if v.name not in known_inputs and v.name not in inits]
    del graph.value_info[:]
    graph.value_info.extend(vis)
    outs = {o.name: o for o in ig.output}
    for o in graph.output:
        if o.name in outs:
            o.type.CopyFrom(_merge_type(o.type, outs[o.name].type))
    for node, inode in zip(graph.node, ig.node):
        for sub, isub in zip(subgraphs(node), subgraphs(inode)):
            _copy_body_info(sub, isub)
    return True


def _merge_type(declared, inferred):
    """Keep what the model declares; fill in what inference adds (unknown dims, missing shape)."""
    if declared.WhichOneof("value") != "tensor_type" or inferred.WhichOneof("value") != "tensor_type":
        return declared if declared.WhichOneof("value") else inferred
    out = onnx.TypeProto()
    out.CopyFrom(declared)
    dt, it = out.tensor_type, inferred.tensor_type
    if not dt.elem_type:
        dt.elem_type = it.elem_type
    if not dt.HasField("shape") and it.HasField("shape"):
        dt.shape.CopyFrom(it.shape)
    elif dt.HasField("shape") and it.HasField("shape") and len(dt.shape.dim) == len(it.shape.dim):
        for d, i in zip(dt.shape.dim, it.shape.dim):
            if not d.HasField("dim_value") and not d.dim_param:
                if i.HasField("dim_value"):
                    d.dim_value = i.dim_value
                elif i.dim_param:
                    d.dim_param = i.dim_param
    return out


def _copy_body_info(sub, isub):
    del sub.value_info[:]
    sub.value_info.extend(isub.value_info)
    for node, inode in zip(sub.node, isub.node):
        for s, i in zip(subgraphs(node), subgraphs(inode)):
            _copy_body_info(s, i)


def inconsistency(model):
    """Why ONNX's strict shape inference rejects the model's own shapes (e.g. a wrong inferred value_info fed
    to a later node), or None when they are consistent or only unknown ops stop it."""
    try:
        onnx.shape_inference.infer_shapes(_proxy(model), check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        if "No Op registered" in msg or "is not a registered function/op" in msg or "Unsupported" in msg:
            return None
        return msg
    return None


def drop_inconsistent_value_info(model) -> bool:
    """Remove intermediate value_info when it contradicts itself, so ONNX Runtime can still load the model."""
    reason = inconsistency(model)
    if reason is None:
        return False
    G_LOGGER.warning(f"ONNX shape inference gives inconsistent intermediate shapes ({reason}); not writing "
                     f"intermediate shapes (value_info) into the output model")
    del model.graph.value_info[:]
    return True
