"""Per-tensor statistics and the thresholds the calibrators derive from them.

Every calibrator collects the absolute maximum of each tensor over all batches (pass 1). The histogram-based ones
(entropy2, entropy, percentile) then histogram |x| into 2048 equal bins over [0, amax] (pass 2) and pick a threshold
T <= amax; the tensor's scale is T / 127.

- minmax:      T = amax (the full range, no clipping).
- entropy / entropy2: the KL-divergence search over the histogram of the non-zero |x| (exact zeros, half of a ReLU
  output, are quantized exactly whatever the threshold, and as one huge first bin they would dominate Q). A tensor
  with fewer than MIN_HISTOGRAM_VALUES non-zero values keeps its full range. For every candidate of i = 128..2048 bins, P is the first i bins with
  everything beyond folded into the last one (clipping), Q is those i bins merged into 128 quantization levels and
  spread back evenly over the bins that were non-zero; the i with the smallest KL(P || Q) wins and T is the upper
  edge of bin i. It trades clipping error against rounding error, ignoring rare outliers.
- percentile:  T = the value below which `percentile` % of |x| lies (99.99 by default).
"""
from __future__ import annotations

import numpy as np

BINS = 2048
LEVELS = 128
# below 16 non-zero values per bin on average, the KL minimum of a 2048-bin histogram is mostly sampling noise
# (squeeze-excite's pooled [N, C, 1, 1] vectors: a few hundred values); such tensors keep their full range
MIN_HISTOGRAM_VALUES = 16 * BINS


class TensorStats:
    """amax, then an |x| histogram over [0, amax]."""

    def __init__(self):
        self.amax = 0.0
        self.hist = None
        self.count = 0
        self.nonzero = 0

    def observe_range(self, x, device=None):
        """`x`: a numpy array, or a tensor of `device` (its abs_max runs where the tensor is)."""
        if x.size:
            a = float(np.max(np.abs(x))) if isinstance(x, np.ndarray) or device is None else device.abs_max(x)
            if a is not None and np.isfinite(a):
                self.amax = max(self.amax, a)
        self.count += x.size

    def observe_histogram(self, x, device=None):
        if self.hist is None:
            self.hist = np.zeros(BINS, np.int64)
        if self.amax <= 0 or not x.size:
            return
        if not isinstance(x, np.ndarray) and device is not None:
            h = device.abs_histogram(x, self.amax, BINS)
            self.hist += h
            self.nonzero += int(h.sum())
            return
        a = np.abs(x.astype(np.float32, copy=False).ravel())
        a = a[np.isfinite(a) & (a != 0)]   # exact zeros (ReLU's half) quantize exactly at any threshold
        idx = np.minimum((a * (BINS / self.amax)).astype(np.int64), BINS - 1)
        self.hist += np.bincount(idx, minlength=BINS)
        self.nonzero += a.size


def kl_threshold_bins(hist) -> int:
    """The number of bins i (128..2048) whose clipped distribution is closest in KL to its 128-level quantization."""
    hist = np.asarray(hist, np.float64)
    total_tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])   # total_tail[i] = sum(hist[i:])
    best_i, best_kl = BINS, np.inf
    for i in range(LEVELS, BINS + 1):
        p = hist[:i].copy()
        p[i - 1] += total_tail[i]
        if p.sum() == 0:
            continue
        ref = hist[:i]
        nonzero = ref != 0
        edges = (np.arange(LEVELS + 1) * i) // LEVELS
        sums = np.add.reduceat(ref, edges[:-1])
        counts = np.add.reduceat(nonzero.astype(np.float64), edges[:-1])
        per = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        q = np.repeat(per, np.diff(edges)) * nonzero
        p = p / p.sum()
        if q.sum() == 0:
            continue
        q = q / q.sum()
        mask = p > 0   # where Q has no mass but P has (the folded-in tail), a tiny floor keeps KL finite
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return best_i


def threshold(stats: TensorStats, algorithm: str, percentile: float = 99.99) -> float:
    """The calibrated |x| threshold of one tensor (0 for a tensor that was uniformly zero)."""
    if stats.amax <= 0:
        return 0.0
    if algorithm == "minmax" or stats.hist is None or stats.hist.sum() == 0:
        return stats.amax
    width = stats.amax / BINS
    if algorithm in ("entropy", "entropy2"):
        if stats.nonzero < MIN_HISTOGRAM_VALUES:
            return stats.amax
        i = kl_threshold_bins(stats.hist)
        return (i + 0.5) * width if i < BINS else stats.amax
    if algorithm == "percentile":
        cdf = np.cumsum(stats.hist) / stats.hist.sum()
        i = int(np.searchsorted(cdf, percentile / 100.0))
        return min(stats.amax, (i + 1) * width)
    raise ValueError(f"unknown calibration algorithm {algorithm!r}")
