"""The network IR: named tensors and TensorRT-style layers, built by the ONNX parser or by hand.

A Layer is one of a closed set of kinds (see `backends.engine.layers`); its `params` are JSON-able so plans
need no pickle, its `weights` are numpy arrays, and `source_nodes` remembers the ONNX nodes it came from.
"""
from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np

from backends.engine.dtypes import DataType
from backends.engine.layers import LAYER_KINDS, Layer  # noqa: F401  (the package registers every kind)
from native.errors import BuildError, UsageError


class Tensor:
    """A named value in the network. Shape dims are ints, -1 where only known at run time."""

    def __init__(self, name: str, dtype: DataType | None = None, shape=None):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape) if shape is not None else None
        self.dim_names: dict[int, str] = {}
        self.dynamic_range: tuple[float, float] | None = None
        self.allowed_formats: int | None = None
        self.producer: Layer | None = None
        self.is_network_input = False
        self.is_network_output = False
        self.kind = "tensor"  # "tensor" | "sequence" | "optional" (ONNX container values)

    def set_dynamic_range(self, lo: float, hi: float) -> bool:
        """INT8 range of this tensor (TensorRT's setDynamicRange): scale max(|lo|, |hi|) / 127; wins over
        calibration."""
        lo, hi = float(lo), float(hi)
        if not (lo <= 0 <= hi) or not np.isfinite(lo) or not np.isfinite(hi):
            raise UsageError(f"dynamic range of tensor '{self.name}' must satisfy lo <= 0 <= hi, got [{lo}, {hi}]")
        self.dynamic_range = (lo, hi)
        return True

    def get_dynamic_range(self):
        return self.dynamic_range

    def set_dimension_name(self, index: int, name: str):
        self.dim_names[index] = name

    def get_dimension_name(self, index: int):
        return self.dim_names.get(index)

    @property
    def is_shape_tensor(self) -> bool:
        return self.producer is not None and self.producer.kind == "Shape"

    def __repr__(self):
        dt = self.dtype.value if self.dtype else "?"
        return f"Tensor({self.name!r}, {dt}, {self.shape})"


