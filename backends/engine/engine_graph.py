"""The builder's working graph and the engine's content: nodes over tensor names.

The builder lowers a NetworkDefinition into a Graph, runs its passes over it (plain functions that rewrite the
node list), picks a tactic per node, and the plan file stores exactly this structure. Tensor names are the ONNX
names wherever the parser could keep them, so debug taps and reports speak ONNX.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TensorInfo:
    name: str
    dtype: str | None = None          # numpy dtype name, None where unknown
    shape: list | None = None         # ints, -1 for dynamic dims
    dim_names: dict = field(default_factory=dict)
    kind: str = "tensor"

    def to_json(self):
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape,
                "dim_names": {str(k): v for k, v in self.dim_names.items()}, "kind": self.kind}

    @classmethod
    def from_json(cls, d):
        return cls(d["name"], d.get("dtype"), d.get("shape"), {int(k): v for k, v in d.get("dim_names", {}).items()},
                   d.get("kind", "tensor"))


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


@dataclass(eq=False)
class Graph:
    name: str = "network"
    inputs: list = field(default_factory=list)     # TensorInfo
    outputs: list = field(default_factory=list)    # TensorInfo
    nodes: list = field(default_factory=list)      # Node
    aliases: dict = field(default_factory=dict)    # ONNX name -> tensor name
    tensor_info: dict = field(default_factory=dict)  # name -> TensorInfo (known static facts)
    meta: dict = field(default_factory=dict)

    @property
    def input_names(self):
        return [t.name for t in self.inputs]

    @property
    def output_names(self):
        return [t.name for t in self.outputs]

    def producers(self) -> dict:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict:
        users: dict = {}
        for n in self.nodes:
            for name in n.inputs:
                if name is not None:
                    users.setdefault(name, []).append(n)
            for sub in n.subgraphs.values():
                for name in sub.outer_references():
                    users.setdefault(name, []).append(n)
        return users

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
