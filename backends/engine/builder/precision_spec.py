"""Per-layer precision and output-type constraints given by name (trtexec's --layerPrecisions / --layerOutputTypes).

Syntax: `NAME:PREC,NAME:PREC,...`; NAME is one of our layer names or an ONNX node name, with fnmatch wildcards
(`*` alone is the default for every layer); specs apply left to right and a later match wins. Output types take
one type per output joined by `+` (`conv1:fp32+fp16`). A JSON file holding `{"NAME": "fp16", ...}` (or that
mapping under "layer_precisions", as `debugkit debug precision` writes it) is accepted wherever a spec is.

The constraints are applied to the builder's graph right after lowering, before fusion (which never fuses layers
whose constraints differ), as `layer.precision` / `layer.set_output_type` would be.
"""
from __future__ import annotations

import difflib
import fnmatch

from native.errors import UsageError
from native.files import read_side_json
from native.precision import Precision

def precision_value(text: str, what: str) -> str:
    """The storage type (DataType value) a spelling names, for output types: fp8 is stored float8_e4m3fn."""
    p = Precision.parse(text, what)
    return "float8_e4m3fn" if p is Precision.FP8 else p.value


def _pairs(spec, what):
    """[(pattern, value text)] from 'a:fp16,b:fp32' strings (several allowed), a JSON file or a dict."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        return list(spec.items())
    if isinstance(spec, str):
        spec = [spec]
    pairs = []
    for item in spec:
        if isinstance(item, (tuple, list)):
            pairs.append(tuple(item))
            continue
        item = str(item)
        if item.lower().endswith(".json"):
            pairs += _from_json(item, what)
            continue
        for part in filter(None, (p.strip() for p in item.split(","))):
            name, sep, value = part.rpartition(":")
            if not sep or not name:
                raise UsageError(f"{what}: {part!r} is not NAME:PRECISION (e.g. '*:fp16,conv1:fp32')")
            pairs.append((name, value))
    return pairs


def _from_json(path, what):
    data = read_side_json(path, f"{what} file", limit=64 << 20, error=UsageError)
    if isinstance(data, dict) and isinstance(data.get("layer_precisions"), dict):
        data = data["layer_precisions"]
    if not isinstance(data, dict) or not all(isinstance(v, (str, list)) for v in data.values()):
        raise UsageError(f"{what}: {path} must hold {{\"NAME\": \"fp16\", ...}} or {{\"layer_precisions\": {{...}}}}")
    return list(data.items())


def parse_layer_precisions(spec) -> list:
    """[(pattern, Precision)] in the order given."""
    return [(name, Precision.parse(v, "--layer-precisions")) for name, v in _pairs(spec, "--layer-precisions")]


def parse_layer_output_types(spec) -> list:
    """[(pattern, [DataType value per output])] in the order given."""
    out = []
    for name, v in _pairs(spec, "--layer-output-types"):
        vals = v if isinstance(v, list) else str(v).split("+")
        out.append((name, [precision_value(x, "--layer-output-types") for x in vals]))
    return out


def _matches(node, pattern) -> bool:
    names = [node.name] + list(node.source_nodes)
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


def _check_known(graph, patterns, what):
    names = sorted({n.name for n in graph.nodes} | {s for n in graph.nodes for s in n.source_nodes})
    for p in patterns:
        if p == "*" or any(_matches(n, p) for n in graph.nodes):
            continue
        near = difflib.get_close_matches(p, names, n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(x) for x in near)}?" if near else \
            f"; layer and ONNX node names include {', '.join(repr(x) for x in names[:5])}..."
        raise UsageError(f"{what}: no layer or ONNX node is named {p!r}{hint}")


def apply_precision_spec(graph, config) -> int:
    """Set precision / output-type constraints on the lowered graph's nodes; returns how many nodes got one."""
    precisions = config.layer_precisions
    out_types = config.layer_output_types
    _check_known(graph, [p for p, _ in precisions], "--layer-precisions")
    _check_known(graph, [p for p, _ in out_types], "--layer-output-types")
    touched = set()
    for node in graph.nodes:
        for pattern, value in precisions:
            if _matches(node, pattern):
                node.meta["precision_constraint"] = value
                touched.add(id(node))
        for pattern, values in out_types:
            if _matches(node, pattern):
                types = values if len(values) > 1 else values * max(1, len(node.outputs))
                node.meta["output_types"] = {i: t for i, t in enumerate(types[:len(node.outputs)])}
                touched.add(id(node))
    return len(touched)
