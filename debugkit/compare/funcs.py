"""Compare functions: simple (atol/rtol + error statistic), indices (top-k), L2, cosine, PSNR, SNR.

Each returns an OutputResult: pass/fail, the error statistics, and for `simple` the smallest atol and rtol that
would have passed. NaN/Inf policy: matching infinities (same sign, same place) are equal unless inf_equal=False;
matching NaNs are equal only with nan_equal=True; a NaN or Inf on one side only always fails.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

# (atol, rtol) by dtype: what a correct FP32/FP16 kernel with another summation order achieves.
DEFAULT_TOLERANCES = {"float64": (1e-8, 1e-7), "float32": (1e-4, 1e-3), "float16": (1e-2, 1e-2),
                      "bfloat16": (5e-2, 5e-2)}
ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
# Layerwise noise floor, as a fraction of an intermediate tensor's largest reference magnitude: a float32 conv summing
# thousands of products in another order differs by ~1e-6 of its scale, so a fixed atol of 1e-4 would flag rounding
# in every large-valued layer (ppocr_v4_det's 200-magnitude convs) as a divergence.
DEFAULT_SCALE_TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}


@dataclass
class OutputResult:
    name: str
    passed: bool
    func: str = "simple"
    reason: str = ""
    dtype: str = ""
    shape: tuple = ()
    atol: float | None = None
    rtol: float | None = None
    min_atol: float | None = None     # smallest atol that passes on its own
    min_rtol: float | None = None     # smallest rtol that passes on its own
    stats: dict = field(default_factory=dict)   # absolute-error statistics
    rel_stats: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # l2, cosine, psnr, snr, mismatches...
    histogram: list = field(default_factory=list)

    @property
    def max_abs(self):
        return self.stats.get("max")

    @property
    def max_rel(self):
        return self.rel_stats.get("max")


class Tolerances:
    """atol/rtol/error-stat per output with "" as the default; unset values fall back to DEFAULT_TOLERANCES."""

    def __init__(self, atol=None, rtol=None, check_error_stat=None, quantile=0.99):
        self.atol = dict(atol or {})
        self.rtol = dict(rtol or {})
        self.stat = dict(check_error_stat or {})
        self.quantile = quantile
        for name, s in self.stat.items():
            if s not in ERROR_STATS:
                from native.errors import UsageError
                raise UsageError(f"--check-error-stat {name + ':' if name else ''}{s}: choose one of {ERROR_STATS}")

    def names(self):
        return {n for d in (self.atol, self.rtol, self.stat) for n in d if n}

    def for_output(self, name, dtype):
        d_atol, d_rtol = default_tolerance(dtype)
        atol = self.atol.get(name, self.atol.get("", d_atol))
        rtol = self.rtol.get(name, self.rtol.get("", d_rtol))
        return float(atol), float(rtol), self.stat.get(name, self.stat.get("", "elemwise"))


def default_tolerance(dtype) -> tuple:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[name]
    return (0.0, 0.0)  # ints, bools, strings: exact


def _common_dtype(a, b):
    """The less precise of the two float dtypes (what tolerances should be judged by)."""
    order = ["float64", "float32", "bfloat16", "float16"]
    names = [x.dtype.name for x in (a, b)]
    floats = [n for n in names if n in order]
    return max(floats, key=order.index) if floats else names[1]


def _stats(x: np.ndarray, prefix_index=True) -> dict:
    if x.size == 0:
        return {}
    flat = x.ravel()
    i = int(np.argmax(flat))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        q = np.quantile(flat, [0.5, 0.9, 0.95, 0.99])
        std = float(flat.std())
        mean = float(flat.mean())
    return {"mean": mean, "std": std, "min": float(flat.min()), "max": float(flat[i]),
            "argmax": [int(v) for v in np.unravel_index(i, x.shape)], "median": float(q[0]),
            "p90": float(q[1]), "p95": float(q[2]), "p99": float(q[3])}


def histogram(x: np.ndarray, bins=10, width=40) -> list[str]:
    """A text histogram of x (absolute errors): one line per bin."""
    x = x.ravel()
    if x.size == 0:
        return []
    hi = float(x.max())
    counts, edges = np.histogram(x, bins=bins, range=(0.0, hi if hi > 0 else 1.0))
    top = max(int(counts.max()), 1)
    return [f"[{edges[k]:<10.4g}, {edges[k + 1]:<10.4g}) | {int(counts[k]):>9} | {'#' * int(round(width * counts[k] / top))}"
            for k in range(bins)]


def _nonfinite(actual, expected, nan_equal, inf_equal):
    """(bad-mask explanation, mask of positions excluded because they match). Positions that mismatch fail."""
    a_nan, e_nan = np.isnan(actual), np.isnan(expected)
    a_inf, e_inf = np.isinf(actual), np.isinf(expected)
    both_nan = a_nan & e_nan
    same_inf = a_inf & e_inf & (np.sign(actual) == np.sign(expected))
    bad = (a_nan ^ e_nan) | ((a_inf | e_inf) & ~same_inf & ~(a_nan | e_nan))
    problems = []
    if bad.any():
        problems.append(f"{int(bad.sum())} NaN/Inf value(s) on one side only")
    if both_nan.any() and not nan_equal:
        problems.append(f"{int(both_nan.sum())} NaN(s) on both sides (use --allow-nan to treat matching NaNs as equal)")
        bad = bad | both_nan
    if same_inf.any() and not inf_equal:
        problems.append(f"{int(same_inf.sum())} matching Inf(s) (treated as unequal by request)")
        bad = bad | same_inf
    return bad, both_nan | same_inf, problems


def _prepare(name, actual, expected, func):
    a, e = np.asarray(actual), np.asarray(expected)
    res = OutputResult(name, False, func, dtype=e.dtype.name, shape=tuple(e.shape))
    if a.shape != e.shape:
        res.reason = f"shape mismatch: {list(a.shape)} vs reference {list(e.shape)}"
        return None, None, res
    if a.dtype.kind in "OUS" or e.dtype.kind in "OUS":
        eq = np.array_equal(a.astype(str), e.astype(str))
        res.passed, res.reason = eq, "" if eq else "string values differ"
        return None, None, res
    return a, e, res


def compare_simple(name, actual, expected, tolerances: Tolerances | None = None, nan_equal=False,
                   inf_equal=True, hist=True, scale_tol=None) -> OutputResult:
    """Pass where |a - e| <= atol or |a - e| <= rtol * |e| (per element, or on the chosen error statistic).
    scale_tol (layerwise checks): atol is raised to scale_tol * max|e| so rounding noise of large tensors passes."""
    a, e, res = _prepare(name, actual, expected, "simple")
    if a is None:
        return res
    dtype = _common_dtype(a, e)
    atol, rtol, stat = (tolerances or Tolerances()).for_output(name, dtype)
    if scale_tol and e.size and e.dtype.kind == "f":
        finite = np.abs(e[np.isfinite(e)])
        if finite.size:
            floor = float(scale_tol) * float(finite.max())
            if floor > atol:
                atol = floor
                res.metrics["scaled_atol"] = floor
    res.atol, res.rtol, res.metrics["error_stat"] = atol, rtol, stat
    if a.dtype == bool or e.dtype == bool:
        mism = np.asarray(a, bool) != np.asarray(e, bool)
        n = int(mism.sum())
        res.passed, res.metrics["mismatches"] = n == 0, n
        res.min_atol = res.min_rtol = 0.0 if n == 0 else None
        res.reason = "" if n == 0 else f"{n} of {mism.size} bool values differ"
        return res
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        bad, matched, problems = _nonfinite(a64, e64, nan_equal, inf_equal)
        ok = ~(bad | matched)
        absdiff = np.where(ok, np.abs(a64 - e64), 0.0)
        # relative error is undefined where the reference is exactly 0: say inf (no rtol alone can pass it)
        # rather than a meaningless 1e300 from dividing by the smallest float
        reldiff = np.where(ok, absdiff / np.abs(e64), 0.0)
        reldiff = np.where(ok & (absdiff == 0), 0.0, reldiff)
    res.stats, res.rel_stats = _stats(absdiff), _stats(reldiff)
    res.metrics["nonfinite"] = int((~np.isfinite(a64)).sum()), int((~np.isfinite(e64)).sum())
    if stat == "elemwise":
        fail = (absdiff > atol) & (reldiff > rtol)
        res.min_atol, res.min_rtol = float(absdiff.max(initial=0.0)), float(reldiff.max(initial=0.0))
        nfail = int(fail.sum())
        res.metrics["mismatches"] = nfail
        passed = nfail == 0
        why = f"{nfail} of {fail.size} elements exceed both atol={atol:g} and rtol={rtol:g}"
    else:
        pick = {"max": np.max, "mean": np.mean, "median": np.median,
                "quantile": lambda x: np.quantile(x, tolerances.quantile if tolerances else 0.99)}[stat]
        sa, sr = (float(pick(x)) if x.size else 0.0 for x in (absdiff, reldiff))
        res.min_atol, res.min_rtol = sa, sr
        passed = sa <= atol or sr <= rtol
        why = f"{stat} error abs={sa:.4g} > atol={atol:g} and rel={sr:.4g} > rtol={rtol:g}"
    if problems:
        res.passed, res.reason = False, "; ".join(problems)
        res.min_atol = res.min_rtol = None
    else:
        res.passed, res.reason = passed, "" if passed else why
        if not passed:
            perm = row_permutation(a64, e64, atol, rtol)
            if perm:
                res.metrics["row_permutation"] = perm
                moves = ", ".join(f"{i}<-{j}" for i, j in perm[:6]) + (", ..." if len(perm) > 6 else "")
                res.reason += (f"; the {len(perm)} differing rows (axis 0) equal reference rows in another order "
                               f"(ours<-reference: {moves}): a sorted output (detections, top-k) whose near-tied "
                               f"entries swapped? if its sort key (the scores) matches, check this one with "
                               f"--check-error-stat NAME:quantile")
    if hist and not res.passed:
        res.histogram = histogram(absdiff)
    return res


def row_permutation(a, e, atol, rtol, limit=64):
    """[(i, j), ...] when every row of `a` (along axis 0) that is out of tolerance equals a different out-of-
    tolerance row j of `e`, i.e. the mismatch is a reordering of rows (at most `limit` of them); else None."""
    if a.ndim == 0 or a.shape != e.shape or a.shape[0] < 2 or not (np.isfinite(a).all() and np.isfinite(e).all()):
        return None
    n = a.shape[0]
    ar, er = a.reshape(n, -1), e.reshape(n, -1)

    def close(x, y):
        d = np.abs(x - y)
        return (d <= atol) | (d <= rtol * np.abs(y))
    bad = np.nonzero(~close(ar, er).all(axis=1))[0]
    if len(bad) < 2 or len(bad) > limit:
        return None
    free, pairs = set(int(j) for j in bad), []
    for i in bad:
        j = next((j for j in sorted(free) if j != i and close(ar[i], er[j]).all()), None)
        if j is None:
            return None
        free.discard(j)
        pairs.append((int(i), j))
    return pairs


def compare_indices(name, actual, expected, index_tolerance=0) -> OutputResult:
    """Top-k indices along the last axis: each index may move by up to `index_tolerance` positions; the last
    `index_tolerance` positions are not checked."""
    a, e, res = _prepare(name, actual, expected, "indices")
    if a is None:
        return res
    tol = int(index_tolerance)
    k = e.shape[-1] if e.ndim else 1
    a2, e2 = a.reshape(-1, k), e.reshape(-1, k)
    worst, bad = 0, 0
    for row_a, row_e in zip(a2, e2):
        for pos in range(max(k - tol, 0)):
            where = np.nonzero(row_a == row_e[pos])[0]
            shift = int(np.abs(where - pos).min()) if where.size else k
            worst = max(worst, shift)
            bad += shift > tol
    res.metrics.update(max_index_shift=worst, misplaced=bad, index_tolerance=tol)
    res.passed = bad == 0
    res.reason = "" if res.passed else f"{bad} index(es) moved more than {tol} position(s) (worst: {worst})"
    return res


def _metric(name, actual, expected, func, value_fn, threshold, better):
    a, e, res = _prepare(name, actual, expected, func)
    if a is None:
        return res
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = float(value_fn(a.astype(np.float64).ravel(), e.astype(np.float64).ravel()))
    res.metrics[func] = v
    res.metrics["threshold"] = threshold
    res.passed = bool(v >= threshold) if better == "higher" else bool(v <= threshold)
    if not np.isfinite(v) and not (func in ("psnr", "snr") and v == np.inf):
        res.passed = False
    res.passed = res.passed or (func in ("psnr", "snr") and v == np.inf)
    cmp = ">=" if better == "higher" else "<="
    res.reason = "" if res.passed else f"{func} = {v:.6g}, required {cmp} {threshold:g}"
    return res


def compare_l2(name, actual, expected, threshold=1e-2):
    """L2 norm of the difference <= threshold."""
    return _metric(name, actual, expected, "l2", lambda a, e: np.linalg.norm(a - e), threshold, "lower")


def compare_cosine(name, actual, expected, threshold=0.999):
    """Cosine similarity >= threshold (two all-zero tensors count as identical)."""
    def cos(a, e):
        na, ne = np.linalg.norm(a), np.linalg.norm(e)
        if na == 0 and ne == 0:
            return 1.0
        return float(a @ e / (na * ne)) if na and ne else 0.0
    return _metric(name, actual, expected, "cosine", cos, threshold, "higher")


def compare_psnr(name, actual, expected, threshold=30.0):
    """Peak signal-to-noise ratio in dB (peak = max |reference|) >= threshold."""
    def psnr(a, e):
        mse = np.mean((a - e) ** 2)
        return np.inf if mse == 0 else 10 * np.log10(max(np.max(np.abs(e)), 1e-30) ** 2 / mse)
    return _metric(name, actual, expected, "psnr", psnr, threshold, "higher")


def compare_snr(name, actual, expected, threshold=20.0):
    """Signal-to-noise ratio in dB (reference power over error power) >= threshold."""
    def snr(a, e):
        noise = np.sum((a - e) ** 2)
        return np.inf if noise == 0 else 10 * np.log10(max(np.sum(e ** 2), 1e-30) / noise)
    return _metric(name, actual, expected, "snr", snr, threshold, "higher")


def validate(name, value) -> list[str]:
    """NaN/Inf problems in one tensor (empty when it is finite or not numeric)."""
    v = np.asarray(value) if value is not None and not isinstance(value, list) else None
    if v is None or v.dtype.kind not in "fc":
        return []
    out = []
    n_nan, n_inf = int(np.isnan(v).sum()), int(np.isinf(v).sum())
    if n_nan:
        out.append(f"{n_nan} NaN(s)")
    if n_inf:
        out.append(f"{n_inf} Inf(s)")
    return out
