"""The Layer base class and the registry of layer kinds (LAYER_KINDS): a subclass that sets `kind` registers
itself. The kind modules of this package derive from it; the network (network.py) builds layers from the
registry."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from backends.engine.dtypes import DataType

if TYPE_CHECKING:
    from backends.engine.network import NetworkDefinition, Tensor


LAYER_KINDS: dict[str, type] = {}


class Layer:
    """Base of every layer kind. Subclasses set `kind`, `defaults` (param name -> default) and a docstring."""

    kind = ""
    defaults: dict = {}
    num_outputs_default = 1

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.kind:
            LAYER_KINDS[cls.kind] = cls

    def __init__(self, network: "NetworkDefinition", name: str, inputs, params=None, weights=None, subgraphs=None):
        self.network = network
        self.name = name
        self.inputs: list[Tensor | None] = list(inputs)
        self.outputs: list[Tensor] = []
        self.params = dict(self.defaults)
        self.params.update(params or {})
        self.weights: dict[str, np.ndarray] = dict(weights or {})
        self.subgraphs: dict[str, NetworkDefinition] = dict(subgraphs or {})
        self.source_nodes: list[str] = []
        self.precision: DataType | None = None
        self.output_types: dict[int, DataType] = {}
        self.meta: dict = {}

    # TensorRT-style accessors
    @property
    def num_inputs(self):
        return len(self.inputs)

    @property
    def num_outputs(self):
        return len(self.outputs)

    def get_input(self, i):
        return self.inputs[i]

    def get_output(self, i):
        return self.outputs[i]

    def set_input(self, i, tensor):
        while len(self.inputs) <= i:
            self.inputs.append(None)
        self.inputs[i] = tensor

    @property
    def precision_is_set(self):
        return self.precision is not None

    def set_output_type(self, i, dtype: DataType):
        self.output_types[i] = dtype

    def output_type_is_set(self, i):
        return i in self.output_types

    def __getattr__(self, item):
        params = self.__dict__.get("params")
        if params is not None and item in params:
            return params[item]
        raise AttributeError(f"{type(self).__name__} has no attribute {item!r}")

    def __repr__(self):
        ins = ", ".join(t.name if t is not None else "None" for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"{self.kind}({self.name!r}: [{ins}] -> [{outs}])"
