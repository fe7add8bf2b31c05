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


def _kl_at(hist, total_tail, i):
    """KL(P || Q) for the first i bins (the clipped P against its LEVELS-level quantization Q); None when P or Q has
    no mass. The reference arithmetic: kl_threshold_bins' answer is the first i where this is smallest."""
    p = hist[:i].copy()
    p[i - 1] += total_tail[i]
    if p.sum() == 0:
        return None
    ref = hist[:i]
    nonzero = ref != 0
    edges = (np.arange(LEVELS + 1) * i) // LEVELS
    sums = np.add.reduceat(ref, edges[:-1])
    counts = np.add.reduceat(nonzero.astype(np.float64), edges[:-1])
    per = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    q = np.repeat(per, np.diff(edges)) * nonzero
    p = p / p.sum()
    if q.sum() == 0:
        return None
    q = q / q.sum()
    mask = p > 0   # where Q has no mass but P has (the folded-in tail), a tiny floor keeps KL finite
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def _kl_all(hist, total_tail) -> np.ndarray:
    """KL for every i = LEVELS..BINS at once (inf where P or Q has no mass), equal to _kl_at up to float rounding.
    Inside a level, Q is one value on every non-zero bin, so sum_j p_j log q_j is a per-level sum (of p over the
    level times log q): KL(i) = sum_{j<i-1} p_j log p_j (one cumulative sum for every i) - sum_k P_k log q_k + the
    last bin's term, O(LEVELS) per i instead of O(i). Bin counts are integers, so the sums of counts are exact."""
    n = hist.size
    total = float(hist.sum())
    if total <= 0:
        return np.full(n - LEVELS + 1, np.inf)
    ii = np.arange(LEVELS, n + 1)
    c = np.concatenate([[0.0], np.cumsum(hist)])                 # c[j] = sum(hist[:j])
    cn = np.concatenate([[0.0], np.cumsum((hist != 0).astype(np.float64))])
    edges = (np.arange(LEVELS + 1)[None, :] * ii[:, None]) // LEVELS   # [I, LEVELS + 1]
    sums, counts = c[edges[:, 1:]] - c[edges[:, :-1]], cn[edges[:, 1:]] - cn[edges[:, :-1]]
    per = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    qsum = sums.sum(axis=1)                                      # Q's mass: sum_k per_k * counts_k
    safe = np.where(qsum > 0, qsum, 1.0)
    p = hist / total
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.concatenate([[0.0], np.cumsum(np.where(p > 0, p * np.log(p), 0.0))])
        last = ii - 1
        mass = sums / total                                      # P's mass per level, the last bin's taken out:
        mass[:, -1] -= hist[last] / total
        logq = np.where(per > 0, np.log(per / safe[:, None]), 0.0)
        kl = plogp[last] - (mass * logq).sum(axis=1)
        p_last = (hist[last] + total_tail[ii]) / total
        q_last = per[:, -1] * (hist[last] != 0) / safe
        kl += np.where(p_last > 0, p_last * np.log(p_last / np.maximum(q_last, 1e-12)), 0.0)
    return np.where(qsum > 0, kl, np.inf)


def kl_threshold_bins(hist) -> int:
    """The number of bins i (128..2048) whose clipped distribution is closest in KL to its 128-level quantization:
    the first i where _kl_at is smallest. _kl_all finds the few i near the minimum at once (a per-i loop cost ~60 ms a
    tensor, 13 s of a ResNet-50 calibration), and _kl_at decides among them in its own arithmetic, so the answer is
    the loop's to the bit."""
    hist = np.asarray(hist, np.float64)
    total_tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])   # total_tail[i] = sum(hist[i:])
    approx = _kl_all(hist, total_tail)
    if not np.isfinite(approx).any():
        return hist.size
    low = float(np.min(approx))
    near = np.flatnonzero(approx <= low + 1e-9 * abs(low) + 1e-12) + LEVELS
    best_i, best_kl = hist.size, np.inf
    for i in near:
        kl = _kl_at(hist, total_tail, int(i))
        if kl is not None and kl < best_kl:
            best_kl, best_i = kl, int(i)
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
