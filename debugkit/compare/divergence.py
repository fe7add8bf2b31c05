"""First divergence: walk the ONNX graph in topological order and name the first tensor that disagrees.

For that tensor we report its producer node and whether the error was born there (every input of the producer,
or of the unobservable region that was fused into it, still agreed) or propagated (an input already disagreed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from backends.runners.model import topological_nodes


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

    def headline(self) -> str:
        where = f"node '{self.node}' ({self.op_type})" if self.node else "a graph input"
        r = self.result
        err = ""
        if r is not None and r.max_abs is not None:
            err = f"; max abs err {r.max_abs:.4g}, max rel err {r.max_rel:.4g}"
        elif r is not None and r.reason:
            err = f"; {r.reason}"
        how = "born there: its inputs still agree" if self.born_here else "propagated: an input already differed"
        extra = ""
        if len(self.region) > 1:
            extra = f" (fused region: {', '.join(self.region)})"
        return f"first diverging tensor '{self.tensor}', produced by {where}{extra}{err}; {how}"


def first_divergence(model, results: dict) -> Divergence | None:
    """`results`: {tensor name: OutputResult} for the compared tensors of one runner pair and iteration."""
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
                          results[t])

    first = make(failing[0])
    first.born_elsewhere = [d for d in (make(t) for t in failing[1:]) if d.born_here][:10]
    return first
