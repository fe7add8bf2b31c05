"""Search reports without plotting libraries: an SVG of per-layer error along the graph and an HTML page per search
(the plot, the chosen set, the probe history). Written by hand so no optional dependency is needed to read them.
"""
from __future__ import annotations

import html
import json
import math


def error_svg(rows, chosen=(), title="per-layer error (log scale)", width=900, height=260) -> str:
    """Bars in topological order: the larger of 'alone' and 'added' error per layer; chosen layers in red."""
    rows = sorted(rows, key=lambda r: r["order"])
    chosen = set(chosen)
    n = max(len(rows), 1)
    left, bottom, top = 50, 30, 20
    plot_h = height - bottom - top
    bar_w = max(1.0, (width - left - 10) / n)

    def y_of(v):
        if v is None or v <= 0:
            return 0.0
        if math.isinf(v):
            return 1.0
        return min(1.0, max(0.0, (math.log10(v) + 8) / 10))   # 1e-8 .. 1e2

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="10">', f'<text x="{left}" y="12">{html.escape(title)}</text>']
    for exp in range(-8, 3, 2):
        y = top + plot_h * (1 - (exp + 8) / 10)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="5" y="{y + 3:.1f}">1e{exp}</text>')
    for i, r in enumerate(rows):
        v = r.get("score")
        h = plot_h * y_of(v)
        x = left + i * bar_w
        colour = "#d62728" if r["layer"] in chosen else ("#ff7f0e" if v is not None and math.isinf(v) else "#1f77b4")
        label = f'{r["layer"]}: alone {r.get("alone")}, added {r.get("added")}'
        parts.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(bar_w - 0.5, 0.5):.1f}" '
                     f'height="{h:.1f}" fill="{colour}"><title>{html.escape(label)}</title></rect>')
    parts.append(f'<text x="{left}" y="{height - 8}">layers in topological order ({len(rows)}); red: chosen, '
                 f'orange: non-finite</text></svg>')
    return "\n".join(parts)


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
