"""Per-runner output statistics (Polygraphy prints them for every compared output): mean, std, min, max, median and
a histogram whose bins span both runners' values, so the two histograms line up."""
from __future__ import annotations

import numpy as np

from debugkit.compare.errorstats import side_counts


def value_stats(x, lo=None, hi=None, bins=10) -> dict:
    """Statistics of one output's finite values; NaN/Inf are counted, not averaged."""
    x = np.asarray(x)
    out = {"dtype": x.dtype.name, "shape": list(x.shape), "size": int(x.size)}
    if x.dtype.kind not in "fiub" or x.size == 0:
        return out
    v = x.astype(np.float64).ravel()
    finite = v[np.isfinite(v)]
    nf = side_counts(v)
    if nf.total:
        out["nonfinite"] = nf.to_dict()
    if finite.size == 0:
        return out
    out.update(mean=float(finite.mean()), std=float(finite.std()), min=float(finite.min()),
               max=float(finite.max()), median=float(np.median(finite)))
    lo = out["min"] if lo is None else lo
    hi = out["max"] if hi is None else hi
    if not hi > lo:
        hi = lo + 1.0
    counts, edges = np.histogram(finite, bins=bins, range=(lo, hi))
    out["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return out


def pair_stats(actual, expected, bins=10) -> dict:
    """{"actual": stats, "expected": stats} with histograms over the union of both value ranges."""
    rng = []
    for x in (actual, expected):
        x = np.asarray(x)
        if x.dtype.kind in "fiub" and x.size:
            v = x.astype(np.float64).ravel()
            v = v[np.isfinite(v)]
            if v.size:
                rng += [float(v.min()), float(v.max())]
    lo, hi = (min(rng), max(rng)) if rng else (None, None)
    return {"actual": value_stats(actual, lo, hi, bins), "expected": value_stats(expected, lo, hi, bins)}


def render(name, stats: dict, width=30) -> list[str]:
    """Lines: one statistics line per runner, then the two histograms side by side."""
    out = []
    for label, s in stats.items():
        nf = s.get("nonfinite")
        if "mean" not in s:
            counts = f" (NaN {nf['nan']}, +Inf {nf['posinf']}, -Inf {nf['neginf']})" if nf else ""
            out.append(f"{label:>16} | {name}: no finite values{counts}")
            continue
        extra = f", NaN {nf['nan']}, +Inf {nf['posinf']}, -Inf {nf['neginf']}" if nf else ""
        out.append(f"{label:>16} | mean={s['mean']:.4g} std={s['std']:.4g} min={s['min']:.4g} max={s['max']:.4g} "
                   f"median={s['median']:.4g}{extra}")
    hists = [s.get("histogram") for s in stats.values()]
    if all(hists) and len(hists) == 2:
        a, b = hists
        top = max(max(a["counts"]), max(b["counts"]), 1)
        out.append(f"{'':>16}   {'value bin':<25}| {list(stats)[0][:width]:<{width}} | {list(stats)[1][:width]}")
        for k in range(len(a["counts"])):
            bar = lambda c: "#" * int(round(width * c / top))  # noqa: E731
            out.append(f"{'':>16}   [{a['edges'][k]:<10.4g}, {a['edges'][k + 1]:<10.4g}) | "
                       f"{bar(a['counts'][k]):<{width}} | {bar(b['counts'][k])}")
    return out
