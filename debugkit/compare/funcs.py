"""Compare functions: simple (atol/rtol + error statistic), indices (top-k), L2, cosine, PSNR, SNR, and the
reduced-precision default (relative L2 + cosine).

Each returns an OutputResult: pass/fail, the error statistics, and for `simple` the smallest atol and rtol that
would have passed. NaN/Inf policy: matching infinities (same sign, same place) are equal unless inf_equal=False;
matching NaNs are equal only with nan_equal=True; a NaN or Inf on one side only always fails, and is reported as
counts and positions (`OutputResult.nonfinite`), never as an error of 0. Statistics are float64 throughout and never
NaN (errorstats.py says how infinite relative errors are handled).

Default tolerance (no --atol given): atol scales with the output, `ATOL_SCALE[dtype] x max|reference|` (the rounding
noise a correct kernel with another summation order leaves, relative to the tensor's magnitude), rtol by dtype.
Differences from Polygraphy's compare functions are listed in docs/run.md.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from debugkit.compare import errorstats
from debugkit.compare.errorstats import NonFiniteCounts, distinct, first_index, side_counts

# (atol as a fraction of max|reference|, rtol) by dtype: what a correct FP32/FP16 kernel with another summation
# order achieves. Integers, bools and strings compare exactly.
DEFAULT_TOLERANCES = {"float64": (1e-12, 1e-7), "float32": (1e-5, 1e-3), "float16": (1e-3, 1e-2),
                      "bfloat16": (1e-2, 5e-2)}
ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
# Layerwise noise floor, as a fraction of an intermediate tensor's largest reference magnitude: a float32 conv summing
# thousands of products in another order differs by ~1e-6 of its scale, so a fixed atol of 1e-4 would flag rounding
# in every large-valued layer (ppocr_v4_det's 200-magnitude convs) as a divergence. The same fractions make the
# default atol of every compared tensor.
DEFAULT_SCALE_TOL = {k: v[0] for k, v in DEFAULT_TOLERANCES.items()}
_TINY = {"float64": float(np.finfo(np.float64).tiny), "float32": float(np.finfo(np.float32).tiny),
         "float16": float(np.finfo(np.float16).tiny), "bfloat16": 1.1754944e-38}


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
    min_rtol: float | None = None     # smallest rtol that passes on its own (inf: some reference is 0)
    stats: dict = field(default_factory=dict)   # absolute-error statistics over the compared (finite) elements
    rel_stats: dict = field(default_factory=dict)   # relative error over nonzero-reference elements, + zero_ref
    metrics: dict = field(default_factory=dict)  # l2, cosine, psnr, snr, mismatches, check, level...
    histogram: list = field(default_factory=list)
    hist_counts: list = field(default_factory=list)   # |a - e| histogram for reports (10 bins from 0 to max)
    hist_edges: list = field(default_factory=list)
    nonfinite: NonFiniteCounts | None = None    # NaN/Inf on each side and where they disagree (simple only)
    compared: int = 0                 # elements compared with finite values on both sides
    atol_rule: str = ""               # how the atol was chosen ("1e-05 x max|reference| 2.3" for the default)

    @property
    def max_abs(self):
        return self.stats.get("max")

    @property
    def max_rel(self):
        """Largest relative error where the reference is nonzero (zero-reference elements: rel_stats['zero_ref'])."""
        return self.rel_stats.get("max")

    @property
    def zero_ref(self) -> int:
        """Elements whose reference is exactly 0 but whose value differs: their relative error is infinite."""
        return int(self.rel_stats.get("zero_ref", 0))

    @property
    def level(self):
        """The error as a multiple of the tolerance (<= 1 passes; inf for NaN/Inf mismatches)."""
        return self.metrics.get("level")


@dataclass
class Tolerance:
    """The resolved check of one output: atol, rtol, error statistic and quantile, and how atol was chosen."""

    atol: float
    rtol: float
    stat: str
    quantile: float
    atol_rule: str = ""


class Tolerances:
    """atol/rtol/error-stat/quantile/index tolerance per output with "" as the default. Unset atol scales with the
    reference (DEFAULT_TOLERANCES); unset rtol falls back to the dtype's."""

    def __init__(self, atol=None, rtol=None, check_error_stat=None, quantile=0.99, index_tolerance=None):
        self.atol = dict(atol or {})
        self.rtol = dict(rtol or {})
        self.stat = dict(check_error_stat or {})
        self.quantiles = dict(quantile) if isinstance(quantile, dict) else {"": float(quantile)}
        self.index_tolerance = (dict(index_tolerance) if isinstance(index_tolerance, dict)
                                else {"": int(index_tolerance or 0)})
        from native.errors import UsageError
        for name, s in self.stat.items():
            if s not in ERROR_STATS:
                raise UsageError(f"--check-error-stat {name + ':' if name else ''}{s}: choose one of {ERROR_STATS}")
        for name, q in self.quantiles.items():
            if not 0.0 <= float(q) <= 1.0:
                raise UsageError(f"--error-quantile {name + ':' if name else ''}{q}: must be in [0, 1]")
        for name, t in self.index_tolerance.items():
            if int(t) < 0:
                raise UsageError(f"--index-tolerance {name + ':' if name else ''}{t}: must be >= 0")

    @property
    def quantile(self) -> float:
        return self.quantiles.get("", 0.99)

    def names(self):
        return {n for d in (self.atol, self.rtol, self.stat, self.quantiles, self.index_tolerance) for n in d if n}

    @staticmethod
    def _pick(d, name, default):
        return d.get(name, d.get("", default))

    def for_output(self, name, dtype, expected=None):
        """(atol, rtol, stat) for one output; the default atol needs the reference (`expected`) to scale with."""
        t = self.resolve(name, dtype, expected)
        return t.atol, t.rtol, t.stat

    def resolve(self, name, dtype, expected=None, peak=None) -> Tolerance:
        scale, d_rtol = DEFAULT_TOLERANCES.get(_dtype_name(dtype), (0.0, 0.0))
        rtol = float(self._pick(self.rtol, name, d_rtol))
        stat = self._pick(self.stat, name, "elemwise")
        q = float(self._pick(self.quantiles, name, 0.99))
        given = self._pick(self.atol, name, None)
        if given is not None:
            return Tolerance(float(given), rtol, stat, q, "")
        if scale == 0.0:
            return Tolerance(0.0, rtol, stat, q, "exact (integer/bool)")
        peak = _peak(expected) if peak is None else peak
        atol = scale * peak if peak > 0 else _TINY.get(_dtype_name(dtype), 0.0)
        return Tolerance(atol, rtol, stat, q, f"default: {scale:g} x max|reference| {peak:.4g}")

    def index_tolerance_for(self, name) -> int:
        return int(self._pick(self.index_tolerance, name, 0))


