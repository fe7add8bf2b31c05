"""First divergence: walk the ONNX graph in topological order and name the first tensor that disagrees, and say
whether that node made the error (born there) or whether the error accumulated over many layers.

The criterion, in order (every level is an error as a multiple of that tensor's tolerance, OutputResult.level):
1. NaN/Inf first appear at the tensor (its inputs are finite where the reference's are): born there.
2. When the node can be re-run from both sides' input values (origin.py) and that replay reproduces the reference:
   born there when the error the node made itself (local) is at least the error its inputs carried in (carried);
   otherwise the error accumulates: keeping this one node in higher precision would not remove it.
3. Otherwise, from the compared inputs alone: born there when they carry at most a tenth of their tolerance, or the
   error grows at least 4-fold at this node; else it accumulates.
An accumulating error is described from the earliest compared ancestor that carries at least a tenth of the largest
ancestor's error through the diverging tensor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from backends.runners.model import topological_nodes

CLEAN_INPUTS = 0.1     # inputs carrying at most this fraction of their tolerance are clean
GROWTH = 4.0           # without a replay: an error growing this much at one node was born there


@dataclass
class Divergence:
    tensor: str
    node: str | None           # ONNX node that produces the tensor
    op_type: str | None
    born_here: bool
    region: list = field(default_factory=list)     # ONNX nodes between agreeing observed tensors and this one
    inputs: dict = field(default_factory=dict)     # nearest observed (or constant) input -> "agrees"/"differs"/...
    result: object = None                          # the OutputResult of `tensor`
    born_elsewhere: list = field(default_factory=list)   # other tensors where an error is born (independent sites)
    source: str = "output"                         # the compared runner
    reference: str = "reference"
    evidence: str = ""                             # why born there / accumulating, in words
    accumulation: dict | None = None               # {"from_tensor", "from_node", "layers", ...} when it accumulates
    split: object = None                           # origin.ErrorSplit when the node could be re-run

    def error_text(self) -> str:
        r = self.result
        if r is None:
            return ""
        nf = getattr(r, "nonfinite", None)
        if nf is not None and nf.mismatched:
            return f"; {nf.describe(self.source, self.reference)}"
        if r.max_abs is not None:
            rel = f"{r.max_rel:.4g}" if r.max_rel is not None else "n/a"
            zero = f" (+{r.zero_ref} element(s) with a zero reference)" if getattr(r, "zero_ref", 0) else ""
            return f"; max abs err {r.max_abs:.4g}, max rel err {rel}{zero}"
        if r.reason:
            return f"; {r.reason}"
        return ""

    def headline(self) -> str:
        where = f"node '{self.node}' ({self.op_type})" if self.node else "a graph input"
        extra = f" (fused region: {', '.join(self.region)})" if len(self.region) > 1 else ""
        if self.accumulation:
            a = self.accumulation
            start = f"node '{a['from_node']}'" if a.get("from_node") else f"'{a['from_tensor']}'"
            return (f"error accumulates from {start} through {where} ({a['layers']} layers); no single layer "
                    f"explains it: {self.evidence}. First tensor out of tolerance: '{self.tensor}'{extra}"
                    f"{self.error_text()}. `debugkit debug precision` finds the layers to keep in higher precision")
        how = "born there: " + (self.evidence or "its inputs still agree") if self.born_here else \
            "propagated: an input already differed"
        return f"first diverging tensor '{self.tensor}', produced by {where}{extra}{self.error_text()}; {how}"

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "born_here": self.born_here,
                "region": self.region, "evidence": self.evidence, "accumulation": self.accumulation,
                "split": None if self.split is None else {"local": _num(self.split.local),
                                                          "carried": _num(self.split.carried),
                                                          "replay_error": _num(self.split.replay_error)}}


def _num(x):
    return None if x is None or x != x or abs(x) == float("inf") else float(x)


def level(r) -> float:
    """An OutputResult's error as a multiple of its tolerance (0 when it passed without a recorded level)."""
    lv = r.metrics.get("level") if r is not None else None
    if lv is None:
        return 0.0 if r is None or r.passed else float("inf")
    return float(lv)


