"""Memory plan: intermediate buffers share an arena; each tensor gets an offset that no tensor alive at the
same time overlaps (first fit in order of size). The builder plans at the profile's opt shapes (the size it logs
and records); the runtime plans each input-shape signature it meets with the same `place` (runtime/arena.py)."""
from __future__ import annotations

import numpy as np

ALIGN = 256


def place(live) -> tuple[dict, int]:
    """live: (name, first step, last step, bytes) per tensor, lifetimes inclusive. Returns ({name: byte offset},
    arena bytes): tensors whose lifetimes overlap (sharing a step counts) never overlap in memory; every offset
    is ALIGN-aligned."""
    placed = []  # (start, end, offset, size)
    offsets = {}
    for name, s, e, size in sorted(live, key=lambda x: -x[3]):
        size = (size + ALIGN - 1) // ALIGN * ALIGN
        clashes = sorted((o, o + sz) for (ps, pe, o, sz) in placed if not (pe < s or e < ps))
        offset = 0
        for lo, hi in clashes:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((s, e, offset, size))
        offsets[name] = offset
    return offsets, int(max((o + sz for (_, _, o, sz) in placed), default=0))


def plan_memory(graph, sizes: dict) -> dict:
    """sizes: tensor name -> bytes at opt shapes. Returns {"arena_bytes", "naive_bytes", "offsets"}."""
    outputs, inputs = set(graph.output_names), set(graph.input_names)
    first, last = {}, {}
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            first.setdefault(name, i)
            last.setdefault(name, i)
        for name in node.inputs:
            if name is not None:
                last[name] = i
    for node in graph.nodes:
        if node.kind == "Constant":
            for name in node.outputs:
                first.pop(name, None)
    live = [(name, first[name], last[name] if name not in outputs else len(graph.nodes),
             int(sizes.get(name, 0))) for name in first if name not in inputs and sizes.get(name, 0) > 0]
    offsets, arena = place(live)
    naive = int(sum(x[3] for x in live))
    return {"arena_bytes": arena, "naive_bytes": naive, "offsets": offsets}


def tensor_bytes(value) -> int:
    return int(value.nbytes) if isinstance(value, np.ndarray) else 0
