"""Terminal report: per-output detail for failures, the first divergence as the headline, one summary table.

Colour comes from `colored` and is off when the stream is not a TTY, NO_COLOR is set, or --no-color was given.
"""
from __future__ import annotations

import os
import sys


_COLOUR = None   # None: automatic; False: off (--no-color)


def set_colour(on) -> None:
    """Force colour off (False) or back to automatic (None); the CLI's --no-color."""
    global _COLOUR
    _COLOUR = on


def colour_override():
    return _COLOUR


def use_colour(stream=None) -> bool:
    if _COLOUR is False:
        return False
    stream = stream or sys.stdout
    try:
        return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()
    except ValueError:   # a closed stream
        return False


def paint(text: str, colour: str, stream=None) -> str:
    if not use_colour(stream):
        return text
    from colored import Fore, Style
    return f"{getattr(Fore, colour)}{text}{Style.reset}"


def fmt(x, spec=".3g"):
    if x is None:
        return "-"
    return format(x, spec)


def fmt_rel(x, spec=".3g"):
    """A relative error; infinite only where the reference is exactly 0, where it is undefined, so say that."""
    if x is not None and x == float("inf"):
        return "n/a (ref 0)"
    return fmt(x, spec)


def status(passed: bool, stream=None) -> str:
    return paint("PASSED", "green", stream) if passed else paint("FAILED", "red", stream)


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain aligned text table (colour codes are not counted in the widths)."""
    import re
    strip = lambda s: re.sub(r"\x1b\[[0-9;]*m", "", s)  # noqa: E731
    widths = [max(len(strip(str(r[i]))) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c) + " " * (w - len(strip(str(c)))) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def output_detail(r, verbose=False, source="output", reference="reference") -> list[str]:
    """Lines describing one failing (or, verbosely, passing) output."""
    from debugkit.compare.errorstats import distinct
    lines = [f"{status(r.passed)} | {r.name} [{r.dtype} {list(r.shape)}] | {r.func}"
             + (f" | {r.reason}" if r.reason else "")]
    nf = getattr(r, "nonfinite", None)
    if nf is not None and nf.any:
        lines.append(f"    NaN/Inf: {nf.describe(source, reference)}"
                     + (f"; {nf.matched} matching position(s) left out of the statistics" if nf.matched else ""))
    if r.func == "simple" and r.atol is not None:
        stat = r.metrics.get("error_stat", "elemwise")
        what = f"quantile {r.metrics.get('error_quantile', 0.99):g}" if stat == "quantile" else stat
        rule = f" ({r.atol_rule})" if getattr(r, "atol_rule", "") else ""
        lines.append(f"    tolerance: atol={r.atol:.4g}{rule} rtol={r.rtol:g} ({what})")
        if r.min_atol is not None:
            rt = (distinct(r.min_rtol, r.rtol) if r.min_rtol != float("inf") else
                  f"n/a ({r.zero_ref} element(s) with a zero reference: only atol passes them)")
            lines.append(f"    minimum tolerance that would pass: atol={distinct(r.min_atol, r.atol)} OR rtol={rt}"
                         + (f" ({what} error)" if stat != "elemwise" else ""))
        s = r.stats
        if s:
            lines.append(f"    abs error ({s['count']} elements): mean={s['mean']:.4g} std={s['std']:.4g} "
                         f"median={s['median']:.4g} p90={s['p90']:.4g} p99={s['p99']:.4g} max={s['max']:.4g} at "
                         f"{tuple(s['argmax'])}")
        rs = r.rel_stats
        if rs.get("count"):
            lines.append(f"    rel error ({rs['count']} elements with a nonzero reference): mean={rs['mean']:.4g} "
                         f"median={rs['median']:.4g} max={rs['max']:.4g} at {tuple(rs['argmax'])}")
        if rs.get("zero_ref"):
            lines.append(f"    {rs['zero_ref']} element(s) with a zero reference differ (relative error undefined), "
                         f"first at {tuple(rs['zero_ref_at'])}")
        if r.histogram:
            lines.append("    abs error histogram:")
            lines.extend("      " + h for h in r.histogram)
    elif r.metrics:
        lines.append("    " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in r.metrics.items()))
    return lines


def max_abs_cell(r) -> str:
    """The table's error cell: NaN/Inf mismatches are counted there, never shown as an error of 0."""
    nf = getattr(r, "nonfinite", None)
    if nf is not None and nf.mismatched:
        return f"NaN/Inf x{nf.mismatched}"
    return fmt(r.max_abs) if r.func == "simple" else fmt(r.metrics.get(r.func))


def max_rel_cell(r) -> str:
    if r.func != "simple":
        return "-"
    nf = getattr(r, "nonfinite", None)
    if nf is not None and nf.mismatched:
        return "-"
    if r.max_rel is None and r.zero_ref:
        return "n/a (ref 0)"
    return fmt(r.max_rel) + (f" +{r.zero_ref} ref 0" if r.zero_ref else "")


