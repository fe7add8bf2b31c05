"""The ONNX parser: walks a model's graph and asks each node's importer to add layers to a NetworkDefinition.

Errors are collected, not raised: every node that cannot be imported is reported with its name, op type and
the reason, and parsing continues so the user sees all of them at once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from backends.engine.dtypes import DataType
from backends.engine.network import NetworkDefinition, Tensor
from backends.engine.onnx_parser.importers import find_importer
from backends.engine.onnx_parser.validate import (check_model, data_prop_safe, negative_dims_unknown,
                                                  oversized_tensors, validate_model)
from backends.engine.onnx_parser.weights_detached import weights_detached
from native.errors import DebugkitError, InputFileError, ModelError, ParseError
from native.logger import G_LOGGER


# the newest ai.onnx opset and IR version whose changes the importers implement (onnx 1.23.2's)
MAX_OPSET = 28
MAX_IR_VERSION = 14


@dataclass
class ParserError:
    node: str
    op_type: str
    reason: str
    index: int = -1

    def __str__(self):
        return f"node '{self.node}' ({self.op_type}): {self.reason}"


def load_onnx(model, load_external_data=True, validate=True) -> onnx.ModelProto:
    """Accept a path, bytes or ModelProto; raise InputFileError/ModelError that name the problem, and (validate)
    ParseError naming node, attribute and value when the model would crash or exhaust what reads it next."""
    proto = _load(model, load_external_data)
    if validate:
        what = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "model"
        check_model(proto, what)
    return proto


def _load(model, load_external_data) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise ModelError(f"the given bytes are not an ONNX model: {e}") from None
    path = os.fspath(model)
    if not os.path.exists(path):
        raise InputFileError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise InputFileError(f"model path is a directory, not an ONNX file: {path}")
    try:
        proto = onnx.load(path, load_external_data=load_external_data)
    except Exception as e:
        raise ModelError(f"{path} is not a readable ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"{path} holds no ONNX graph (is it an ONNX file?)")
    return proto


def _value_info_type(vi):
    """(dtype, shape, dim_names, kind) from a ValueInfoProto; unknowns as None / -1."""
    t = vi.type
    which = t.WhichOneof("value")
    if which == "sequence_type":
        return None, None, {}, "sequence"
    if which == "optional_type":
        return None, None, {}, "optional"
    if which != "tensor_type":
        return None, None, {}, "tensor"
    tt = t.tensor_type
    dtype = None
    if tt.elem_type:
        try:
            dtype = DataType.from_onnx(tt.elem_type)
        except Exception:
            dtype = None
    if not tt.HasField("shape"):
        return dtype, None, {}, "tensor"
    shape, names = [], {}
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        else:
            shape.append(-1)
            if d.dim_param:
                names[i] = d.dim_param
    return dtype, tuple(shape), names, "tensor"


def attributes(node) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        out[a.name] = v
    return out


class ImportContext:
    """What an importer sees: the network, name lookup, constants, and layer creation tagged with the node."""

    def __init__(self, network: NetworkDefinition, opsets: dict, value_types: dict, parent=None, base_dir=None,
                 inferred=None):
        """inferred: the shape-inferred copy of the graph being imported (node for node), whose bodies carry the
        inferred types of the tensors inside If / Loop / Scan bodies; None when inference did not run."""
        self.network = network
        self.inferred = inferred
        self.opsets = opsets
        self.value_types = value_types
        self.parent = parent
        self.base_dir = base_dir
        self.names: dict[str, Tensor] = {}
        self.bound: set[int] = set()  # ids of tensors already bound to an ONNX name
        self.node = None
        self._node_layers = []

    @property
    def opset(self) -> int:
        return self.opsets.get("", 1)

    # lookup ------------------------------------------------------------------------------------------
    def lookup(self, name):
        if name == "":
            return None
        if name in self.names:
            return self.names[name]
        if self.parent is not None:
            t = self.parent.lookup(name)
            if t is not None:
                return t
        raise KeyError(name)

    def constant_value(self, tensor):
        """The numpy value of a tensor produced by a Constant layer, else None."""
        if tensor is None or tensor.producer is None or tensor.producer.kind != "Constant":
            return None
        return tensor.producer.weights["value"]

    # creation ----------------------------------------------------------------------------------------
    def add_layer(self, kind, inputs, params=None, weights=None, num_outputs=None, subgraphs=None, suffix=None):
        node = self.node
        base = (node.name or node.op_type) if node is not None else kind
        name = base if not self._node_layers else f"{base}/{suffix or kind}_{len(self._node_layers)}"
        layer = self.network.add_layer(kind, inputs, params=params, weights=weights, name=name,
                                       num_outputs=num_outputs, subgraphs=subgraphs)
        if node is not None:
            layer.source_nodes = [node.name or f"{node.op_type}_{self._node_index}"]
        self._node_layers.append(layer)
        return layer

    def constant(self, value, name=None) -> Tensor:
        arr = np.asarray(value)
        layer = self.network.add_layer("Constant", [], params={"shape": list(arr.shape)}, weights={"value": arr},
                                       name=self.network.unique_name(name or f"const_{len(self.network.layers)}"))
        if self.node is not None:
            layer.source_nodes = [self.node.name or self.node.op_type]
        out = layer.outputs[0]
        out.dtype, out.shape = DataType.from_numpy(arr.dtype), arr.shape
        return out

    def import_subgraph(self, graph: onnx.GraphProto, name: str) -> NetworkDefinition:
        """Import a body graph (If branch, Loop/Scan body); names it does not define resolve in outer scopes."""
        sub = NetworkDefinition(name)
        types = dict(self.value_types)
        inferred = self._inferred_body(graph)
        types.update(collect_value_types(inferred if inferred is not None else graph))
        ctx = ImportContext(sub, self.opsets, types, parent=self, base_dir=self.base_dir, inferred=inferred)
        errors = import_graph(ctx, graph, subgraph=True)
        if errors:
            raise ParseError(f"subgraph '{name}' failed to import: " + "; ".join(map(str, errors)), errors)
        return sub


    def _inferred_body(self, graph):
        """The shape-inferred copy of `graph`, a body of the node being imported (ranks and types of the body's
        tensors: the fusions and the Squeeze / Unsqueeze importers need them), or None."""
        if self.inferred is None or self.node is None:
            return None
        nodes, i = self.inferred.node, getattr(self, "_node_index", -1)
        if not 0 <= i < len(nodes) or nodes[i].op_type != self.node.op_type:
            return None
        for a, b in zip(self.node.attribute, nodes[i].attribute):
            if a.type == onnx.AttributeProto.GRAPH and a.name == b.name and (a.g is graph or a.g == graph):
                return b.g
        return None


def collect_value_types(graph) -> dict:
    types = {}
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        types[vi.name] = _value_info_type(vi)
    return types


def _bind(ctx, onnx_name, tensor, node_layers):
    """Give the ONNX name to the tensor an importer returned (or alias it if it is not ours to rename)."""
    network = ctx.network
    ours = tensor.producer is not None and any(tensor.producer is l for l in node_layers) \
        and not tensor.is_network_input and id(tensor) not in ctx.bound
    if ours and onnx_name not in network.tensors:
        network.rename_tensor(tensor, onnx_name)
    elif tensor.name != onnx_name:
        network.aliases[onnx_name] = tensor.name
    ctx.names[onnx_name] = tensor
    ctx.bound.add(id(tensor))
    dtype, shape, dim_names, kind = ctx.value_types.get(onnx_name, (None, None, {}, "tensor"))
    if dtype is not None and tensor.dtype is None:
        tensor.dtype = dtype
    if shape is not None and tensor.shape is None:
        tensor.shape, tensor.dim_names = shape, dict(dim_names)
    tensor.kind = kind


def changed_after_max_opset(domain: str, op_type: str, opset: int) -> str | None:
    """Why a node of an ai.onnx opset newer than MAX_OPSET cannot import (None when it can): the installed onnx
    says its op was defined or redefined after MAX_OPSET. Ops it does not know go on to the importers and plugins
    (whose error names op and opset too); where the installed onnx predates the opset, ops import with their
    MAX_OPSET meaning (the parser warns once)."""
    if domain or opset <= MAX_OPSET:
        return None
    try:
        since = onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:
        return None
    if since <= MAX_OPSET:
        return None
    return (f"unsupported op '{op_type}' of ai.onnx opset {opset}: its opset-{since} definition is newer than the "
            f"newest we implement (opset {MAX_OPSET})")


def import_graph(ctx: ImportContext, graph: onnx.GraphProto, subgraph=False) -> list:
    network = ctx.network
    errors: list[ParserError] = []
    init_names = set()
    for init in graph.initializer:
        init_names.add(init.name)
        try:
            arr = numpy_helper.to_array(init, base_dir=ctx.base_dir or "")
        except Exception as e:
            errors.append(ParserError(init.name, "initializer", f"cannot read weights: {e}"))
            continue
        layer = network.add_layer("Constant", [], params={"shape": list(arr.shape)}, weights={"value": arr},
                                  name=init.name)
        network.rename_tensor(layer.outputs[0], init.name) if init.name not in network.tensors else None
        out = layer.outputs[0]
        out.dtype, out.shape = DataType.from_numpy(arr.dtype), arr.shape
        ctx.names[init.name] = out
    for sp in graph.sparse_initializer:
        arr = numpy_helper.to_array(sp.values)
        dense = np.zeros(tuple(sp.dims), dtype=arr.dtype)
        idx = numpy_helper.to_array(sp.indices)
        if idx.ndim == 1:
            dense.reshape(-1)[idx] = arr
        else:
            dense[tuple(idx.T)] = arr
        ctx.names[sp.values.name] = ctx.constant(dense, sp.values.name)
        init_names.add(sp.values.name)
    for vi in graph.input:
        if vi.name in init_names:
            continue
        dtype, shape, dim_names, kind = _value_info_type(vi)
        t = network.add_input(vi.name, dtype, shape)
        t.dim_names = dict(dim_names)
        t.kind = kind
        ctx.names[vi.name] = t
    for index, node in enumerate(graph.node):
        ctx.node, ctx._node_index, ctx._node_layers = node, index, []
        label = node.name or f"{node.op_type}_{index}"
        try:
            inputs = [ctx.lookup(n) for n in node.input]
        except KeyError as e:
            errors.append(ParserError(label, node.op_type, f"input '{e.args[0]}' is not produced by any earlier node, "
                                      f"initializer or graph input", index))
            continue
        domain = node.domain if node.domain not in ("ai.onnx",) else ""
        opset = ctx.opsets.get(domain, ctx.opset)
        newer = changed_after_max_opset(domain, node.op_type, opset)
        if newer:
            errors.append(ParserError(label, node.op_type, newer, index))
            continue
        importer = find_importer(domain, node.op_type, opset)
        if importer is None:
            from native.plugins import find_plugin
            if find_plugin(node.op_type) is not None:
                from backends.engine.onnx_parser.importers.plugins import import_as_plugin
                importer = import_as_plugin
            else:
                dom = f" in domain '{node.domain}'" if node.domain else ""
                errors.append(ParserError(label, node.op_type, f"unsupported op '{node.op_type}'{dom} (opset {opset}): "
                                          f"no importer and no plugin registered for it; register a Python plugin "
                                          f"with native.plugins.register_plugin('{node.op_type}', ...)", index))
                continue
        try:
            attrs = attributes(node)
            convert = importer if callable(importer) and not hasattr(importer, "convert") else importer.convert
            outs = convert(ctx, node, inputs, attrs)
        except ParseError as e:
            errors.extend(e.errors or [ParserError(label, node.op_type, str(e), index)])
            continue
        except DebugkitError as e:
            errors.append(ParserError(label, node.op_type, str(e), index))
            continue
        except Exception as e:
            errors.append(ParserError(label, node.op_type, f"importer failed: {type(e).__name__}: {e}", index))
            continue
        outs = list(outs) if outs is not None else []
        for i, onnx_name in enumerate(node.output):
            if onnx_name == "" or i >= len(outs) or outs[i] is None:
                continue
            _bind(ctx, onnx_name, outs[i], ctx._node_layers)
    ctx.node = None
    for vi in graph.output:
        try:
            t = ctx.lookup(vi.name)
        except KeyError:
            errors.append(ParserError(vi.name, "output", f"graph output '{vi.name}' is never produced"))
            continue
        if t is None:
            continue
        foreign = network.tensors.get(t.name) is not t  # a subgraph output read from an outer scope
        if t.name != vi.name or t in network.outputs or foreign:
            # outputs need a tensor of their own name: a pass-through gets an Identity layer
            layer = network.add_layer("Identity", [t], name=f"{vi.name}/identity")
            if vi.name not in network.tensors and not foreign:  # an outer name inside a body would shadow itself
                network.rename_tensor(layer.outputs[0], vi.name)
            layer.outputs[0].dtype, layer.outputs[0].shape = t.dtype, t.shape
            network.aliases.pop(vi.name, None)
            t = layer.outputs[0]
        dtype, shape, dim_names, kind = _value_info_type(vi)
        t.dtype = t.dtype or dtype
        if shape is not None:
            t.shape, t.dim_names = shape, dict(dim_names)
        t.kind = kind
        network.mark_output(t)
    return errors


class OnnxParser:
    """TensorRT's IParser: `parse(model)` fills the network; `errors` names node, op type and reason."""

    def __init__(self, network: NetworkDefinition, logger=None):
        self.network = network
        self.logger = logger or G_LOGGER
        self.errors: list[ParserError] = []
        self.model: onnx.ModelProto | None = None

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, i):
        return self.errors[i]

    def clear_errors(self):
        self.errors = []

    def parse_from_file(self, path) -> bool:
        return self.parse(path)

    def parse(self, model, base_dir=None) -> bool:
        if isinstance(model, (str, os.PathLike)):
            base_dir = base_dir or os.path.dirname(os.path.abspath(os.fspath(model)))
        proto = load_onnx(model, validate=False)
        self.model = proto
        problems = validate_model(proto)  # before shape inference: it trusts the model and can crash the process
        if problems:
            self.errors.extend(ParserError(p.node, p.op_type, p.detail) for p in problems)
            for err in self.errors:
                self.logger.error(f"ONNX parser: {err}")
            return False
        opsets = {}
        for imp in proto.opset_import:
            opsets["" if imp.domain in ("", "ai.onnx") else imp.domain] = imp.version
        opsets.setdefault("", 1)
        if proto.ir_version > MAX_IR_VERSION:
            self.logger.warning(f"IR version {proto.ir_version} is newer than the newest we read ({MAX_IR_VERSION}): "
                                f"parsing it as IR {MAX_IR_VERSION}")
        if opsets[""] > MAX_OPSET:
            self.logger.warning(f"ai.onnx opset {opsets['']} is newer than the newest we implement ({MAX_OPSET}): "
                                f"ops that did not change after opset {MAX_OPSET} import as usual, the others are "
                                f"reported by name")
        types, inferred = {}, None
        try:
            skel = weights_detached(proto)   # inference reads no weight values: a copy without their bytes
            with negative_dims_unknown(skel):
                inferred = onnx.shape_inference.infer_shapes(skel, data_prop=data_prop_safe(proto)) \
                    if skel.ByteSize() < 2**31 - 2**20 else skel
            types = collect_value_types(inferred.graph)
        except Exception as e:  # shape inference is an aid, not a requirement
            self.logger.verbose(f"ONNX shape inference failed ({e}); continuing without inferred shapes")
            types, inferred = collect_value_types(proto.graph), None
        self.network.name = proto.graph.name or self.network.name
        ctx = ImportContext(self.network, opsets, types, base_dir=base_dir,
                            inferred=inferred.graph if inferred is not None and inferred is not skel else None)
        self.errors.extend(import_graph(ctx, proto.graph))
        if not self.errors:
            self.errors.extend(ParserError(p.node, p.op_type, p.detail) for p in oversized_tensors(self.network))
        for err in self.errors:
            self.logger.error(f"ONNX parser: {err}")
        if not self.errors:
            self.logger.info(f"parsed ONNX graph '{self.network.name}': {len(self.network.layers)} layers, "
                             f"{len(self.network.inputs)} inputs, {len(self.network.outputs)} outputs")
        return not self.errors

    def raise_if_failed(self, what="model"):
        if self.errors:
            unsupported = [e for e in self.errors if e.reason.startswith("unsupported op")]
            cls = __import__("native.errors", fromlist=["UnsupportedOpError"]).UnsupportedOpError if unsupported else ParseError
            if len(self.errors) == 1:  # the CLI prints the first line: let it name the node
                raise cls(f"failed to parse {what}: {self.errors[0]}", self.errors)
            lines = "\n  ".join(map(str, self.errors[:20]))
            more = f"\n  ... and {len(self.errors) - 20} more" if len(self.errors) > 20 else ""
            raise cls(f"failed to parse {what}: {len(self.errors)} error(s), first {self.errors[0]}:\n  {lines}{more}",
                      self.errors)
