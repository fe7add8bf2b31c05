"""Error statistics that cannot lie: float64 throughout, no NaN from infinities, non-finite values counted apart.

- Absolute and relative errors are computed in float64 from the two tensors' own values (a float32 0.15 is
  0.15000000596..., and that is the value compared).
- A relative error where the reference is exactly 0 (and the values differ) is infinite: it is counted
  (`zero_ref`, first position) and kept out of the reported relative statistics (mean, median, p90, max over the
  elements with a nonzero reference). The statistic a check uses (`check_value`) is taken over every compared
  element with those errors ranked above every finite one, so `quantile 0.5` of [0.1, 0.2, inf] is 0.2 and of
  [0.1, inf, inf] is inf, never the NaN that `np.quantile` interpolates between a finite value and inf.
- NaN and Inf are not errors to average: `NonFiniteCounts` says how many each side holds, how many positions
  mismatch (NaN or Inf on one side only, or Infs of opposite sign) and where the first one is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SideCounts:
    """NaN / +Inf / -Inf counts of one tensor and the first non-finite position."""

    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    first: list | None = None

    @property
    def total(self) -> int:
        return self.nan + self.posinf + self.neginf

    def describe(self) -> str:
        parts = [f"{n} {w}" for n, w in ((self.nan, "NaN"), (self.posinf, "+Inf"), (self.neginf, "-Inf")) if n]
        return ", ".join(parts) if parts else "0 NaN/Inf"

    def to_dict(self) -> dict:
        return {"nan": self.nan, "posinf": self.posinf, "neginf": self.neginf, "first": self.first}


@dataclass
class NonFiniteCounts:
    """NaN/Inf in the compared output (`actual`) and in the reference (`expected`), and where they disagree."""

    actual: SideCounts = field(default_factory=SideCounts)
    expected: SideCounts = field(default_factory=SideCounts)
    mismatched: int = 0                 # positions where NaN/Inf is on one side only (or Infs of opposite sign)
    first_mismatch: list | None = None  # index of the first such position
    matched: int = 0                    # positions where both sides hold the same NaN/Inf

    @property
    def any(self) -> bool:
        return bool(self.actual.total or self.expected.total)

    def describe(self, actual_name="output", expected_name="reference") -> str:
        """'1 +Inf in engine-runner, 0 NaN/Inf in onnxrt-runner; 1 mismatched, first at [0, 0]'."""
        text = f"{self.actual.describe()} in {actual_name}, {self.expected.describe()} in {expected_name}"
        if self.mismatched:
            text += f"; {self.mismatched} position(s) differ, first at {self.first_mismatch}"
        return text

    def to_dict(self) -> dict:
        return {"actual": self.actual.to_dict(), "expected": self.expected.to_dict(), "mismatched": self.mismatched,
                "first_mismatch": self.first_mismatch, "matched": self.matched}


def side_counts(x: np.ndarray) -> SideCounts:
    if x.dtype.kind not in "fc" or x.size == 0:
        return SideCounts()
    nan, inf = np.isnan(x), np.isinf(x)
    bad = nan | inf
    first = [int(i) for i in np.unravel_index(int(np.argmax(bad)), x.shape)] if bad.any() else None
    return SideCounts(int(nan.sum()), int((inf & (x > 0)).sum()), int((inf & (x < 0)).sum()), first)


def first_index(mask: np.ndarray) -> list | None:
    if not mask.any():
        return None
    return [int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape)]


def order_statistic(values: np.ndarray, q: float) -> float:
    """The q-quantile of `values` (>= 0, +inf allowed, no NaN) with numpy's default linear interpolation, except
    that an interpolation touching +inf gives +inf (numpy gives NaN for 0 * inf) and one between equal values
    gives that value."""
    x = np.asarray(values, np.float64).ravel()
    if x.size == 0:
        return 0.0
    pos = float(q) * (x.size - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    finite = x[np.isfinite(x)]
    m = finite.size                       # the infinities rank after every finite value

    def kth(k):
        return float(np.partition(finite, k)[k]) if k < m else float("inf")
    a, b = kth(lo), kth(hi)
    w = pos - lo
    if w == 0 or a == b:
        return a
    return a + w * (b - a)                # b may be inf: inf, never NaN (a is finite here)


def check_value(values: np.ndarray, stat: str, q: float = 0.99) -> float:
    """The statistic a check compares with its tolerance, over every compared element (inf allowed)."""
    x = np.asarray(values, np.float64).ravel()
    if x.size == 0:
        return 0.0
    if stat in ("max", "elemwise"):
        return float(x.max())
    if stat == "mean":
        return float("inf") if np.isinf(x).any() else float(x.mean())
    if stat == "median":
        return order_statistic(x, 0.5)
    if stat == "quantile":
        return order_statistic(x, q)
    raise ValueError(stat)


def summary(x: np.ndarray, index_of=None, shape=None) -> dict:
    """mean, std, min, max (and where), median, p90, p95, p99 of finite values `x` (1-D); `index_of[i]` is the flat
    position of x[i] in a tensor of `shape`, for reporting where the maximum is."""
    if x.size == 0:
        return {}
    i = int(np.argmax(x))
    flat = int(index_of[i]) if index_of is not None else i
    where = [int(v) for v in np.unravel_index(flat, shape)] if shape is not None else [flat]
    q = np.quantile(x, [0.5, 0.9, 0.95, 0.99])
    return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x[i]),
            "argmax": where, "median": float(q[0]), "p90": float(q[1]), "p95": float(q[2]), "p99": float(q[3]),
            "count": int(x.size)}


def distinct(x, ref, digits=4) -> str:
    """`x` printed with enough significant digits that it does not read as `ref` when the two differ (a failing
    'x > tol' must never print x == tol)."""
    if x is None:
        return "-"
    x = float(x)
    if x != x:
        return "nan"
    if x in (float("inf"), -float("inf")):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.{digits}g}"
    if ref is None:
        return text
    ref = float(ref)
    while x != ref and digits < 17 and (text == f"{ref:.{digits}g}" or float(text) == ref):
        digits += 1
        text = f"{x:.{digits}g}"
    return text