def render(summary, verbose=False, stream=None) -> str:
    """The whole end-of-run report as one string. Every status in it is read from `summary`, whose `passed` is
    the run's one verdict (the exit code and the JSON read the same)."""
    out = []
    for pr in summary.pairs:
        title = f"iteration {pr.iteration}: {pr.source} vs {pr.reference}"
        failing = [r for r in pr.outputs.values() if not r.passed or verbose]
        failing += [r for d in pr.extra_funcs.values() for r in d.values() if not r.passed or verbose]
        if failing or pr.problems:
            out.append(f"---- {title} ----")
            out.extend(paint(f"FAILED | {p}", "red", stream) for p in pr.problems)
            for r in failing:
                out.extend(output_detail(r, verbose, pr.source, pr.reference))
                st = pr.output_stats.get(r.name) if r.name in pr.outputs and pr.outputs[r.name] is r else None
                if st:
                    from debugkit.compare import outputstats
                    out.append("    output statistics:")
                    out.extend("    " + line for line in outputstats.render(
                        r.name, {pr.source: st["actual"], pr.reference: st["expected"]}))
        if pr.layers:
            bad = sum(not r.passed for r in pr.layers.values())
            out.append(f"layerwise ({title}): {len(pr.layers)} tensors compared, {bad} differ")
            d = pr.divergence
            if d is not None:
                out.append(paint(">>> " + d.headline(), "red", stream))
                if d.inputs:
                    out.append("    inputs of the diverging region: " + ", ".join(
                        f"{k} ({v})" for k, v in list(d.inputs.items())[:8]))
                if d.result is not None and d.result.min_atol is not None:
                    out.append(f"    minimum tolerance that would pass there: atol={d.result.min_atol:.4g} OR "
                               f"rtol={fmt_rel(d.result.min_rtol, '.4g')}")
                if len(d.region) > 1:
                    out.append(f"    hint: {len(d.region)} ONNX nodes were fused into the layer that makes this "
                               f"tensor, so only its output is observable; rerun with --disable-fusion to compare "
                               f"each node's output and pin the node")
                for other in d.born_elsewhere[:3]:
                    out.append(f"    another error is born at '{other.tensor}' (node '{other.node}', {other.op_type})")
            else:
                out.append("    every compared tensor agrees")
    for nf in summary.first_nonfinite.values():
        out.append(paint(">>> " + nf.headline(), "red", stream))
    for src, it, name, problems in summary.validation:
        out.append(paint(f"VALIDATION FAILED | {src} iteration {it} | '{name}' has {', '.join(problems)}", "red", stream))
    for p in summary.problems:
        out.append(paint(f"FAILED | {p}", "red", stream))
    rows = []
    for pr in summary.pairs:
        pair = f"{pr.source} vs {pr.reference}"
        for r in list(pr.outputs.values()) + [r for d in pr.extra_funcs.values() for r in d.values()]:
            rows.append([str(pr.iteration), pair, r.name, r.func, status(r.passed, stream),
                         max_abs_cell(r), max_rel_cell(r),
                         fmt(r.min_atol) if r.func == "simple" else "-",
                         fmt_rel(r.min_rtol) if r.func == "simple" else "-"])
        if not pr.outputs:
            rows.append([str(pr.iteration), pair, "(no output in common)", "simple", status(False, stream),
                         "-", "-", "-", "-"])
        if pr.layerwise:
            d = pr.divergence
            r = d.result if d is not None else None
            what = f"{len(pr.layers)} tensors, {sum(not x.passed for x in pr.layers.values())} differ"
            rows.append([str(pr.iteration), pair, f"(layerwise: {what})", "layerwise",
                         status(pr.layerwise_passed, stream), max_abs_cell(r) if r is not None else "-",
                         max_rel_cell(r) if r is not None else "-", fmt(r.min_atol) if r is not None else "-",
                         fmt_rel(r.min_rtol) if r is not None else "-"])
    if rows:
        out.append("")
        out.append(table(rows, ["iter", "runners", "output", "check", "status", "max abs/metric", "max rel",
                                "min atol", "min rtol"]))
    for pr in summary.pairs:   # a passing output compared in the reference's row order says so (a failing one's
        for r in pr.outputs.values():   # reason above already does)
            if r.passed and r.metrics.get("tie_note"):
                out.append(f"note: iteration {pr.iteration}, {pr.source} vs {pr.reference}: output {r.name}: "
                           f"{r.metrics['tie_note']}")
    out.append(verdict_line(summary, stream))
    return "\n".join(out)


