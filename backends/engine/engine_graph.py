"""The builder's working graph and the engine's content: nodes over tensor names.

The builder lowers a NetworkDefinition into a Graph, runs its passes over it (docs/architecture.md, "Graph"),
picks a tactic per node, and the plan file stores exactly this structure. Tensor names are the ONNX names wherever
the parser could keep them, so debug taps and reports speak ONNX.

Invariants (checked by `Graph.lint()`, which the pass manager runs after every pass in tests and debug builds):
every tensor has one producer (a node or a graph input) that comes before its readers; graph outputs are
produced; fused params match their schema (backends/engine/params.py); a node with a tactic gets one that
honours its fused params, precision and format. While a builder pass runs, `Graph.nodes` is read-only: passes
change a graph through the mutation API (`insert_before/after`, `replace_nodes`, `move_after`, `erase`, `erase_nodes`,
`replace_all_uses_with`, `set_inputs/outputs`), which keeps the use-def index (`producer()`, `users()`) current
and checks each edit; code that builds a whole graph (lowering, plan loading, debug tools) uses `set_nodes`.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import numpy as np

from backends.engine.params import check_params
from native.errors import GraphError
from native.tactics import Op, tactics_for, unsupported_reason


@dataclass
class TensorInfo:
    """What is known about one edge: dtype, shape, format, and for reduced precision its dynamic range / scale."""

    name: str
    dtype: str | None = None          # numpy dtype name, None where unknown
    shape: list | None = None         # ints, -1 for dynamic dims
    dim_names: dict = field(default_factory=dict)
    kind: str = "tensor"
    format: str = "linear"            # "linear" (row-major as shaped) or "nhwc" (a channel-last layer's operand)
    dynamic_range: tuple | None = None  # (min, max) for INT8/FP8 quantisation, None where not set
    scale: object = None              # quantisation scale (float or per-channel list), None where not set

    def to_json(self):
        d = {"name": self.name, "dtype": self.dtype, "shape": self.shape,
             "dim_names": {str(k): v for k, v in self.dim_names.items()}, "kind": self.kind}
        if self.format != "linear":
            d["format"] = self.format
        if self.dynamic_range is not None:
            d["dynamic_range"] = [float(v) for v in self.dynamic_range]
        if self.scale is not None:
            d["scale"] = self.scale
        return d

    @classmethod
    def from_json(cls, d):
        dr = d.get("dynamic_range")
        return cls(d["name"], d.get("dtype"), d.get("shape"), {int(k): v for k, v in d.get("dim_names", {}).items()},
                   d.get("kind", "tensor"), d.get("format", "linear"), tuple(dr) if dr is not None else None,
                   d.get("scale"))


@dataclass(eq=False)
class Node:
    """One engine layer. Compared by identity: passes ask 'is this the same node', never 'equal fields'."""

    name: str
    kind: str
    inputs: list                      # tensor names, None for an absent optional input
    outputs: list
    params: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    subgraphs: dict = field(default_factory=dict)
    source_nodes: list = field(default_factory=list)
    precision: str = "float32"
    tactic_id: int | None = None
    tactic_name: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def fused_name(self):
        return " + ".join(self.source_nodes) if self.source_nodes else self.name


def node_format(node) -> str:
    """The tensor format a node's tactic reads and writes: "nhwc" for the layout pass's channel-last twins
    (ConvolutionNHWC, PoolingNHWC), "linear" otherwise, unless a pass recorded another in meta["format"]."""
    meta = getattr(node, "meta", None) or {}
    return meta.get("format") or ("nhwc" if node.kind.endswith("NHWC") else "linear")


# the builder pass running now (set by the pass manager): while one runs, Graph.nodes cannot be edited directly
ACTIVE_PASS: contextvars.ContextVar = contextvars.ContextVar("debugkit_active_pass", default=None)


class NodeList(list):
    """`Graph.nodes`. A builder pass changes a graph through the mutation API only, so the use-def index stays
    current and every edit is checked: while a pass runs (the pass manager says which), editing this list in place
    raises a GraphError naming the pass. Outside passes (building a graph by hand, tests) an edit goes through and
    the graph's index is rebuilt on next use."""

    graph = None

    def __reduce_ex__(self, protocol):   # the graph re-attaches itself (Graph.__setstate__)
        return (NodeList, (list(self),))


