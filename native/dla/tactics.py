"""DLA tactics: every CPU kernel wrapped with DLA numerics (device "dla"), plus the two host-side layers a DLA
build adds: `DlaLoadable` (runs a loadable's body on the DLA device, reading and writing DLA formats) and
`DlaReformat` (host linear FP32 <-> a DLA format at a loadable's boundary)."""
from __future__ import annotations

import dataclasses

from native.dla.formats import pack, unpack
from native.dla.numerics import dla_weights, run_dla
from native.tactics import Tactic, register_tactic, register_twins


class DlaTactic(Tactic):
    """A CPU kernel run as the DLA computes: precision and scales from op.params['dla']."""

    device = "dla"
    precisions = ("float16", "int8")
    inner: Tactic = None

    def supports(self, op, input_shapes):
        return self.inner.supports(dataclasses.replace(op, precision="float32"), input_shapes)

    def workspace_size(self, op, input_shapes):
        return self.inner.workspace_size(op, input_shapes)

    def prepare(self, op):
        dla = op.params.get("dla") or {}
        weights = dla_weights(op.kind, op.weights, dla.get("precision", "float16"), dla.get("profile", "orin"),
                              op.params)
        return self.inner.prepare(dataclasses.replace(op, weights=weights))

    def run(self, op, inputs):
        inner = dataclasses.replace(op, precision="float32")   # the CPU kernel computes in FP32; run_dla rounds
        return run_dla(lambda o, xs: self.inner.run(dataclasses.replace(o, precision="float32"), xs), inner, inputs,
                       op.params.get("dla") or {})


# a Reformat to or from float32 at a network's inputs and outputs is the conversion of the DLA's FP16 / INT8 I/O
# at the boundary (the values are FP16's or INT8's either way), so its twin may be assigned float32
IO_PRECISIONS = ("float32", "float16", "int8")


def wrap_cpu_tactics():
    """Register a DLA twin of every CPU tactic registered so far (idempotent)."""
    register_twins("cpu", DlaTactic, "dla:",    # the DLA's own rounding is applied around FP32 kernels
                   keep=lambda t: t.kind not in ("DlaLoadable", "DlaReformat") and "float32" in t.precisions,
                   precisions=lambda t: IO_PRECISIONS if t.kind == "Reformat" else DlaTactic.precisions)


@register_tactic
class LoadableTactic(Tactic):
    """Runs a DLA loadable: unpack the inputs from their DLA formats, run the body on the DLA device, pack the
    outputs. params: inputs / outputs = [{"format", "dtype", "shape", "scale"}] per boundary tensor."""

    kind = "DlaLoadable"
    name = "dla_loadable"
    precisions = ("float32", "float16", "int8")
    subgraph_device = "dla"

    def run(self, op, inputs):
        ins = [unpack(a, d["format"], d["shape"], d["dtype"], d.get("scale"))
               for a, d in zip(inputs, op.params["inputs"])]
        outs = op.subgraphs["body"](ins)
        return [pack(y, d["format"], d["dtype"], d.get("scale"), op.params.get("hwc4_align", 64))
                for y, d in zip(outs, op.params["outputs"])]


@register_tactic
class ReformatTactic(Tactic):
    """Host linear FP32 <-> a DLA format (params: direction to_dla | from_dla, format, dtype, shape, scale)."""

    kind = "DlaReformat"
    name = "dla_reformat"
    precisions = ("float32", "float16", "int8")

    def run(self, op, inputs):
        p = op.params
        if p["direction"] == "to_dla":
            return [pack(inputs[0], p["format"], p["dtype"], p.get("scale"), p.get("hwc4_align", 64))]
        return [unpack(inputs[0], p["format"], p["shape"], p["dtype"], p.get("scale"))]
