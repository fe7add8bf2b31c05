"""ONNX Loop's iteration routine, the same on every device: the CPU kernel and the GPU tactic call it with their
own flag reader and stacking (a device keeps its values where they are)."""
from __future__ import annotations

import numpy as np


def _scalar_bool(v):
    return bool(np.asarray(v).reshape(-1)[0])


def _stack(parts, info):
    if parts:
        return np.stack([np.asarray(p) for p in parts])
    shape = (info or {}).get("shape") or []
    dtype = (info or {}).get("dtype") or "float32"
    return np.zeros([0] + [max(d, 0) for d in shape], dtype=dtype)


def run_loop(op, inputs, flag=_scalar_bool, stack=_stack) -> list:
    """ONNX Loop: run the body while (i < max_trip_count) and cond; returns the carried values, then each scan
    output stacked over the iterations. `flag` reads a boolean tensor, `stack(parts, info)` stacks one scan output
    (a device passes its own, so its values stay where they are)."""
    body = op.subgraphs["body"]
    trip = inputs[0]
    trip = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    cond = True if inputs[1] is None else flag(inputs[1])
    carried = list(inputs[2:])
    n = len(carried)
    infos = op.params.get("scan_outputs") or []
    scans = [[] for _ in infos]
    i = 0
    while (trip is None or i < trip) and cond:
        outs = body([np.array(i, np.int64), np.array(cond), *carried])
        cond = flag(outs[0])
        carried = list(outs[1:1 + n])
        if len(scans) < len(outs) - 1 - n:
            scans += [[] for _ in range(len(outs) - 1 - n - len(scans))]
        for k, v in enumerate(outs[1 + n:]):
            scans[k].append(v)
        i += 1
    return carried + [stack(s, infos[k] if k < len(infos) else None) for k, s in enumerate(scans)]
