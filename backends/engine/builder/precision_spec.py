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
import re

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


class _Patterns:
    """Patterns compiled once: literal names in a dict (a search's precision file names every layer, so matching
    each layer against each pattern with fnmatch was quadratic), wildcards as regexes. `hits(node)` gives the
    indices of the patterns a node matches, in the order given (later wins): a node matches when its name or one of its ONNX nodes' names does."""

    def __init__(self, patterns):
        self.literal: dict = {}
        self.wild = []
        for i, p in enumerate(patterns):
            if any(c in p for c in "*?["):
                self.wild.append((i, re.compile(fnmatch.translate(p)).match))
            else:
                self.literal.setdefault(p, []).append(i)

    def hits(self, node) -> list:
        names = [node.name, *node.source_nodes]
        found = {i for n in names for i in self.literal.get(n, ())}
        found.update(i for i, match in self.wild if any(match(n) for n in names))
        return sorted(found)


def _check_known(graph, patterns, what, known=None):
    names = sorted(known if known is not None else
                   {n.name for n in graph.nodes} | {s for n in graph.nodes for s in n.source_nodes})
    known = set(names)
    for p in patterns:
        if p == "*" or p in known:
            continue
        if any(c in p for c in "*?[") and any(map(re.compile(fnmatch.translate(p)).match, names)):
            continue
        near = difflib.get_close_matches(p, names, n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(x) for x in near)}?" if near else \
            f"; layer and ONNX node names include {', '.join(repr(x) for x in names[:5])}..."
        raise UsageError(f"{what}: no layer or ONNX node is named {p!r}{hint}")


def apply_precision_spec(graph, config, known=None) -> int:
    """Set precision / output-type constraints on the lowered graph's nodes; returns how many nodes got one.
    known: the lowered graph's layer and ONNX names when `graph` has been folded since (Builder's reused prefix):
    names are checked against those, and layers that folding turned into constants take no constraint (applied
    before folding, theirs went with them)."""
    precisions = config.layer_precisions
    out_types = config.layer_output_types
    _check_known(graph, [p for p, _ in precisions], "--layer-precisions", known)
    _check_known(graph, [p for p, _ in out_types], "--layer-output-types", known)
    prec_patterns = _Patterns([p for p, _ in precisions])
    type_patterns = _Patterns([p for p, _ in out_types])
    touched = set()
    for node in graph.nodes:
        if known is not None and "folded_from" in node.meta:
            continue
        for i in prec_patterns.hits(node):
            node.meta["precision_constraint"] = precisions[i][1]
            touched.add(id(node))
        for i in type_patterns.hits(node):
            values = out_types[i][1]
            types = values if len(values) > 1 else values * max(1, len(node.outputs))
            node.meta["output_types"] = {i: t for i, t in enumerate(types[:len(node.outputs)])}
            touched.add(id(node))
    return len(touched)
