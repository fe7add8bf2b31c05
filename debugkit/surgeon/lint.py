"""`debugkit check lint`: find what is wrong with an ONNX model, node by node, and name the node every time.

Checks: the ONNX checker (model level), an empty graph, duplicate node names, tensors produced twice, node inputs
nobody produces, graph outputs nobody produces, unknown ops (not in the ONNX schema for the model's opset, not a
model-local function, no debugkit importer or plugin), and per-node strict shape/type inference (type mismatches,
incompatible dimensions, declared shapes that contradict inferred ones). Warnings: graph inputs and nodes that do
not affect any output. Nodes downstream of a failing node are still checked with what is known.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import onnx

from debugkit.surgeon.graphutil import node_label, node_reads, outer_references, subgraphs, tensor_types
from debugkit.surgeon.shapes import infer_shapes

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass
class LintEntry:
    level: str
    source: str
    message: str
    nodes: list = field(default_factory=list)

    def __str__(self):
        where = f"Name: {', '.join(self.nodes)} | " if self.nodes else ""
        return f"{where}{self.message}"


@dataclass
class LintReport:
    entries: list = field(default_factory=list)
    passing: list = field(default_factory=list)
    failing: list = field(default_factory=list)

    @property
    def errors(self):
        return [e for e in self.entries if e.level == ERROR]

    def to_json(self):
        return {"summary": {"passing": self.passing, "failing": self.failing},
                "lint_entries": [asdict(e) for e in self.entries]}


def _first_line(e):
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return type(e).__name__


def lint_model(model, check_importers=True) -> LintReport:
    report = LintReport()
    add = report.entries.append
    graph = model.graph
    from backends.engine.onnx_parser.validate import validate_model
    unsafe = validate_model(model)  # what would crash ONNX's shape inference (run below) is reported instead
    if unsafe:
        for p in unsafe:
            add(LintEntry(ERROR, "validate", str(p), [p.node]))
        report.failing = list(dict.fromkeys(p.node for p in unsafe))
        report.passing = [node_label(n, i) for i, n in enumerate(graph.node) if node_label(n, i) not in
                          report.failing]
        return report
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        add(LintEntry(ERROR, "onnx_checker", _first_line(e)))
    if not graph.node:
        add(LintEntry(ERROR, "graph", "the graph has no nodes"))
    if not graph.output:
        add(LintEntry(ERROR, "graph", "the graph has no outputs"))
    failing = set()
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    functions = {(f.domain, f.name) for f in model.functions}
    _lint_graph(model, graph, opsets, functions, set(), report, failing, top=True, check_importers=check_importers)
    _strict_inference(model, report, failing)
    labels = [node_label(n, i) for i, n in enumerate(graph.node)]
    report.failing = list(dict.fromkeys(lab for lab in labels if lab in failing))
    report.passing = list(dict.fromkeys(lab for lab in labels if lab not in failing))
    return report


def _lint_graph(model, graph, opsets, functions, outer: set, report, failing, top, check_importers):
    add = report.entries.append
    names = {}
    for i, node in enumerate(graph.node):
        if node.name:
            names.setdefault(node.name, []).append(i)
    for name, idx in names.items():
        if len(idx) > 1:
            add(LintEntry(ERROR, "graph", f"{len(idx)} nodes share the name '{name}'", [name]))
            failing.add(name)
    defined = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    produced_by = {}
    all_outputs = {o for n in graph.node for o in n.output if o}
    for i, node in enumerate(graph.node):
        label = node_label(node, i)
        for o in node.output:
            if not o:
                continue
            if o in produced_by or o in {x.name for x in graph.input}:
                other = produced_by.get(o, "a graph input")
                add(LintEntry(ERROR, "graph", f"tensor '{o}' is produced twice (also by {other})", [label]))
                failing.add(label)
            produced_by[o] = label
        for inp in node.input:
            if inp and inp not in defined:
                where = "a later node (the graph is not sorted)" if inp in all_outputs else "no node, input or initializer"
                add(LintEntry(ERROR, "graph", f"input '{inp}' of {node.op_type} is produced by {where}", [label]))
                failing.add(label)
        for sub in subgraphs(node):
            for ref in sorted(outer_references(sub) - defined - {o.name for o in sub.output}):
                add(LintEntry(ERROR, "graph", f"body '{sub.name}' reads '{ref}', which nothing defines", [label]))
                failing.add(label)
            _lint_graph(model, sub, opsets, functions, defined | set(node.output), report, failing, False,
                        check_importers)
        defined.update(o for o in node.output if o)
        _check_op(node, label, opsets, functions, report, failing, check_importers)
    for o in graph.output:
        if o.name not in defined:
            add(LintEntry(ERROR, "graph", f"graph output '{o.name}' is not produced by any node, input or initializer"))
    if top:
        live = {o.name for o in graph.output}
        for node in reversed(graph.node):
            if any(o in live for o in node.output):
                live.update(node_reads(node))
        inits = {t.name for t in graph.initializer}
        for i in graph.input:
            if i.name not in live and i.name not in inits:
                add(LintEntry(WARNING, "graph", f"input '{i.name}' does not affect the outputs and can be removed"))
        dead = [node_label(n, i) for i, n in enumerate(graph.node) if not any(o in live for o in n.output)]
        if dead:
            add(LintEntry(WARNING, "graph", f"{len(dead)} node(s) do not affect the outputs and can be removed "
                                            f"(debugkit surgeon sanitize --cleanup)", dead[:50]))


def _check_op(node, label, opsets, functions, report, failing, check_importers):
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if (domain, node.op_type) in functions:
        return
    version = opsets.get(domain)
    if version is None:
        report.entries.append(LintEntry(ERROR, "graph", f"domain '{node.domain}' of op {node.op_type} is not "
                                                        f"imported by the model (opset_import)", [label]))
        failing.add(label)
        return
    known = True
    try:
        onnx.defs.get_schema(node.op_type, version, domain)
    except Exception:
        known = False
    if check_importers:
        from backends.engine.onnx_parser.importers import find_importer
        from native.plugins import find_plugin
        supported = find_importer(domain, node.op_type, version) is not None or find_plugin(node.op_type) is not None
    else:
        supported = True
    if not known and not supported:
        report.entries.append(LintEntry(ERROR, "onnx_schema", f"unknown op '{node.op_type}'"
                                        f"{' in domain ' + repr(node.domain) if node.domain else ''} (opset {version}):"
                                        f" not an ONNX op, not a model function, no debugkit importer or plugin",
                                        [label]))
        failing.add(label)
    elif not supported:
        report.entries.append(LintEntry(WARNING, "debugkit", f"op '{node.op_type}' has no debugkit importer or "
                                                             f"plugin yet: the engine cannot build this model",
                                        [label]))


def _strict_inference(model, report, failing):
    """Infer the whole graph leniently, then re-infer each node alone, strictly, with its input types."""
    probe = _weightless(model)  # never serialises weights
    declared = {v.name: v for v in list(model.graph.value_info) + list(model.graph.output)}
    infer_shapes(probe)
    graph = probe.graph
    types = tensor_types(graph)
    for t in graph.initializer:
        types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    small = {t.name: t for t in graph.initializer if _numel(t) <= 64}
    for i, node in enumerate(graph.node):
        label = node_label(node, i)
        if subgraphs(node):
            continue  # bodies see outer names; the whole-graph pass covers them
        if any(n and types.get(n) is None for n in node.input):
            continue  # downstream of a node whose output type is unknown (already reported, or not inferable)
        g = onnx.GraphProto(name="lint")
        g.node.append(node)
        seen = set()
        for name in node.input:
            if not name or name in seen:
                continue
            seen.add(name)
            if name in small:
                g.initializer.append(small[name])
            tp = types.get(name)
            vi = onnx.ValueInfoProto(name=name)
            if tp is not None:
                vi.type.CopyFrom(tp)
            g.input.append(vi)
        for name in node.output:
            if name in declared:
                g.output.append(declared[name])
            elif name:
                g.output.append(onnx.ValueInfoProto(name=name))
        m = onnx.helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version)
        m.functions.extend(model.functions)
        try:
            onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
        except Exception as e:
            msg = _first_line(e)
            if "Unsupported" in msg and "schema" in msg.lower():
                continue  # unknown ops are reported by _check_op
            if "No Op registered" in msg or "is not a registered function/op" in msg:
                continue
            report.entries.append(LintEntry(ERROR, "onnx_inference", f"Op: {node.op_type} | {msg}", [label]))
            failing.add(label)


def _numel(t):
    n = 1
    for d in t.dims:
        n *= d
    return n


def _weightless(model):
    from debugkit.surgeon.shapes import _proxy
    return _proxy(model)
