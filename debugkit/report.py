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


def status(passed: bool, stream=None) -> str:
    return paint("PASSED", "green", stream) if passed else paint("FAILED", "red", stream)


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain aligned text table (colour codes are not counted in the widths)."""
    import re
    strip = lambda s: re.sub(r"\x1b\[[0-9;]*m", "", s)  # noqa: E731
    widths = [max(len(strip(str(r[i]))) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c) + " " * (w - len(strip(str(c)))) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def output_detail(r, verbose=False) -> list[str]:
    """Lines describing one failing (or, verbosely, passing) output."""
    lines = [f"{status(r.passed)} | {r.name} [{r.dtype} {list(r.shape)}] | {r.func}"
             + (f" | {r.reason}" if r.reason else "")]
    if r.func == "simple" and r.atol is not None:
        lines.append(f"    tolerance: atol={r.atol:g} rtol={r.rtol:g} ({r.metrics.get('error_stat', 'elemwise')})")
        if r.min_atol is not None:
            lines.append(f"    minimum tolerance that would pass: atol={r.min_atol:.4g} OR rtol={r.min_rtol:.4g}")
        s = r.stats
        if s:
            lines.append(f"    abs error: mean={s['mean']:.4g} std={s['std']:.4g} median={s['median']:.4g} "
                         f"p90={s['p90']:.4g} p99={s['p99']:.4g} max={s['max']:.4g} at {tuple(s['argmax'])}")
            rs = r.rel_stats
            lines.append(f"    rel error: mean={rs['mean']:.4g} median={rs['median']:.4g} max={rs['max']:.4g} "
                         f"at {tuple(rs['argmax'])}")
        if r.histogram:
            lines.append("    abs error histogram:")
            lines.extend("      " + h for h in r.histogram)
    elif r.metrics:
        lines.append("    " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in r.metrics.items()))
    return lines


def render(summary, verbose=False, stream=None) -> str:
    """The whole end-of-run report as one string."""
    out = []
    for pr in summary.pairs:
        title = f"iteration {pr.iteration}: {pr.source} vs {pr.reference}"
        failing = [r for r in pr.outputs.values() if not r.passed or verbose]
        failing += [r for d in pr.extra_funcs.values() for r in d.values() if not r.passed or verbose]
        if failing:
            out.append(f"---- {title} ----")
            for r in failing:
                out.extend(output_detail(r, verbose))
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
                               f"rtol={d.result.min_rtol:.4g}")
                for other in d.born_elsewhere[:3]:
                    out.append(f"    another error is born at '{other.tensor}' (node '{other.node}', {other.op_type})")
            elif pr.layers:
                out.append("    every compared tensor agrees")
    for src, it, name, problems in summary.validation:
        out.append(paint(f"VALIDATION FAILED | {src} iteration {it} | '{name}' has {', '.join(problems)}", "red", stream))
    rows = []
    for pr in summary.pairs:
        for r in list(pr.outputs.values()) + [r for d in pr.extra_funcs.values() for r in d.values()]:
            metric = fmt(r.max_abs) if r.func == "simple" else fmt(r.metrics.get(r.func))
            rows.append([str(pr.iteration), f"{pr.source} vs {pr.reference}", r.name, r.func, status(r.passed, stream),
                         metric, fmt(r.max_rel) if r.func == "simple" else "-",
                         fmt(r.min_atol) if r.func == "simple" else "-", fmt(r.min_rtol) if r.func == "simple" else "-"])
    if rows:
        out.append("")
        out.append(table(rows, ["iter", "runners", "output", "check", "status", "max abs/metric", "max rel",
                                "min atol", "min rtol"]))
    npairs = len(summary.pairs)
    passed = sum(p.passed for p in summary.pairs)
    verdict = "PASSED" if summary.passed else "FAILED"
    rate = f"{100.0 * passed / npairs:.1f}%" if npairs else "n/a"
    what = f"{passed}/{npairs} comparisons passed ({rate})" if npairs else "nothing to compare (one source)"
    out.append(f"{paint(verdict, 'green' if summary.passed else 'red', stream)} | {what} "
               f"over {summary.iterations} iteration(s)"
               + (f" | {len(summary.validation)} NaN/Inf finding(s)" if summary.validation else ""))
    return "\n".join(out)
