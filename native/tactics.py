"""Tactics: the implementations a layer can run with, per (layer kind, device).

A tactic is a real alternative (im2col-GEMM vs direct convolution, BLAS vs blocked matmul) with a stable id.
The builder times the candidates that `supports()` a layer and records the winner's id in the plan;
replaying a plan or an algorithm-selector choice means looking the id up here again.

Kernels see an `Op`: the layer's kind, name, JSON-able params, packed weights and, for control flow,
callables that run its subgraphs. They never see ONNX.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from native.errors import BuildError


@dataclass
class Op:
    """What a tactic runs: one layer as the runtime knows it."""

    kind: str
    name: str
    params: dict
    weights: dict = field(default_factory=dict)
    subgraphs: dict = field(default_factory=dict)  # name -> callable(list_of_inputs) -> list_of_outputs
    precision: str = "float32"


class Tactic:
    """One implementation of one layer kind on one device.

    Subclasses set `kind`, `name` (unique per kind and device) and implement `run`; the id is derived from
    (device, kind, name) so it is stable across versions and machines.
    """

    kind: str = ""
    name: str = ""
    device: str = "cpu"
    precisions: tuple = ("float32",)
    formats: tuple = ("linear",)

    @property
    def id(self) -> int:
        return zlib.crc32(f"{self.device}:{self.kind}:{self.name}".encode()) & 0x7FFFFFFF

    def supports(self, op: Op, input_shapes) -> bool:
        """Whether this tactic can run `op` for inputs of these shapes (None where unknown)."""
        return True

    def workspace_size(self, op: Op, input_shapes) -> int:
        return 0

    def prepare(self, op: Op) -> dict:
        """Pre-pack weights at build time; the returned arrays go into the plan and come back as `op.weights`."""
        return op.weights

    def run(self, op: Op, inputs: list) -> list:
        raise NotImplementedError

    def __repr__(self):
        return f"<Tactic {self.device}:{self.kind}:{self.name} id={self.id}>"


_REGISTRY: dict[tuple[str, str], list[Tactic]] = {}


def register_tactic(cls):
    """Class decorator: instantiate the tactic and add it to the registry."""
    tactic = cls()
    assert tactic.kind and tactic.name, f"{cls.__name__} needs kind and name"
    bucket = _REGISTRY.setdefault((tactic.device, tactic.kind), [])
    if any(t.name == tactic.name for t in bucket):
        raise ValueError(f"tactic {tactic.device}:{tactic.kind}:{tactic.name} registered twice")
    bucket.append(tactic)
    return cls


def simple_tactic(kind: str, name: str = "numpy", device: str = "cpu") -> Callable:
    """Decorator turning `fn(op, inputs) -> list` into a registered single tactic for `kind`."""

    def wrap(fn):
        cls = type(f"{kind}_{name}", (Tactic,), {"kind": kind, "name": name, "device": device,
                                                  "run": lambda self, op, inputs: fn(op, inputs),
                                                  "__doc__": fn.__doc__})
        register_tactic(cls)
        return fn

    return wrap


def tactics_for(kind: str, device: str = "cpu") -> list[Tactic]:
    _load_kernels(device)
    return list(_REGISTRY.get((device, kind), []))


def tactic_by_id(kind: str, tactic_id: int, device: str = "cpu") -> Tactic:
    for tactic in tactics_for(kind, device):
        if tactic.id == tactic_id:
            return tactic
    raise BuildError(f"no tactic with id {tactic_id} for layer kind '{kind}' on device '{device}'; "
                     f"known: {[(t.name, t.id) for t in tactics_for(kind, device)]}")


def registered_kinds(device: str = "cpu") -> list[str]:
    _load_kernels(device)
    return sorted(k for (d, k) in _REGISTRY if d == device)


_LOADED = set()


def _load_kernels(device):
    if device in _LOADED:
        return
    _LOADED.add(device)
    if device in ("cpu", "dla"):
        import native.cpu.kernels  # noqa: F401  (registers the CPU tactics)
    if device == "dla":
        import native.dla  # noqa: F401
    if device == "cuda":
        import native.cuda  # noqa: F401


def as_array(x, dtype=None):
    a = np.asarray(x)
    return a.astype(dtype) if dtype is not None and a.dtype != dtype else a
