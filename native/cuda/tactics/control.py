"""Control flow on the GPU: `If` and `Loop` whose bodies run on the device with device tensors throughout. The
condition (and a loop's trip condition) is read back once per decision, a stream sync each, as any data-dependent
branch needs; the chosen body's layers are ordinary GPU layers. Loop scan outputs are stacked on the device.
(The host twins copy every value out and back around each body run.)"""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray, to_device, to_host
from native.cuda.driver import context
from native.shared.loop import run_loop
from native.tactics import Tactic, TacticRefusal, register_tactic

ANY = ("float32", "float16", "bfloat16", "fp8", "int8")


def _flag(v) -> bool:
    return bool(np.asarray(to_host(v)).reshape(-1)[0])


def _stack(parts, info) -> GpuArray:
    """parts (same shape and type) stacked along a new first axis, on the device."""
    if not parts:
        shape = (info or {}).get("shape") or []
        return GpuArray([0] + [max(int(d), 0) for d in shape], (info or {}).get("dtype") or "float32")
    parts = [to_device(np.asarray(p) if not isinstance(p, GpuArray) else p) for p in parts]
    first = parts[0]
    if any(p.shape != first.shape or p.dtype != first.dtype for p in parts):
        raise TacticRefusal("scan outputs of varying shape are stacked on the host")
    out = GpuArray((len(parts),) + first.shape, first.dtype)
    for i, p in enumerate(parts):
        context().copy(out.ptr + i * p.nbytes, p.ptr, p.nbytes)
    return out


@register_tactic
class GpuIf(Tactic):
    """Runs the branch the condition names; the branch's layers are on the device."""

    kind, name, device = "If", "device-branch", "cuda"
    precisions = ANY

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        outs = op.subgraphs["then" if _flag(inputs[0]) else "else"]([])
        return [to_device(o) if isinstance(o, np.ndarray) else o for o in outs]


@register_tactic
class GpuLoop(Tactic):
    """ONNX Loop: carried values stay on the device between iterations, scan outputs are stacked there."""

    kind, name, device = "Loop", "device-body", "cuda"
    precisions = ANY

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        outs = run_loop(op, inputs, flag=_flag, stack=_stack)
        return [to_device(v) if isinstance(v, np.ndarray) else v for v in outs]