def first_divergence(model, results: dict, split=None, source="output", reference="reference") -> Divergence | None:
    """`results`: {tensor name: OutputResult} for the compared tensors of one runner pair and iteration.
    split(tensor, region nodes, boundary tensors) -> origin.ErrorSplit | None re-runs the diverging node."""
    order = topological_nodes(model.graph) if model is not None else []
    producer = {o: n for n in order for o in n.output if o}
    constants = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input} if model else set()
    constants |= {o for n in order if n.op_type == "Constant" for o in n.output}
    position = {}
    for i, n in enumerate(order):
        for o in n.output:
            position.setdefault(o, i)
    compared = sorted(results, key=lambda t: (position.get(t, len(order)), t))
    failing = [t for t in compared if not results[t].passed]
    if not failing:
        return None

    def trace(tensor):
        """Nearest observed ancestors of `tensor`'s producer and the unobserved nodes crossed to reach them."""
        node = producer.get(tensor)
        if node is None:
            return [], {}
        region, inputs, stack, seen = [node.name], {}, list(node.input), set()
        while stack:
            t = stack.pop()
            if not t or t in seen:
                continue
            seen.add(t)
            if t in results:
                inputs[t] = "agrees" if results[t].passed else "differs"
            elif t in constants:
                inputs[t] = "constant/input"
            elif t in producer:
                region.append(producer[t].name)
                stack.extend(producer[t].input)
            else:
                inputs[t] = "unknown"
        return region, inputs

    def make(t):
        region, inputs = trace(t)
        node = producer.get(t)
        born = all(v != "differs" for v in inputs.values())
        region = [n.name for n in order if n.name in set(region)]
        return Divergence(t, node.name if node else None, node.op_type if node else None, born, region, inputs,
                          results[t], source=source, reference=reference)

    first = make(failing[0])
    if first.born_here:
        _judge(first, results, order, producer, split)
    # other sites where an error is born (inputs agree), judged by the same criterion: an accumulating error that
    # crosses the tolerance again downstream is not another birth. At most 3 are reported, 10 examined.
    for t in failing[1:11]:
        d = make(t)
        if d.born_here:
            _judge(d, results, order, producer, split)
            if d.born_here:
                first.born_elsewhere.append(d)
                if len(first.born_elsewhere) == 3:
                    break
    return first


def _nonfinite_mismatch(r) -> bool:
    nf = getattr(r, "nonfinite", None) if r is not None else None
    return bool(nf is not None and nf.mismatched)


def _judge(d, results, order, producer, split):
    """Decide born there vs accumulating for a divergence whose observed inputs all agree (criterion above)."""
    compared_inputs = [t for t, how in d.inputs.items() if t in results]
    in_level = max((level(results[t]) for t in compared_inputs), default=0.0)
    out_level = level(d.result)
    if _nonfinite_mismatch(d.result) and not any(_nonfinite_mismatch(results[t]) for t in compared_inputs):
        d.born_here, d.evidence = True, "NaN/Inf first appear here; its inputs are finite where the reference's are"
        return
    s = None
    if split is not None and d.node is not None:
        nodes = [n for n in order if n.name in set(d.region)]
        boundary = [t for t in d.inputs]
        try:
            s = split(d.tensor, nodes, boundary)
        except Exception:   # the split refines the answer; without it the inputs' levels decide
            s = None
    if s is not None and s.valid:
        d.split = s
        d.born_here = s.local >= s.carried
        d.evidence = (f"re-run in full precision from {d.source}'s own inputs, the node's own arithmetic accounts "
                      f"for {s.local:.3g}x the tolerance and the error its inputs carried in for {s.carried:.3g}x")
    elif in_level <= CLEAN_INPUTS:
        d.born_here = True
        d.evidence = f"its inputs still agree (within {in_level:.2g}x their tolerance)"
    else:
        d.born_here = out_level >= GROWTH * in_level
        d.evidence = (f"its inputs carry {in_level:.3g}x their tolerance and the error "
                      f"{'grows' if d.born_here else 'only grows'} to {out_level:.3g}x here")
    if not d.born_here:
        d.accumulation = _span(d, results, order, producer)


def _span(d, results, order, producer) -> dict:
    """The compared ancestors of d.tensor that carry error: from the earliest with at least a tenth of the largest
    ancestor level, through d.tensor."""
    position = {}
    for i, n in enumerate(order):
        for o in n.output:
            position.setdefault(o, i)
    ancestors, stack, seen = set(), [d.tensor], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        node = producer.get(t)
        if node is None:
            continue
        for i in node.input:
            if i in results:
                ancestors.add(i)
            if i:
                stack.append(i)
    levels = {t: level(results[t]) for t in ancestors}
    top = max(levels.values(), default=0.0)
    carrying = sorted((t for t, lv in levels.items() if top > 0 and lv >= 0.1 * top),
                      key=lambda t: (position.get(t, len(order)), t))
    start = carrying[0] if carrying else d.tensor
    layers = 1 + sum(1 for t in ancestors if position.get(t, -1) >= position.get(start, 0))
    node = producer.get(start)
    return {"from_tensor": start, "from_node": node.name if node else None, "layers": layers,
            "through_tensor": d.tensor, "through_node": d.node, "max_ancestor_level": _num(top)}
