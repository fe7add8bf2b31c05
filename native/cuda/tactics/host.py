"""Host layers: every CPU tactic wrapped for the CUDA device (copy the inputs out, run the CPU tactic with the
CPU's numerics, copy the outputs back). They make every layer kind the CPU supports runnable on a CUDA engine,
and the inspector shows them as `host:<cpu tactic>` so nobody mistakes them for GPU kernels."""
from __future__ import annotations

import dataclasses

from native.cuda.array import to_device, to_host
from native.tactics import Tactic, register_twins


class HostTactic(Tactic):
    device = "cuda"
    inner: Tactic = None
    host_layer = True

    def supports(self, op, input_shapes):
        return self.inner.supports(op, input_shapes)

    def workspace_size(self, op, input_shapes):
        return 0

    def prepare(self, op):
        from native.device import get_device
        return get_device("cpu").prepare(self.inner, op)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.device import get_device
        host = [to_host(x) for x in inputs]
        if op.subgraphs:   # bodies run on the CUDA device; the CPU kernel wants host values back
            op = dataclasses.replace(op, subgraphs={k: _host_body(f) for k, f in op.subgraphs.items()})
        outs = get_device("cpu").run(self.inner, op, host)
        return [to_device(y) for y in outs]


def _host_body(fn):
    return lambda xs: [to_host(y) for y in fn([to_device(x) for x in xs])]


def wrap_cpu_tactics():
    """Register a host twin of every CPU tactic registered so far (idempotent)."""
    register_twins("cpu", HostTactic, "host:", precisions=lambda t: t.precisions)
