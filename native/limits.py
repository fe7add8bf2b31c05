"""The tensor size limit: the largest tensor a model, a plan or a kernel may ask for.

One limit for the whole front door. The ONNX validator (backends/engine/onnx_parser/validate.py) refuses models that
declare larger tensors, the plan schema refuses plans that record them, and the kernels whose output size comes from
data rather than from the validated model (Tile repeats, Expand and ConstantOfShape shapes, Range bounds, Pad
widths, Resize scales, OneHot depth, ...) check it with `check_size` BEFORE allocating: a mutated weight must give
an ExecutionError naming the layer, not a machine that swaps for a minute or a process the OOM killer takes.

The limit: `set_limits(...)` when a caller set one, else DEBUGKIT_MAX_TENSOR_BYTES (native/config.py), else a
quarter of physical memory.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

from native.config import max_tensor_bytes
from native.errors import ExecutionError


@dataclass
class Limits:
    """What a model may ask for. `max_bytes`: largest tensor (declared, stored, constant-shaped or computed) in
    bytes; `max_elements`: largest element count; `max_depth`: deepest subgraph nesting; `max_rank`: most dims."""
    max_bytes: int
    max_elements: int
    max_depth: int = 32
    max_rank: int = 32


@functools.lru_cache(maxsize=None)
def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


_LIMITS: Limits | None = None


def default_limits() -> Limits:
    """The process-wide limits: `set_limits(...)`, else DEBUGKIT_MAX_TENSOR_BYTES, else a quarter of memory."""
    if _LIMITS is not None:
        return _LIMITS
    max_bytes = max_tensor_bytes() or physical_memory() // 4
    return Limits(max_bytes=max_bytes, max_elements=max(1, max_bytes))


def set_limits(limits: Limits | None):
    """Set (or with None, reset to the default) the limits every later check uses; returns the old ones."""
    global _LIMITS
    old, _LIMITS = _LIMITS, limits
    return old


def _gib(n):
    return f"{n / 2**30:.3g} GiB"


def check_size(op, shape, itemsize=4, what="output"):
    """Raise ExecutionError when a tensor of `shape` (elements of `itemsize` bytes) would exceed the limit.

    `op` is the layer (anything with .name and .kind); `what` says which tensor ("output", "padded input", ...).
    Call it before allocating; returns the element count."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ExecutionError(f"layer '{op.name}' ({op.kind}): {what} shape {dims} has a negative dim")
    count = math.prod(dims)
    span = math.prod(max(d, 1) for d in dims)  # an empty tensor's other dims still size loops and masks
    limits = default_limits()
    if span > limits.max_elements or span * itemsize > limits.max_bytes or len(dims) > limits.max_rank:
        size = f"{count} elements, {_gib(count * itemsize)}" if count == span else \
            f"0 elements, but its other dims span {span} ({_gib(span * itemsize)})"
        raise ExecutionError(f"layer '{op.name}' ({op.kind}): {what} of shape {_short(dims)} ({size}) "
                             f"exceeds the tensor size limit of {_gib(limits.max_bytes)} "
                             f"(DEBUGKIT_MAX_TENSOR_BYTES); the size comes from the layer's input data, so check "
                             f"the tensor that feeds it, or raise the limit if the model really needs this")
    return count


def _short(dims, n=8):
    return str(dims) if len(dims) <= n else str(dims[:n])[:-1] + ", ...]"
