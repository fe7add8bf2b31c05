"""--postprocess: transforms applied to both sides' outputs before they are compared (Polygraphy's spelling).

`top-K` keeps the indices of the K largest values along an axis (default the last), largest first, ties in index
order (a stable sort, as Polygraphy's); K beyond the axis length keeps the whole axis. `argmax` is the index of the
largest value along the axis, which is removed (np.argmax). Either may name an output (`out0:top-5`) and an axis
(`top-5,axis=1`); an entry without a name applies to every output that has no entry of its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from native.errors import UsageError


@dataclass(frozen=True)
class Postprocess:
    kind: str          # "top-k" or "argmax"
    k: int = 1
    axis: int = -1

    def __str__(self):
        base = f"top-{self.k}" if self.kind == "top-k" else "argmax"
        return base + (f",axis={self.axis}" if self.axis != -1 else "")

    def apply(self, x):
        x = np.asarray(x)
        if x.ndim == 0:
            raise UsageError(f"--postprocess {self}: the output is a scalar (no axis to take it along)")
        if not -x.ndim <= self.axis < x.ndim:
            raise UsageError(f"--postprocess {self}: axis {self.axis} is out of range for an output of shape "
                             f"{list(x.shape)}")
        if x.dtype.kind not in "fiub":
            raise UsageError(f"--postprocess {self}: needs numbers, the output holds {x.dtype}")
        if self.kind == "argmax":
            return np.argmax(x, axis=self.axis)
        order = np.argsort(-x.astype(np.float64), axis=self.axis, kind="stable")
        k = min(self.k, x.shape[self.axis])
        return np.take(order, np.arange(k), axis=self.axis)


_SPEC = re.compile(r"^(?:(?P<name>.+):)?(?P<kind>top-(?P<k>\d+)|argmax)(?:,axis=(?P<axis>-?\d+))?$")


def parse_postprocess(items) -> dict:
    """["top-5", "out0:top-1,axis=1", "argmax"] -> {"": Postprocess, "out0": Postprocess}."""
    out = {}
    for item in items or []:
        m = _SPEC.match(str(item).strip())
        if not m:
            raise UsageError(f"--postprocess '{item}': expected [NAME:]top-K[,axis=A] or [NAME:]argmax[,axis=A], "
                             f"e.g. top-5, logits:top-1, argmax,axis=1")
        if m.group("k") is not None and int(m.group("k")) < 1:
            raise UsageError(f"--postprocess '{item}': K must be >= 1")
        kind = "argmax" if m.group("kind") == "argmax" else "top-k"
        out[m.group("name") or ""] = Postprocess(kind, int(m.group("k") or 1),
                                                 int(m.group("axis")) if m.group("axis") else -1)
    return out


def for_output(spec: dict, name: str):
    """The Postprocess that applies to output `name`, or None."""
    return spec.get(name, spec.get("")) if spec else None
