"""`run --report FILE.html`: the run's verdict as one self-contained page (inline SVG, no script, no network).

Per runner pair: the per-layer error chart along the network with the first divergence marked (with --mark-all /
--mark), an error histogram per output, and the table the terminal prints. It renders the same RunSummary as the
terminal report and --json, so the three cannot disagree.
"""
from __future__ import annotations

import html
import json

from debugkit.charts import BLUE, ORANGE, RED, histogram_svg, layer_bars_svg

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1000px}td,th{padding:2px 8px;text-align:left}"
          "tr:nth-child(even){background:#f4f4f4}.PASSED{color:#2ca02c}.FAILED{color:#d62728}"
          ".hists{display:flex;flex-wrap:wrap;gap:1em}code{background:#f4f4f4}")


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _num(x) -> str:
    if x is None:
        return "-"
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return _e(x)


def _status(ok) -> str:
    word = "PASSED" if ok else "FAILED"
    return f"<span class='{word}'>{word}</span>"


def layer_chart(pr) -> str:
    """The per-tensor max abs error of one pair in network order; failing tensors red, the first divergence marked."""
    names = list(pr.layers)
    d = pr.divergence
    bars = []
    for name in names:
        r = pr.layers[name]
        v = r.max_abs
        nonfinite = r.metrics.get("nonfinite") or (0, 0)
        if not r.passed and (v is None or nonfinite[0] != nonfinite[1]):   # NaN/Inf on one side, or no numbers
            bars.append((name, float("inf"), ORANGE))
        else:
            bars.append((name, v, RED if not r.passed else BLUE))
    marker = names.index(d.tensor) if d is not None and d.tensor in names else None
    node = f" (node {d.node}, {d.op_type})" if d is not None and d.node else ""
    legend = (f"{len(names)} tensors in network order; red: out of tolerance, orange: not comparable (NaN/Inf or "
              f"shape); dashed line: first divergence{node}")
    caption = data = None
    if d is not None:
        how = "born here" if d.born_here else "propagated"
        caption = f"first divergence: {d.node or d.tensor}" + (f" ({d.op_type}, {how})" if d.node else f" ({how})")
        data = {"tensor": d.tensor, "node": d.node or "", "op-type": d.op_type or "", "born-here": d.born_here}
    return layer_bars_svg(bars, title=f"{pr.source} vs {pr.reference}: max abs error per tensor (log scale)",
                          y_label="max abs error", marker=marker, marker_caption=caption, marker_data=data,
                          legend=legend)


def _output_rows(pr) -> list[str]:
    rows = []
    for r in list(pr.outputs.values()) + [r for d in pr.extra_funcs.values() for r in d.values()]:
        simple = r.func == "simple"
        metric = r.max_abs if simple else r.metrics.get(r.func)
        rows.append(f"<tr><td>{pr.iteration}</td><td>{_e(pr.source)} vs {_e(pr.reference)}</td><td><code>"
                    f"{_e(r.name)}</code></td><td>{_e(r.func)}</td><td>{_status(r.passed)}</td><td>{_num(metric)}"
                    f"</td><td>{_num(r.max_rel) if simple else '-'}</td><td>{_num(r.min_atol) if simple else '-'}</td>"
                    f"<td>{_num(r.min_rtol) if simple else '-'}</td><td>{_e(r.reason)}</td></tr>")
    return rows


def run_html(summary, title: str, provenance: dict | None = None) -> str:
    from debugkit.report import verdict_line
    out = [f"<!doctype html><html lang='en'><meta charset='utf-8'><title>{_e(title)}</title>",
           f"<style>{_STYLE}</style><h1>{_e(title)}</h1>",
           f"<p class='verdict'>{_e(verdict_line(summary))}</p>"]
    for p in summary.problems:
        out.append(f"<p class='FAILED'>FAILED | {_e(p)}</p>")
    for nf in summary.first_nonfinite.values():
        out.append(f"<p class='FAILED'>{_e(nf.headline())}</p>")
    rows = [row for pr in summary.pairs for row in _output_rows(pr)]
    if rows:
        out.append("<h2>Outputs</h2><table><tr><th>iter</th><th>runners</th><th>output</th><th>check</th>"
                   "<th>status</th><th>max abs / metric</th><th>max rel</th><th>min atol</th><th>min rtol</th>"
                   "<th>reason</th></tr>" + "".join(rows) + "</table>")
    for pr in summary.pairs:
        if pr.layers:
            d = pr.divergence
            out.append(f"<h2>Layerwise: {_e(pr.source)} vs {_e(pr.reference)}, iteration {pr.iteration}</h2>")
            if d is not None:
                out.append(f"<p class='divergence' data-tensor='{_e(d.tensor)}' data-node='{_e(d.node or '')}'>"
                           f"<b>{_e(d.headline())}</b></p>")
            else:
                out.append("<p>every compared tensor agrees</p>")
            out.append(layer_chart(pr))
        hists = [(r.name, r.hist_counts, r.hist_edges) for r in pr.outputs.values() if r.hist_counts]
        if hists:
            out.append(f"<h3>Error histograms: {_e(pr.source)} vs {_e(pr.reference)}, iteration {pr.iteration}</h3>"
                       "<div class='hists'>" + "".join(
                           histogram_svg(c, e, title=f"{name}: |ours - reference|") for name, c, e in hists)
                       + "</div>")
    if provenance:
        out.append(f"<details><summary>provenance</summary><pre>{_e(json.dumps(provenance, indent=1, default=str))}"
                   f"</pre></details>")
    out.append("</html>")
    return "\n".join(out)