def _edit(name):
    method = getattr(list, name)

    def edit(self, *args, **kwargs):
        refuse_in_pass(f"Graph.nodes.{name.strip('_')}")
        result = method(self, *args, **kwargs)
        if self.graph is not None:
            self.graph.touch()
        return result
    edit.__name__ = name
    return edit


for _name in ("append", "insert", "extend", "remove", "pop", "clear", "sort", "reverse", "__setitem__",
              "__delitem__", "__iadd__", "__imul__"):
    setattr(NodeList, _name, _edit(_name))


def refuse_in_pass(what):
    name = ACTIVE_PASS.get()
    if name is not None:
        raise GraphError(f"pass '{name}' edits the node list directly ({what}): passes change a graph through its "
                         f"mutation API (insert_before, insert_after, append, replace_nodes, move_after, erase, "
                         f"erase_nodes, replace_all_uses_with, set_inputs, set_outputs), which keeps the use-def "
                         f"index current")


_L = list   # the list methods the mutation API uses on the node list underneath


class Graph:
    """Nodes over tensor names with graph inputs/outputs (TensorInfo), ONNX-name aliases and per-edge TensorInfo."""

    def __init__(self, name: str = "network", inputs=None, outputs=None, nodes=None, aliases=None, tensor_info=None,
                 meta=None):
        self.name = name
        self.inputs = list(inputs or [])          # TensorInfo
        self.outputs = list(outputs or [])        # TensorInfo
        self._nodes = self._list(nodes or [])
        self.aliases = dict(aliases or {})        # ONNX name -> tensor name
        self.tensor_info = dict(tensor_info or {})  # name -> TensorInfo (known static facts)
        self.meta = dict(meta or {})

    def __setstate__(self, state):       # copies and unpickled graphs own their node list
        self.__dict__.update(state)
        self._nodes = self._list(self._nodes)

    def __repr__(self):
        return f"Graph({self.name!r}, {len(self._nodes)} nodes, inputs {self.input_names}, outputs {self.output_names})"

    @property
    def nodes(self) -> NodeList:
        """The layers in execution order (read-only; see NodeList)."""
        return self._nodes

    @nodes.setter
    def nodes(self, value):
        refuse_in_pass("graph.nodes = ...")
        self.set_nodes(value)

    def set_nodes(self, nodes):
        """Replace the whole node list (building a graph, debug tools; passes use the finer operations)."""
        self._nodes = self._list(nodes)
        self.touch()

    def _list(self, nodes):
        lst = NodeList(nodes)
        lst.graph = self
        return lst

    @property
    def input_names(self):
        return [t.name for t in self.inputs]

    @property
    def output_names(self):
        return [t.name for t in self.outputs]

    def producers(self) -> dict:
        return {o: n for n in self._nodes for o in n.outputs}

    def consumers(self) -> dict:
        users: dict = {}
        for n in self._nodes:
            for name in n.inputs:
                if name is not None:
                    users.setdefault(name, []).append(n)
            for sub in n.subgraphs.values():
                for name in sub.outer_references():
                    users.setdefault(name, []).append(n)
        return users

    # use-def index and mutation API ---------------------------------------------------------------------
    def touch(self):
        """Say that a node's inputs/outputs changed outside the mutation API (the index is rebuilt on next use)."""
        self.__dict__.pop("_index", None)

    def _idx(self):
        idx = self.__dict__.get("_index")
        if idx is None:
            idx = self.__dict__["_index"] = (self.producers(), self.consumers())
        return idx

    def producer(self, name):
        """The node that writes tensor `name` (None for graph inputs and unknown names)."""
        return self._idx()[0].get(name)

    def users(self, name) -> list:
        """The nodes that read tensor `name` (a subgraph's outer reads count for its owner)."""
        return list(self._idx()[1].get(name, ()))

    def _position(self, anchor):
        try:
            return _L.index(self._nodes, anchor)    # Node compares by identity: a C-speed scan
        except ValueError:
            raise GraphError(f"node '{getattr(anchor, 'name', anchor)}' is not in graph '{self.name}'") from None

    @staticmethod
    def _reads(node) -> set:
        return {i for i in node.inputs if i is not None} | \
            {r for sub in node.subgraphs.values() for r in sub.outer_references()}

    def _unindex(self, node):
        """Take `node` out of the use-def index (when one is built)."""
        idx = self.__dict__.get("_index")
        if idx is None:
            return
        prod, users = idx
        for o in node.outputs:
            if prod.get(o) is node:
                del prod[o]
        for name in self._reads(node):
            lst = users.get(name)
            if lst is not None:
                lst[:] = [u for u in lst if u is not node]
                if not lst:
                    del users[name]

    def _reindex(self, node):
        idx = self.__dict__.get("_index")
        if idx is None:
            return
        prod, users = idx
        for o in node.outputs:
            prod[o] = node
        for name in self._reads(node):
            users.setdefault(name, []).append(node)

    def _add(self, at, node):
        clash = [o for o in node.outputs if o in self._idx()[0] or o in self.input_names]
        if clash:
            raise GraphError(f"cannot insert '{node.name}': tensor(s) {clash} already have a producer")
        _L.insert(self._nodes, at, node)
        self._reindex(node)
        return node

    def insert_before(self, anchor, node):
        """Insert `node` right before `anchor`; returns it."""
        return self._add(self._position(anchor), node)

    def insert_after(self, anchor, node):
        """Insert `node` right after `anchor`; returns it."""
        return self._add(self._position(anchor) + 1, node)

    def append(self, node):
        return self._add(len(self._nodes), node)

    def replace_nodes(self, old, new, *, where="last"):
        """Remove the nodes `old` and put `new` (a node or a list) where the last of them stood (`where="first"`:
        the first, right when every new node reads only what the first old one could): the fusion rewrite.
        Refused (GraphError) when a tensor of `old` that something else still reads, or that is a graph output, is
        not produced by `new`."""
        new = list(new) if isinstance(new, (list, tuple)) else [new]
        ids = {id(n) for n in old}
        at = (max if where == "last" else min)(self._position(n) for n in old)
        _, users = self._idx()
        made = {o for n in new for o in n.outputs}
        outs = set(self.output_names)
        lost = sorted({o for n in old for o in n.outputs if o not in made and
                       (o in outs or any(id(u) not in ids for u in users.get(o, ())))})
        if lost:
            raise GraphError(f"replace_nodes: {lost} would lose their producer (still read or graph outputs); "
                             f"the new node(s) {[n.name for n in new]} must produce them")
        for n in old:
            self._unindex(n)
        positions = sorted((self._position(n) for n in old), reverse=True)
        for i in positions:
            _L.pop(self._nodes, i)
        at -= sum(1 for i in positions if i < at)
        for k, n in enumerate(new):
            _L.insert(self._nodes, at + k, n)
            self._reindex(n)
        return new[0] if len(new) == 1 else new

    def move_after(self, node, anchor):
        """Move `node` to right after `anchor` (e.g. a fused node to after its last input's producer)."""
        at = self._position(node)
        _L.pop(self._nodes, at)
        _L.insert(self._nodes, self._position(anchor) + 1, node)
        return node

    def move_before(self, node, anchor):
        at = self._position(node)
        _L.pop(self._nodes, at)
        _L.insert(self._nodes, self._position(anchor), node)
        return node

    def set_inputs(self, node, inputs):
        """Rewire `node` to read `inputs` (keeps the use-def index current)."""
        self._unindex(node)
        node.inputs = list(inputs)
        self._reindex(node)
        return node

    def set_outputs(self, node, outputs):
        """Let `node` write `outputs` (keeps the use-def index current)."""
        self._unindex(node)
        node.outputs = list(outputs)
        self._reindex(node)
        return node

    def replace_all_uses_with(self, old: str, new: str, *, outputs=True) -> int:
        """Every reader of tensor `old` reads `new` instead (and a graph output named `old` becomes `new` when
        `outputs`); returns how many input slots changed. The producer of `new` keeps reading `old` (the usual
        insert-after-then-redirect), and `new` must be defined before its new readers."""
        if old == new:
            return 0
        prod, users = self._idx()
        maker = prod.get(new)
        new_at = -1 if new in self.input_names or maker is None else self._position(maker)
        count = 0
        keep = []
        for n in list(users.get(old, ())):
            if n is maker:
                keep.append(n)
                continue
            if new_at >= 0 and self._position(n) <= new_at:
                raise GraphError(f"replace_all_uses_with('{old}', '{new}'): reader '{n.name}' comes before "
                                 f"'{new}' is produced")
            for i, name in enumerate(n.inputs):
                if name == old:
                    n.inputs[i] = new
                    count += 1
            users.setdefault(new, []).append(n)
        if keep:
            users[old] = keep
        else:
            users.pop(old, None)
        for sub_owner in [n for n in self._nodes if n.subgraphs]:
            for sub in sub_owner.subgraphs.values():
                count += sub._rename_outer(old, new)
        if outputs:
            for t in self.outputs:
                if t.name == old:
                    self.aliases = {k: (new if v == old else v) for k, v in self.aliases.items()}
                    self.aliases.setdefault(old, new)
                    t.name = new
                    count += 1
        self.touch()
        return count

    def _rename_outer(self, old, new) -> int:
        if old in {o for n in self._nodes for o in n.outputs} or old in self.input_names:
            return 0
        count = 0
        for n in self._nodes:
            for i, name in enumerate(n.inputs):
                if name == old:
                    n.inputs[i] = new
                    count += 1
            for sub in n.subgraphs.values():
                count += sub._rename_outer(old, new)
        self.touch()
        return count

    def erase(self, node):
        """Remove `node`; refuses (GraphError) while any of its outputs is read or is a graph output."""
        self.erase_nodes([node])

    def erase_nodes(self, nodes):
        """Remove `nodes` together (a dead chain); refuses (GraphError) while an output of one of them is read by
        a node outside the set or is a graph output (unless a node that stays now produces it: set_outputs)."""
        ids = {id(n) for n in nodes}
        for n in nodes:
            self._position(n)
        _, users = self._idx()
        remaining = {o: n for n in self._nodes if id(n) not in ids for o in n.outputs}
        outs = set(self.output_names) - set(remaining)
        problems = []
        for node in nodes:
            live = {o: [u.name for u in users.get(o, ()) if id(u) not in ids] for o in node.outputs
                    if o not in remaining}
            live = {o: u for o, u in live.items() if u}
            gone = sorted(outs & set(node.outputs))
            if live or gone:
                what = "; ".join(f"'{o}' is read by {u}" for o, u in live.items())
                if gone:
                    what += ("; " if what else "") + f"{gone} are graph outputs"
                problems.append(f"cannot erase '{node.name}' ({node.kind}): {what}")
        if problems:
            raise GraphError("; ".join(problems) + "; replace_all_uses_with first")
        for n in nodes:
            self._unindex(n)
        prod = self._idx()[0]
        for n in nodes:   # a tensor another node now writes (set_outputs before the erase) keeps that producer
            for o in n.outputs:
                if o in remaining:
                    prod[o] = remaining[o]
        self._nodes = self._list(n for n in self._nodes if id(n) not in ids)

    # checks ----------------------------------------------------------------------------------------------
    def lint(self, outer: set | None = None, *, where: str = "", device: str = "cpu") -> "Graph":
        """Check the invariants (module docstring); raise GraphError naming every problem. `outer`: tensor names a
        subgraph may read from its enclosing graph. Returns self."""
        problems = []
        defined = set(self.input_names) | set(outer or ())
        seen_out = {}
        for n in self.nodes:
            for name in n.inputs:
                if name is not None and name not in defined:
                    later = name in self.producers()
                    problems.append(f"layer '{n.name}' reads '{name}', which is "
                                    f"{'produced later' if later else 'never produced'}")
            for p in check_params(n):
                problems.append(f"layer '{n.name}' ({n.kind}): {p}")
            if n.tactic_id is not None:
                why = _tactic_problem(n, device)
                if why:
                    problems.append(f"layer '{n.name}' ({n.kind}): tactic {n.tactic_name}: {why}")
            for sub_name, sub in n.subgraphs.items():
                try:
                    sub.lint(defined, device=device)
                except GraphError as e:
                    problems.append(f"in subgraph '{sub_name}' of '{n.name}': {e}")
            for o in n.outputs:
                if o in seen_out or o in self.input_names:
                    problems.append(f"tensor '{o}' is produced twice ('{seen_out.get(o, 'graph input')}' and "
                                    f"'{n.name}')")
                seen_out[o] = n.name
                defined.add(o)
        for t in self.outputs:
            if t.name not in defined:
                problems.append(f"graph output '{t.name}' is never produced")
        idx = self.__dict__.get("_index")
        if idx is not None and ({k: id(v) for k, v in idx[0].items()} != {k: id(v) for k, v in self.producers().items()}
                                or _readers(idx[1]) != _readers(self.consumers())):
            problems.append("use-def index is stale: a pass changed a node's inputs or outputs without the mutation "
                            "API (set_inputs / set_outputs / replace_all_uses_with) or touch()")
        if problems:
            head = f"graph '{self.name}'{' after ' + where if where else ''} breaks {len(problems)} invariant(s): "
            raise GraphError(head + "; ".join(problems[:10]) + (" ..." if len(problems) > 10 else ""))
        return self

    def outer_references(self) -> set:
        defined = set(self.input_names)
        used = set()
        for n in self.nodes:
            used |= {i for i in n.inputs if i is not None and i not in defined}
            for sub in n.subgraphs.values():
                used |= sub.outer_references() - defined
            defined |= set(n.outputs)
        return used - defined

    def walk(self):
        """Every node, including those inside subgraphs."""
        for n in self.nodes:
            yield n
            for sub in n.subgraphs.values():
                yield from sub.walk()

    def constant_value(self, name):
        p = self.producers().get(name)
        if p is not None and p.kind == "Constant":
            return p.weights["value"]
        return None

    def weight_bytes(self) -> int:
        return sum(int(np.asarray(w).nbytes) for n in self.walk() for w in n.weights.values())


def _readers(users: dict) -> dict:
    return {k: sorted({id(u) for u in v}) for k, v in users.items() if v}


def _tactic_problem(node, device):
    """Why the node's recorded tactic does not fit it (None when it does, or when the tactic is unknown here)."""
    if True:
        for t in tactics_for(node.kind, device):
            if t.id == node.tactic_id:
                shapes = node.meta.get("input_shapes")
                op = node_op(node)
                missing = [p for p in ("post_ops", "side", "integer", "col2im", "program")
                           if op.params.get(p) and p not in t.honours]
                if missing:
                    return f"does not implement fused param(s) {missing}"
                if op.precision not in t.precisions or op.format not in t.formats:
                    return unsupported_reason(t, op, shapes)
                return None
    return None


def node_op(node) -> Op:
    """The layer as a tactic sees it (native.tactics.Op): kind, name, params, weights, precision, format."""
    meta = getattr(node, "meta", None) or {}
    types = meta.get("output_types")
    return Op(node.kind, node.name, node.params, node.weights, {}, node.precision, node_format(node),
              output_types=tuple(types) if isinstance(types, list) else (), math=meta.get("math", ""),
              config=meta.get("tactic_config", "") or "")
