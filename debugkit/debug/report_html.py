"""Search reports without plotting libraries: an SVG of per-layer error along the graph and an HTML page per search
(the plot, the chosen set, the probe history). Written by hand so no optional dependency is needed to read them.
"""
from __future__ import annotations

import html
import json
import math

from debugkit.charts import BLUE, ORANGE, RED, layer_bars_svg


def error_svg(rows, chosen=(), title="per-layer error (log scale)", width=900, height=260) -> str:
    """Bars in topological order: the larger of 'alone' and 'added' error per layer; chosen layers in red, non-finite
    ones orange (drawn by debugkit.charts, as run's report is)."""
    rows = sorted(rows, key=lambda r: r["order"])
    chosen = set(chosen)
    bars = [(r["layer"], r.get("score"), RED if r["layer"] in chosen else (
        ORANGE if r.get("score") is not None and math.isinf(r["score"]) else BLUE)) for r in rows]
    return layer_bars_svg(bars, title=title, y_label="error (larger of alone / added)", width=width, height=height,
                          legend=f"layers in topological order ({len(rows)}); red: chosen, orange: non-finite")


def search_html(title: str, summary: dict, rows=(), chosen=(), probes=()) -> str:
    """One self-contained page: summary, error plot, chosen set, probe history."""
    out = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
           "tr:nth-child(even){background:#f4f4f4}.hit{color:#2ca02c}.miss{color:#d62728}</style>",
           f"<h1>{html.escape(title)}</h1><table>"]
    for k, v in summary.items():
        out.append(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>")
    out.append("</table>")
    if rows:
        out.append("<h2>Per-layer error along the graph</h2>" + error_svg(rows, chosen))
    out.append(f"<h2>Chosen set ({len(chosen)})</h2><ul>" +
               "".join(f"<li><code>{html.escape(c)}</code></li>" for c in chosen) + "</ul>")
    if probes:
        out.append("<h2>Probe history</h2><table><tr><th>#</th><th>candidate</th><th>check</th><th>cost (s)</th>"
                   "<th>detail</th></tr>")
        for i, p in enumerate(probes):
            res = p.get("result")
            if isinstance(res, dict) and "hit" in res:
                txt, good = ("passes", True) if res["hit"] else ("fails", False)
            elif isinstance(res, dict):
                txt, good = ("fails", False) if res.get("fails") else ("passes", True)
            else:
                txt, good = str(res), bool(res)
            art = p.get("artifact")
            desc = f"{len(art)} layer(s)" if isinstance(art, list) else str(art)
            if isinstance(art, list) and len(art) <= 4:
                desc += ": " + ", ".join(map(str, art))
            detail = res.get("reason", "") if isinstance(res, dict) else ""
            out.append(f"<tr><td>{i + 1}</td><td>{html.escape(desc)}</td>"
                       f"<td class='{'hit' if good else 'miss'}'>{txt}</td>"
                       f"<td>{p.get('cost', 0):.2f}</td><td>{html.escape(str(detail)[:160])}</td></tr>")
        out.append("</table>")
    out.append(f"<details><summary>raw summary</summary><pre>{html.escape(json.dumps(summary, indent=1, default=str))}"
               f"</pre></details>")
    return "\n".join(out)