class NetworkDefinition:
    """An ordered list of layers over named tensors, with marked inputs and outputs."""

    def __init__(self, name: str = "network", explicit_batch: bool = True):
        self.name = name
        self.explicit_batch = explicit_batch
        self.layers: list[Layer] = []
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.tensors: dict[str, Tensor] = {}
        self.aliases: dict[str, str] = {}  # ONNX name -> engine tensor name when they differ
        self._counter = itertools.count()
        self._layer_names: set[str] = set()

    # names -------------------------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        name = base
        while name in self.tensors or name in self._layer_names:
            name = f"{base}_{next(self._counter)}"
        return name

    def _new_tensor(self, name: str, dtype=None, shape=None) -> Tensor:
        if name in self.tensors:
            name = self.unique_name(name)
        t = Tensor(name, dtype, shape)
        self.tensors[name] = t
        return t

    def rename_tensor(self, tensor: Tensor, new_name: str):
        if tensor.name == new_name:
            return
        if new_name in self.tensors:
            raise UsageError(f"tensor name '{new_name}' is already used in network '{self.name}'")
        del self.tensors[tensor.name]
        tensor.name = new_name
        self.tensors[new_name] = tensor

    # inputs and outputs ------------------------------------------------------------------------------
    def add_input(self, name: str, dtype: DataType, shape) -> Tensor:
        if name in self.tensors:
            raise UsageError(f"network input '{name}' is defined twice")
        t = self._new_tensor(name, dtype, shape)
        t.is_network_input = True
        self.inputs.append(t)
        return t

    def mark_output(self, tensor: Tensor):
        if tensor not in self.outputs:
            tensor.is_network_output = True
            self.outputs.append(tensor)

    def unmark_output(self, tensor: Tensor):
        if tensor in self.outputs:
            self.outputs.remove(tensor)
            tensor.is_network_output = False

    def dynamic_ranges(self) -> dict:
        """{tensor name: (lo, hi)} for every tensor given a dynamic range (INT8 without calibration)."""
        return {name: t.dynamic_range for name, t in self.tensors.items() if t.dynamic_range is not None}

    def get_input(self, i):
        return self.inputs[i]

    def get_output(self, i):
        return self.outputs[i]

    @property
    def num_inputs(self):
        return len(self.inputs)

    @property
    def num_outputs(self):
        return len(self.outputs)

    @property
    def num_layers(self):
        return len(self.layers)

    def get_layer(self, i):
        return self.layers[i]

    # layers ------------------------------------------------------------------------------------------
    def add_layer(self, kind: str, inputs: Iterable[Tensor | None], params=None, weights=None, name=None,
                  num_outputs=None, subgraphs=None) -> Layer:
        """Append a layer of `kind` and create its output tensors (named `<layer>_output_<i>`)."""
        cls = LAYER_KINDS.get(kind)
        if cls is None:
            raise BuildError(f"unknown layer kind '{kind}'; known kinds: {', '.join(sorted(LAYER_KINDS))}")
        inputs = list(inputs)
        for t in inputs:
            if t is not None and not isinstance(t, Tensor):
                raise UsageError(f"layer '{name or kind}' got {type(t).__name__} where a Tensor was expected")
        name = name or f"({kind}) {len(self.layers)}"
        if name in self._layer_names:
            name = f"{name}_{next(self._counter)}"
        layer = cls(self, name, inputs, params, weights, subgraphs)
        n = cls.num_outputs_default if num_outputs is None else num_outputs
        for i in range(n):
            out = self._new_tensor(f"{name}_output_{i}")
            out.producer = layer
            layer.outputs.append(out)
        self.layers.append(layer)
        self._layer_names.add(name)
        return layer

    def remove_layer(self, layer: Layer):
        self.layers.remove(layer)
        for t in layer.outputs:
            if t.producer is layer:
                t.producer = None

    # TensorRT-named conveniences for the common kinds ------------------------------------------------
    def add_constant(self, shape, weights) -> Layer:
        arr = np.asarray(weights)
        arr = arr.reshape(tuple(shape)) if arr.size == int(np.prod(shape, dtype=np.int64)) else arr
        layer = self.add_layer("Constant", [], params={"shape": list(arr.shape)}, weights={"value": arr})
        layer.outputs[0].dtype = DataType.from_numpy(arr.dtype)
        layer.outputs[0].shape = arr.shape
        return layer

    def add_identity(self, input: Tensor) -> Layer:
        return self.add_layer("Identity", [input])

    def add_cast(self, input: Tensor, to_type: DataType) -> Layer:
        layer = self.add_layer("Cast", [input], params={"to": to_type.value})
        layer.outputs[0].dtype = to_type
        return layer

    def add_activation(self, input: Tensor, type: str, alpha=None, beta=None) -> Layer:
        params = {"type": type}
        if alpha is not None:
            params["alpha"] = float(alpha)
        if beta is not None:
            params["beta"] = float(beta)
        return self.add_layer("Activation", [input], params=params)

    def add_elementwise(self, a: Tensor, b: Tensor, op: str) -> Layer:
        return self.add_layer("ElementWise", [a, b], params={"op": op})

    def add_unary(self, input: Tensor, op: str) -> Layer:
        return self.add_layer("Unary", [input], params={"op": op})

    def add_matrix_multiply(self, a: Tensor, op_a: str, b: Tensor, op_b: str) -> Layer:
        return self.add_layer("MatrixMultiply", [a, b], params={"transpose_a": op_a == "TRANSPOSE",
                                                                 "transpose_b": op_b == "TRANSPOSE"})

    def add_convolution(self, input: Tensor, num_output_maps: int, kernel_shape, kernel, bias=None, **params) -> Layer:
        weights = {"kernel": np.asarray(kernel, dtype=np.float32).reshape(num_output_maps, -1, *kernel_shape)}
        if bias is not None:
            weights["bias"] = np.asarray(bias, dtype=np.float32)
        params = {"num_output_maps": int(num_output_maps), "kernel_shape": list(kernel_shape), **params}
        return self.add_layer("Convolution", [input], params=params, weights=weights)

    def add_shuffle(self, input: Tensor, reshape_dims=None, first_transpose=None, second_transpose=None) -> Layer:
        return self.add_layer("Shuffle", [input], params={"reshape_dims": reshape_dims,
                                                          "first_transpose": first_transpose,
                                                          "second_transpose": second_transpose})

    # analysis ----------------------------------------------------------------------------------------
    def consumers(self) -> dict[str, list[Layer]]:
        users: dict[str, list[Layer]] = {}
        for layer in self.layers:
            for t in layer.inputs:
                if t is not None:
                    users.setdefault(t.name, []).append(layer)
            for sub in layer.subgraphs.values():
                for name in sub.outer_references():
                    users.setdefault(name, []).append(layer)
        return users

    def outer_references(self) -> set[str]:
        """Names this (sub)network reads that it neither defines nor takes as inputs."""
        defined = {t.name for t in self.inputs}
        used = set()
        for layer in self.layers:
            for t in layer.inputs:
                if t is not None and t.name not in defined:
                    used.add(t.name)
            for sub in layer.subgraphs.values():
                used |= sub.outer_references() - defined
            defined |= {t.name for t in layer.outputs}
        return used - defined

    def toposort(self):
        """Order layers so every producer precedes its consumers; raises on a cycle."""
        produced_by = {t.name: l for l in self.layers for t in l.outputs}
        order, state = [], {}

        def visit(layer):
            s = state.get(id(layer))
            if s == 2:
                return
            if s == 1:
                raise BuildError(f"network '{self.name}' has a cycle through layer '{layer.name}'")
            state[id(layer)] = 1
            deps = [t.name for t in layer.inputs if t is not None]
            for sub in layer.subgraphs.values():
                deps += list(sub.outer_references())
            for name in deps:
                p = produced_by.get(name)
                if p is not None and p is not layer:
                    visit(p)
            state[id(layer)] = 2
            order.append(layer)

        for layer in list(self.layers):
            visit(layer)
        self.layers = order

    def __repr__(self):
        return f"NetworkDefinition({self.name!r}, {len(self.layers)} layers, inputs={[t.name for t in self.inputs]}, outputs={[t.name for t in self.outputs]})"