def _dtype_name(dtype) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def _peak(expected) -> float:
    if expected is None:
        return 1.0
    e = np.asarray(expected)
    if e.size == 0 or e.dtype.kind not in "fiu":
        return 0.0
    if e.dtype.kind in "iu":
        return float(max(abs(int(e.max())), abs(int(e.min()))))
    hi, lo = float(np.max(e)), float(np.min(e))      # no temporaries; NaN/Inf only then take the slow path
    if np.isfinite(hi) and np.isfinite(lo):
        return max(abs(hi), abs(lo))
    finite = e[np.isfinite(e)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def default_tolerance(dtype, expected=None) -> tuple:
    """(atol, rtol) of the default check for this dtype; atol scales with max|expected| (1 when not given)."""
    return Tolerances().for_output("", dtype, expected)[:2]


def _common_dtype(a, b):
    """The less precise of the two float dtypes (what tolerances should be judged by)."""
    order = ["float64", "float32", "bfloat16", "float16"]
    names = [x.dtype.name for x in (a, b)]
    floats = [n for n in names if n in order]
    return max(floats, key=order.index) if floats else names[1]


def histogram(x: np.ndarray, bins=10, width=40, lo=0.0, hi=None) -> list[str]:
    """A text histogram of finite x: one line per bin (range [lo, hi], by default [0, max])."""
    x = np.asarray(x, np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return []
    hi = float(x.max()) if hi is None else float(hi)
    if not hi > lo:
        hi = lo + 1.0
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    top = max(int(counts.max()), 1)
    return [f"[{edges[k]:<10.4g}, {edges[k + 1]:<10.4g}) | {int(counts[k]):>9} | {'#' * int(round(width * counts[k] / top))}"
            for k in range(bins)]


def _nonfinite(actual, expected, nan_equal, inf_equal):
    """(bad mask, matched mask, problems, NonFiniteCounts). Bad positions fail; matched ones are left out of the
    error statistics."""
    a_nan, e_nan = np.isnan(actual), np.isnan(expected)
    a_inf, e_inf = np.isinf(actual), np.isinf(expected)
    both_nan = a_nan & e_nan
    same_inf = a_inf & e_inf & (np.sign(actual) == np.sign(expected))
    one_side = (a_nan ^ e_nan) | ((a_inf | e_inf) & ~same_inf & ~(a_nan | e_nan))
    bad = one_side
    problems = []
    counts = NonFiniteCounts(side_counts(actual), side_counts(expected), int(one_side.sum()), first_index(one_side),
                             int((both_nan | same_inf).sum()))
    if one_side.any():
        problems.append(f"{int(one_side.sum())} NaN/Inf value(s) on one side only")
    if both_nan.any() and not nan_equal:
        problems.append(f"{int(both_nan.sum())} NaN(s) on both sides (use --allow-nan to treat matching NaNs as equal)")
        bad = bad | both_nan
    if same_inf.any() and not inf_equal:
        problems.append(f"{int(same_inf.sum())} matching Inf(s) (treated as unequal by request)")
        bad = bad | same_inf
    if bad.any() and not counts.mismatched:
        counts.mismatched, counts.first_mismatch = int(bad.sum()), first_index(bad)
    return bad, both_nan | same_inf, problems, counts


def align_shapes(a, e, check_shapes=True):
    """(a, note): `a` reshaped to e's shape when check_shapes is off and the element counts match (Polygraphy's
    check_shapes=False: a (1, 4) output pairs with a (4,) one); None when the shapes cannot be paired."""
    if a.shape == e.shape:
        return a, ""
    if not check_shapes and a.size == e.size:
        return a.reshape(e.shape), f"reshaped {list(a.shape)} -> {list(e.shape)} (--no-check-shapes)"
    return None, ""


def _prepare(name, actual, expected, func, check_shapes=True):
    a, e = np.asarray(actual), np.asarray(expected)
    res = OutputResult(name, False, func, dtype=e.dtype.name, shape=tuple(e.shape))
    a2, note = align_shapes(a, e, check_shapes)
    if a2 is None:
        res.reason = f"shape mismatch: {list(a.shape)} vs reference {list(e.shape)}" + (
            "" if a.size != e.size else "; the element counts match: --no-check-shapes compares them reshaped")
        return None, None, res
    if note:
        res.metrics["reshaped"] = note
    a = a2
    if a.dtype.kind in "OUS" or e.dtype.kind in "OUS":
        eq = np.array_equal(a.astype(str), e.astype(str))
        res.passed, res.reason = eq, "" if eq else "string values differ"
        return None, None, res
    return a, e, res


def _ratio(x, tol):
    return 0.0 if x == 0 else (float("inf") if tol <= 0 else x / tol)


def compare_simple(name, actual, expected, tolerances: Tolerances | None = None, nan_equal=False,
                   inf_equal=True, hist=True, scale_tol=None, check_shapes=True) -> OutputResult:
    """Pass where |a - e| <= atol or |a - e| <= rtol * |e| (per element, or on the chosen error statistic).
    scale_tol (layerwise checks): atol is raised to scale_tol * max|e| so rounding noise of large tensors passes."""
    a, e, res = _prepare(name, actual, expected, "simple", check_shapes)
    if a is None:
        return res
    dtype = _common_dtype(a, e)
    peak = _peak(e)
    tol = (tolerances or Tolerances()).resolve(name, dtype, e, peak=peak)
    atol, rtol, stat = tol.atol, tol.rtol, tol.stat
    res.atol_rule = tol.atol_rule
    if scale_tol and e.size and e.dtype.kind == "f":
        floor = float(scale_tol) * peak
        if floor > atol:
            atol = floor
            res.metrics["scaled_atol"] = floor
            res.atol_rule = f"layer noise floor: {float(scale_tol):g} x max|reference| {peak:.4g}"
    res.atol, res.rtol, res.metrics["error_stat"] = atol, rtol, stat
    if stat == "quantile":
        res.metrics["error_quantile"] = tol.quantile
    if a.dtype == bool or e.dtype == bool:
        mism = np.asarray(a, bool) != np.asarray(e, bool)
        n = int(mism.sum())
        res.passed, res.metrics["mismatches"] = n == 0, n
        res.compared = int(mism.size)
        res.min_atol = res.min_rtol = 0.0 if n == 0 else None
        res.metrics["level"] = 0.0 if n == 0 else float("inf")
        res.reason = "" if n == 0 else f"{n} of {mism.size} bool values differ, first at {first_index(mism)}"
        return res
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        bad, matched, problems, counts = _nonfinite(a64, e64, nan_equal, inf_equal)
        res.nonfinite = counts
        ok = ~(bad | matched)
        absdiff = np.abs(a64 - e64).ravel()
        eabs = np.abs(e64).ravel()
        if ok.all():             # the common case: no NaN/Inf, every element compared, no copies
            flat_ok = None
        else:
            flat_ok = np.flatnonzero(ok)
            absdiff, eabs = absdiff[flat_ok], eabs[flat_ok]
        # relative error: undefined (infinite) where the reference is exactly 0 and the values differ
        reldiff = absdiff / eabs
        reldiff[absdiff == 0] = 0.0
        zero_ref = np.isinf(reldiff)
    res.compared = int(absdiff.size)
    res.stats = errorstats.summary(absdiff, flat_ok, a.shape)
    flat = (lambda i: int(i)) if flat_ok is None else (lambda i: int(flat_ok[i]))  # noqa: E731
    nzero = int(zero_ref.sum())
    if nzero:
        finite_rel = ~zero_ref
        res.rel_stats = errorstats.summary(reldiff[finite_rel], np.flatnonzero(finite_rel) if flat_ok is None
                                           else flat_ok[finite_rel], a.shape)
        res.rel_stats["zero_ref_at"] = [int(v) for v in np.unravel_index(flat(np.argmax(zero_ref)), a.shape)]
    else:
        res.rel_stats = errorstats.summary(reldiff, flat_ok, a.shape)
    res.rel_stats["zero_ref"] = nzero
    if stat == "elemwise":
        fail = (absdiff > atol) & (reldiff > rtol)
        res.min_atol = float(absdiff.max(initial=0.0))
        res.min_rtol = float(reldiff.max(initial=0.0))
        nfail = int(fail.sum())
        res.metrics["mismatches"] = nfail
        with np.errstate(all="ignore"):
            allowed = np.maximum(atol, rtol * eabs)
            ratios = absdiff / allowed          # 0/0 -> NaN (no error, no allowance): ignored by nanmax
        res.metrics["level"] = float(np.nanmax(ratios)) if ratios.size and not np.isnan(ratios).all() else 0.0
        passed = nfail == 0
        first = ""
        if nfail:
            where = [int(v) for v in np.unravel_index(flat(np.argmax(fail)), a.shape)]
            first = f", first at {where}"
        why = f"{nfail} of {fail.size} elements exceed both atol={atol:g} and rtol={rtol:g}{first}"
    else:
        sa = errorstats.check_value(absdiff, stat, tol.quantile)
        sr = errorstats.check_value(reldiff, stat, tol.quantile)
        res.min_atol, res.min_rtol = sa, sr
        res.metrics["check"] = {"stat": stat, "abs": sa, "rel": sr}
        res.metrics["level"] = min(_ratio(sa, atol), _ratio(sr, rtol))
        passed = sa <= atol or sr <= rtol
        what = f"quantile {tol.quantile:g}" if stat == "quantile" else stat
        why = (f"{what} error abs={distinct(sa, atol)} > atol={atol:g} and rel={distinct(sr, rtol)} > rtol={rtol:g}"
               + (f" ({res.zero_ref} element(s) with a zero reference count as infinite relative error)"
                  if res.zero_ref and sr == float("inf") else ""))
    if problems:
        res.passed = False
        res.reason = "; ".join(problems) + (f", first at {counts.first_mismatch}" if counts.first_mismatch else "")
        res.min_atol = res.min_rtol = None
        res.metrics["level"] = float("inf")
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
    compared = absdiff if hist else None   # the compared (finite on both sides) elements
    if hist and compared.size:
        top = float(compared.max())
        counts, edges = np.histogram(compared, bins=10, range=(0.0, top if top > 0 else 1.0))
        res.hist_counts, res.hist_edges = counts.tolist(), edges.tolist()
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


def swapped_rows(a, e, atol, rtol, limit=64):
    """[(i, j), ...]: out-of-tolerance rows i of `a` (axis 0) that equal another out-of-tolerance row j of `e`,
    closed under the pairing (the j's are the i's: rows traded places); rows that match no other row are left out
    (an error of their own). None when no rows traded places."""
    if a.ndim == 0 or a.shape != e.shape or a.shape[0] < 2 or a.dtype.kind not in "fiub" or e.dtype.kind not in "fiub":
        return None
    n = a.shape[0]
    with np.errstate(all="ignore"):
        ar, er = a.reshape(n, -1).astype(np.float64), e.reshape(n, -1).astype(np.float64)

        def close(x, y):
            d = np.abs(x - y)
            return (d <= atol) | (d <= rtol * np.abs(y))
        bad = [int(i) for i in np.nonzero(~close(ar, er).all(axis=1))[0]]
    if len(bad) < 2 or len(bad) > limit:
        return None
    free, pairs = set(bad), {}
    for i in bad:
        j = next((j for j in sorted(free) if j != i and close(ar[i], er[j]).all()), None)
        if j is not None:
            free.discard(j)
            pairs[i] = j
    while True:   # keep only rows whose place another paired row took: the pairing must be closed
        keep = {i: j for i, j in pairs.items() if j in pairs and i in pairs.values()}
        if keep == pairs:
            break
        pairs = keep
    return sorted(pairs.items()) or None


def reorder_tied_rows(results: dict, pairs: dict, compare) -> dict:
    """Tie-aware outputs: a sorted output (detections, top-k) whose rows came out in another order only where its
    sort key ties is compared in the reference's order.

    `results` {name: OutputResult} of one iteration, `pairs` {name: (actual, expected)}, `compare(name, a, e)` the
    check that made the results. An output that failed as a row permutation (`row_permutation`) is re-compared with
    its rows put back in the reference's order when another output of the same iteration is its sort key: 1-D, one
    entry per row, passed, and its reference values of every swapped pair agree within that key's own tolerance
    (scores 0.7620645 / 0.7620636: which comes first is decided by rounding, not by the model). The new result stands
    whether it passes or not (the remaining error is the truth) and records `tied_rows_reordered`. Returns the names
    re-compared. Without a tied key the failure stays a failure: a reordering of distinct keys is a real difference."""
    done = {}
    for name, r in list(results.items()):
        if r.passed or name not in pairs or r.atol is None:
            continue
        a, e = (np.asarray(x) for x in pairs[name])
        perm = swapped_rows(a, e, r.atol, r.rtol or 0.0)
        if not perm:
            continue
        n = a.shape[0]
        for kname, kr in results.items():
            if kname == name or not kr.passed or kname not in pairs or kr.atol is None:
                continue
            ka, ke = (np.asarray(x) for x in pairs[kname])
            if ke.shape != (n,) or ka.shape != (n,) or ke.dtype.kind != "f":
                continue
            ke64 = ke.astype(np.float64)
            tied = all(abs(ke64[i] - ke64[j]) <= max(kr.atol, (kr.rtol or 0.0) * abs(ke64[j])) for i, j in perm)
            if not tied:
                continue
            back = a.copy()
            for i, j in perm:       # our row i is the reference's row j
                back[j] = a[i]
            new = compare(name, back, e)
            new.metrics["tied_rows_reordered"] = {"key": kname, "rows": [list(p) for p in perm]}
            moves = ", ".join(f"{i}<-{j}" for i, j in perm[:6]) + (", ..." if len(perm) > 6 else "")
            note = (f"{len(perm)} rows came out in another order where its sort key {kname} ties within "
                    f"tolerance (ours<-reference: {moves}); compared in the reference's order")
            new.reason = f"{new.reason}; {note}" if new.reason else ""
            new.metrics["tie_note"] = note
            results[name] = done[name] = new
            break
    return done


def _per_output(value, name, default):
    """A threshold given as a number or as {name: value} with "" as the default (Polygraphy's dict form)."""
    if isinstance(value, dict):
        return value.get(name, value.get("", default))
    return default if value is None else value


def compare_indices(name, actual, expected, index_tolerance=0, check_shapes=True) -> OutputResult:
    """Top-k indices along the last axis, in Polygraphy's direction: each of the output's first k - tol entries must
    appear in the reference's row at most `tol` positions away from where the output has it (the output's last
    `tol` entries are not checked: with a top-(k+tol) output every top-k entry is). `index_tolerance` is an int or
    {name: int}."""
    a, e, res = _prepare(name, actual, expected, "indices", check_shapes)
    if a is None:
        return res
    tol = int(_per_output(index_tolerance, name, 0))
    k = e.shape[-1] if e.ndim else 1
    a2, e2 = a.reshape(-1, k), e.reshape(-1, k)
    worst, bad, first = 0, 0, None
    for r, (row_a, row_e) in enumerate(zip(a2, e2)):
        for pos in range(max(k - tol, 0)):
            if row_a[pos] == row_e[pos]:
                continue
            where = np.nonzero(row_e == row_a[pos])[0]
            shift = int(where[0] - pos) if where.size else None
            miss = shift is None or abs(shift) > tol
            worst = max(worst, k if shift is None else abs(shift))
            if miss:
                bad += 1
                if first is None:
                    at = list(np.unravel_index(r, a.shape[:-1])) + [pos] if a.ndim > 1 else [pos]
                    first = (at, row_a[pos].item(), "not in the reference's row" if shift is None
                             else f"at reference position {pos + shift}")
    res.metrics.update(max_index_shift=worst, misplaced=bad, index_tolerance=tol)
    res.passed = bad == 0
    res.compared = int(a2.shape[0] * max(k - tol, 0))
    if not res.passed:
        at, val, how = first
        res.reason = (f"{bad} index(es) of the output are more than {tol} position(s) from where the reference has "
                      f"them (worst: {worst}); first: {val} at {[int(x) for x in at]}, {how}")
    return res


def _metric(name, actual, expected, func, value_fn, threshold, better, check_shapes=True):
    a, e, res = _prepare(name, actual, expected, func, check_shapes)
    if a is None:
        return res
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        v = float(value_fn(a.astype(np.float64).ravel(), e.astype(np.float64).ravel()))
    res.metrics[func] = v
    res.metrics["threshold"] = threshold
    res.compared = int(e.size)
    if func in ("psnr", "snr") and v == np.inf:       # identical outputs
        res.passed = True
    elif not np.isfinite(v):                           # NaN (Inf in an input), -inf: fails, never clamps
        res.passed = False
    else:
        res.passed = bool(v >= threshold) if better == "higher" else bool(v <= threshold)
    cmp = ">=" if better == "higher" else "<="
    res.reason = "" if res.passed else f"{func} = {distinct(v, threshold, 6)}, required {cmp} {threshold:g}"
    return res


def compare_l2(name, actual, expected, threshold=1e-2, check_shapes=True):
    """L2 norm of the difference <= threshold (a number or {name: number})."""
    return _metric(name, actual, expected, "l2", lambda a, e: _norm(a - e), _per_output(threshold, name, 1e-2),
                   "lower", check_shapes)


def _norm(x):
    """L2 norm without overflow or underflow of the squares (1e-200 and 1e200 scale out)."""
    m = float(np.max(np.abs(x))) if x.size else 0.0
    if m == 0 or not np.isfinite(m):
        return m if x.size else 0.0
    return m * float(np.sqrt(np.sum((x / m) ** 2)))


def compare_cosine(name, actual, expected, threshold=0.999, check_shapes=True):
    """Cosine similarity >= threshold (two all-zero tensors count as identical, one all-zero as 0). Each side is
    scaled by its largest magnitude first, so 1e-200 or 1e200 values neither underflow nor overflow."""
    def cos(a, e):
        if not (np.isfinite(a).all() and np.isfinite(e).all()):
            return float("nan")
        ma, me = (float(np.max(np.abs(x))) if x.size else 0.0 for x in (a, e))
        if ma == 0 and me == 0:
            return 1.0
        if ma == 0 or me == 0:
            return 0.0
        a, e = a / ma, e / me
        return float(np.clip(a @ e / (np.linalg.norm(a) * np.linalg.norm(e)), -1.0, 1.0))
    return _metric(name, actual, expected, "cosine", cos, _per_output(threshold, name, 0.999), "higher",
                   check_shapes)


def compare_psnr(name, actual, expected, threshold=30.0, check_shapes=True):
    """Peak signal-to-noise ratio in dB (peak = max |reference|) >= threshold."""
    def psnr(a, e):
        mse = np.mean((a - e) ** 2)
        return np.inf if mse == 0 else 10 * np.log10(max(np.max(np.abs(e)), 1e-30) ** 2 / mse)
    return _metric(name, actual, expected, "psnr", psnr, _per_output(threshold, name, 30.0), "higher", check_shapes)


def compare_snr(name, actual, expected, threshold=20.0, check_shapes=True):
    """Signal-to-noise ratio in dB (reference power over error power) >= threshold."""
    def snr(a, e):
        noise = np.sum((a - e) ** 2)
        return np.inf if noise == 0 else 10 * np.log10(max(np.sum(e ** 2), 1e-30) / noise)
    return _metric(name, actual, expected, "snr", snr, _per_output(threshold, name, 20.0), "higher", check_shapes)


REDUCED_FUNC = "rel_l2+cosine"


def compare_reduced(name, actual, expected, rel_l2=1e-2, cosine=0.9999, nan_equal=False, inf_equal=True,
                    check_shapes=True) -> OutputResult:
    """The reduced-precision check (debugkit.debug.checks.ReducedPrecisionCheck, what `debug precision` judges by):
    relative L2 error ||a - e|| / ||e|| <= rel_l2 and cosine similarity >= cosine over the elements finite on both
    sides; a NaN/Inf on one side only fails (run's NaN/Inf policy). Scale-free: FP16 rounding of a large-valued
    output passes where an FP32 atol/rtol would flag every element."""
    a, e, res = _prepare(name, actual, expected, REDUCED_FUNC, check_shapes)
    if a is None:
        return res
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a64, e64 = np.asarray(a, np.float64), np.asarray(e, np.float64)
        bad, matched, problems, counts = _nonfinite(a64, e64, nan_equal, inf_equal)
        ok = ~(bad | matched)
        a64, e64 = a64[ok], e64[ok]
        d = a64 - e64
        nd, ne, na = _norm(d), _norm(e64), _norm(a64)
        rel = 0.0 if nd == 0 else (nd / ne if ne else float("inf"))
        if na == 0 and ne == 0:
            cos = 1.0
        elif na == 0 or ne == 0:
            cos = 0.0
        else:
            cos = float(np.clip((a64 / na) @ (e64 / ne), -1.0, 1.0))
    res.nonfinite = counts
    res.compared = int(a64.size)
    res.metrics.update({REDUCED_FUNC: rel, "rel_l2": rel, "cosine": cos,
                        "max_abs": float(np.max(np.abs(d))) if d.size else 0.0,
                        "threshold": f"rel_l2 <= {rel_l2:g}, cosine >= {cosine:g}"})
    reasons = list(problems) if bad.any() else []
    if rel > rel_l2:
        reasons.append(f"relative L2 error {rel:.4g} > {rel_l2:g}")
    if cos < cosine:
        reasons.append(f"cosine {cos:.6f} < {cosine:g}")
    res.passed = not reasons
    res.reason = "; ".join(reasons)
    return res


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


CHECKS = ("simple", "indices", "l2", "cosine", "psnr", "snr")


def make_checks(compare=(), *, index_tolerance=0, l2_threshold=1e-2, cosine_threshold=0.999, psnr_threshold=30.0,
                snr_threshold=20.0, check_shapes=True) -> dict:
    """{name: fn(output, actual, expected) -> OutputResult} for the checks run besides `simple` (--compare); every
    threshold may be a number or {output: number} with "" as the default."""
    table = {"indices": lambda n, a, e: compare_indices(n, a, e, index_tolerance, check_shapes),
             "l2": lambda n, a, e: compare_l2(n, a, e, l2_threshold, check_shapes),
             "cosine": lambda n, a, e: compare_cosine(n, a, e, cosine_threshold, check_shapes),
             "psnr": lambda n, a, e: compare_psnr(n, a, e, psnr_threshold, check_shapes),
             "snr": lambda n, a, e: compare_snr(n, a, e, snr_threshold, check_shapes)}
    return {k: table[k] for k in dict.fromkeys(compare or ()) if k != "simple"}