def verdict_line(summary, stream=None) -> str:
    npairs = len(summary.pairs)
    passed = sum(p.passed for p in summary.pairs)
    verdict = "PASSED" if summary.passed else "FAILED"
    rate = f"{100.0 * passed / npairs:.1f}%" if npairs else "n/a"
    what = f"{passed}/{npairs} comparisons passed ({rate})" if npairs else \
        "nothing compared (one source)" if summary.iterations else "nothing compared (no input)"
    extra = ""
    if summary.validation or summary.first_nonfinite:
        extra += f" | {len(summary.validation) + len(summary.first_nonfinite)} NaN/Inf finding(s)"
    if summary.problems:
        extra += " | " + "; ".join(p.split(":")[0] for p in summary.problems)
    if any(p.problems for p in summary.pairs):
        extra += " | " + "; ".join(dict.fromkeys(x.split(":")[0] for p in summary.pairs for x in p.problems))
    if getattr(summary, "check", ""):
        extra += f" | check: {summary.check}"
    return (f"{paint(verdict, 'green' if summary.passed else 'red', stream)} | {what} "
            f"over {summary.iterations} iteration(s){extra}")


def _num(x):
    """A JSON number, or None where there is none (or it is not finite: JSON has no inf/nan)."""
    if x is None:
        return None
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def run_json(summary, timing: dict, provenance: dict) -> dict:
    """The run's verdict for CI, from the same summary the terminal report reads (so they cannot disagree)."""
    outputs = []
    for pr in summary.pairs:
        pair = f"{pr.source} vs {pr.reference}"
        for r in list(pr.outputs.values()) + [r for d in pr.extra_funcs.values() for r in d.values()]:
            simple = r.func == "simple"
            outputs.append({"name": r.name, "runner_pair": pair, "iteration": pr.iteration, "check": r.func,
                            "status": "PASSED" if r.passed else "FAILED",
                            "max_abs": _num(r.max_abs) if simple else None,
                            "max_rel": _num(r.max_rel) if simple else None,
                            "min_atol": _num(r.min_atol) if simple else None,
                            "min_rtol": _num(r.min_rtol) if simple else None,
                            "rel_undefined_where_ref_is_0": bool(simple and r.zero_ref),
                            "zero_ref_elements": r.zero_ref if simple else None,
                            "compared_elements": r.compared,
                            "atol_rule": (r.atol_rule or None) if simple else None,
                            "error_level": _num(r.level) if simple else None,
                            "nonfinite": r.nonfinite.to_dict() if getattr(r, "nonfinite", None) else None,
                            "metric": None if simple else _num(r.metrics.get(r.func)),
                            "reason": r.reason or None, "dtype": r.dtype, "shape": list(r.shape),
                            "postprocess": r.metrics.get("postprocess"),
                            "tied_rows_reordered": r.metrics.get("tied_rows_reordered"),
                            "paired_with": list(pr.paired[r.name]) if r.name in pr.paired else None,
                            "output_stats": (dict(pr.output_stats[r.name], runners=[pr.source, pr.reference])
                                             if r.name in pr.output_stats and pr.outputs.get(r.name) is r
                                             else None)})
    layerwise = None
    lw_pairs = [pr for pr in summary.pairs if pr.layerwise]
    if lw_pairs:
        per_pair = []
        for pr in lw_pairs:
            d = pr.divergence
            per_pair.append({"runner_pair": f"{pr.source} vs {pr.reference}", "iteration": pr.iteration,
                             "status": "PASSED" if pr.layerwise_passed else "FAILED",
                             "compared": len(pr.layers), "differ": sum(not r.passed for r in pr.layers.values()),
                             "first_divergence": None if d is None else dict(
                                 d.to_dict(),
                                 max_abs=_num(d.result.max_abs) if d.result is not None else None,
                                 min_atol=_num(d.result.min_atol) if d.result is not None else None,
                                 nonfinite=(d.result.nonfinite.to_dict() if d.result is not None
                                            and getattr(d.result, "nonfinite", None) is not None else None))})
        first = next((p for p in per_pair if p["first_divergence"] is not None), per_pair[0])
        layerwise = dict(first, pairs=per_pair)
    return {"passed": summary.passed, "exit_code": summary.exit_code, "reasons": summary.reasons(),
            "iterations": summary.iterations, "check": getattr(summary, "check", "") or "simple",
            "outputs": outputs, "layerwise": layerwise,
            "nonfinite": [{"source": n.source, "iteration": n.iteration, "tensor": n.tensor, "node": n.node,
                           "op_type": n.op_type, "problems": n.problems} for n in summary.first_nonfinite.values()],
            "validation": [{"source": s, "iteration": i, "tensor": t, "problems": p}
                           for s, i, t, p in summary.validation],
            "warnings": list(summary.warnings), "timing": timing, "provenance": provenance}
