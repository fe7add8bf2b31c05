"""Small helpers the fusion and layout passes share: who produces / consumes a tensor, constants, rewrites.

Rules every rewrite keeps: a tensor that is a graph output is never fused away; a tensor read by a subgraph
(If/Loop/Scan body) is never renamed; a fused node sits where the last node it replaces sat (so the node list
stays topologically ordered) and keeps the ONNX names of everything it replaced in `source_nodes`.
"""
from __future__ import annotations

import numpy as np

from backends.engine.engine_graph import Graph, Node

FLOAT_DTYPES = {"float32", "float64", "float16", "bfloat16"}


class View:
    """Producer / consumer maps of a Graph, refreshed after each rewrite."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.refresh()

    def refresh(self):
        g = self.graph
        self.prod = g.producers()
        self.cons = g.consumers()
        self.outs = set(g.output_names)
        self.ins = set(g.input_names)

    # queries ---------------------------------------------------------------------------------------------
    def producer(self, name, kind=None, op=None):
        """The node producing `name`, if it is of `kind` (and params['op'] / ['type'] == op where given)."""
        n = self.prod.get(name) if name is not None else None
        if n is None or (kind is not None and n.kind != kind):
            return None
        if op is not None and n.params.get("op", n.params.get("type")) != op:
            return None
        return n

    def sole_consumer(self, name):
        """The one node reading `name` as a plain input, or None (graph outputs and subgraph reads excluded)."""
        users = self.cons.get(name, [])
        if name in self.outs or len(users) != 1 or name not in users[0].inputs:
            return None
        return users[0]

    def internal(self, name, allowed) -> bool:
        """`name` is read only by nodes in `allowed` (as plain inputs) and is not a graph output."""
        users = self.cons.get(name, [])
        return name not in self.outs and bool(users) and all(
            any(u is a for a in allowed) and name in u.inputs for u in users)

    def const(self, name):
        p = self.prod.get(name) if name is not None else None
        if p is not None and p.kind == "Constant":
            return np.asarray(p.weights["value"])
        return None

    def scalar(self, name):
        """The float value of a one-element constant, else None."""
        c = self.const(name)
        if c is None or c.size != 1 or c.dtype.kind not in "fiu":
            return None
        return float(c.reshape(-1)[0])

    def info(self, name):
        return self.graph.tensor_info.get(name)

    def dtype(self, name):
        c = self.const(name)
        if c is not None:
            return c.dtype.name
        info = self.info(name)
        return info.dtype if info is not None else None

    def is_float(self, name) -> bool:
        return self.dtype(name) in FLOAT_DTYPES

    def shape(self, name):
        c = self.const(name)
        if c is not None:
            return list(c.shape)
        info = self.info(name)
        return list(info.shape) if info is not None and info.shape is not None else None

    def rank(self, name):
        s = self.shape(name)
        return len(s) if s is not None else None

    # rewrites --------------------------------------------------------------------------------------------
    def replace(self, old: list, new: Node | list):
        """Remove the `old` nodes and put `new` where the last of them stood (Graph.replace_nodes)."""
        self.graph.replace_nodes(old, new)
        self.refresh()

    def insert_before(self, anchor: Node, new: Node):
        self.graph.insert_before(anchor, new)
        self.refresh()

    def bypass(self, node: Node, src: str, dst: str) -> bool:
        """Remove `node`, whose output `dst` equals its input `src`, by rewiring. False where it cannot."""
        g = self.graph
        users = self.cons.get(dst, [])
        if any(dst not in u.inputs for u in users):
            return False                      # read by a subgraph by name
        if dst in self.outs:
            # keep the graph-output name: rename src to dst at its producer, if src is private to `node`
            p = self.prod.get(src)
            src_users = self.cons.get(src, [])
            if p is None or src in self.outs or src in self.ins or len(src_users) != 1:
                return False
            g.set_outputs(p, [dst if o == src else o for o in p.outputs])   # p writes dst ...
            g.erase(node)                                                    # ... instead of `node`
            self._alias(src, dst)
            self.refresh()
            return True
        for u in dict.fromkeys(users):
            g.set_inputs(u, [src if i == dst else i for i in u.inputs])
        g.erase(node)
        self._alias(dst, src)
        self._rewired(node, src, dst, users)
        return True

    def _rewired(self, node, src, dst, users):
        """The maps after `bypass` removed `node` and its readers of `dst` read `src` instead: only the lists of the
        tensors involved change, in graph order as `refresh` builds them (a full refresh per removed no-op made
        identity elimination quadratic: a third of a bert_mini probe build's passes; and the layout pass's
        transpose-pair elimination, whose `src` is the first transpose's input, not the removed one's)."""
        if node.subgraphs or len(node.outputs) != 1:
            self.refresh()
            return
        self.prod.pop(dst, None)
        moved = self.cons.pop(dst, [])
        for name in dict.fromkeys(i for i in node.inputs if i is not None):
            kept = [u for u in self.cons.get(name, ()) if u is not node]
            if kept:
                self.cons[name] = kept
            else:
                self.cons.pop(name, None)
        if moved:
            had = self.cons.get(src, [])
            if had:
                pos = {id(n): i for i, n in enumerate(self.graph.nodes)}
                self.cons[src] = sorted(had + moved, key=lambda u: pos[id(u)])
            else:
                self.cons[src] = list(moved)

    def _alias(self, old, new):
        """Keep ONNX names resolvable for debug taps after a tensor disappears."""
        al = self.graph.aliases
        for k, v in list(al.items()):
            if v == old:
                al[k] = new
        al.setdefault(old, new)

    def new_constant(self, base: str, value, before: Node, source_nodes=()) -> str:
        name = self.unique(base)
        node = Node(name=name, kind="Constant", inputs=[], outputs=[name], params={"shape": list(np.shape(value))},
                    weights={"value": np.asarray(value)}, source_nodes=list(source_nodes))
        self.insert_before(before, node)
        return name

    def unique(self, base: str) -> str:
        taken = {o for n in self.graph.nodes for o in n.outputs} | {n.name for n in self.graph.nodes} | self.ins
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        return name


def fused_node(nodes: list, kind: str, inputs, outputs, params=None, weights=None, name=None) -> Node:
    """A node replacing `nodes`, named like TensorRT's fused layers ("conv1 + bn1 + relu1")."""
    sources = [s for n in nodes for s in (n.source_nodes or [n.name])]
    meta = {}
    for n in nodes:
        if "precision_constraint" in n.meta:
            meta["precision_constraint"] = n.meta["precision_constraint"]
        if "qdq_weight" in n.meta and n.kind == kind:  # explicit INT8: the weights' Q/DQ scale (passes/int8.py)
            meta.setdefault("qdq_weight", n.meta["qdq_weight"])
    return Node(name=name or " + ".join(n.name for n in nodes), kind=kind, inputs=list(inputs),
                outputs=list(outputs), params=params or {}, weights=weights or {}, source_nodes=sources, meta=meta)


def same_precision(nodes) -> bool:
    return len({n.meta.get("precision_constraint") for n in nodes}) <= 1 and \
        not any(n.meta.get("output_types") for n in nodes[:-1])


def other_input(node: Node, name: str):
    """The input of a binary node that is not `name` (None if `name` feeds both sides)."""
    a, b = node.inputs[0], node.inputs[1]
    if a == name and b != name:
        return b
    if b == name and a != name:
        return a
    return None


def close(v, target, rel=1e-3) -> bool:
    return v is not None and abs(v - target) <= rel * abs(target)
