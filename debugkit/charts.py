"""Plain inline SVG charts for the HTML reports (no plotting library, no script, no network): a bar per layer along
the network on a log scale, and a histogram. `run --report FILE.html` and `debug precision`'s report draw with these.
"""
from __future__ import annotations

import html
import math

RED, ORANGE, BLUE, GREEN, GREY = "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#ddd"


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def layer_bars_svg(bars, *, title, y_label="error", marker=None, marker_caption=None, marker_data=None,
                   legend="", width=900, height=280, lo_exp=-8, hi_exp=2) -> str:
    """Bars in network order on a log scale from 1e{lo_exp} to 1e{hi_exp}.

    bars: [(label, value, colour)] (value None or <= 0: no bar; inf: a full-height bar); marker: the index of the
    bar to mark with a vertical line and `marker_caption` (the first divergence), or None; marker_data: extra
    data-* attributes of the marker, for readers of the page."""
    n = max(len(bars), 1)
    left, bottom, top = 50, 34, 24
    plot_h = height - bottom - top
    bar_w = max(1.0, (width - left - 10) / n)
    span = hi_exp - lo_exp

    def frac(v):
        if v is None or not v > 0:
            return 0.0
        if math.isinf(v):
            return 1.0
        return min(1.0, max(0.0, (math.log10(v) - lo_exp) / span))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="10" role="img"><title>{_esc(title)}</title>', f'<text x="{left}" y="14">{_esc(title)}</text>']
    for exp in range(lo_exp, hi_exp + 1, 2):
        y = top + plot_h * (1 - (exp - lo_exp) / span)
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GREY}"/>'
                     f'<text x="5" y="{y + 3:.1f}">1e{exp}</text>')
    for i, (label, value, colour) in enumerate(bars):
        h = plot_h * frac(value)
        x = left + i * bar_w
        parts.append(f'<rect class="bar" data-layer="{_esc(label)}" x="{x:.1f}" y="{top + plot_h - h:.1f}" '
                     f'width="{max(bar_w - 0.5, 0.5):.1f}" height="{h:.1f}" fill="{colour}">'
                     f'<title>{_esc(label)}: {y_label} {_esc(value)}</title></rect>')
    if marker is not None and 0 <= marker < len(bars):
        x = left + (marker + 0.5) * bar_w
        label = bars[marker][0]
        anchor = "end" if x > width * 0.6 else "start"
        dx = -4 if anchor == "end" else 4
        data = "".join(f' data-{k}="{_esc(v)}"' for k, v in (marker_data or {}).items())
        parts.append(f'<g class="marker" data-layer="{_esc(label)}"{data}>'
                     f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{RED}" '
                     f'stroke-dasharray="4,2"/><text x="{x + dx:.1f}" y="{top + 10}" fill="{RED}" '
                     f'text-anchor="{anchor}">{_esc(marker_caption or label)}</text></g>')
    parts.append(f'<text x="{left}" y="{height - 8}">{_esc(legend)}</text></svg>')
    return "\n".join(parts)


def histogram_svg(counts, edges, *, title, width=420, height=170) -> str:
    """A histogram: one bar per bin, bin edges under the first and last bars, counts in each bar's tooltip."""
    counts = [int(c) for c in counts]
    n = max(len(counts), 1)
    left, bottom, top = 40, 28, 22
    plot_h = height - bottom - top
    bar_w = (width - left - 10) / n
    peak = max(counts + [1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="10" role="img"><title>{_esc(title)}</title>', f'<text x="{left}" y="14">{_esc(title)}</text>',
             f'<text x="5" y="{top + 8}">{peak}</text>']
    for i, c in enumerate(counts):
        h = plot_h * c / peak
        x = left + i * bar_w
        parts.append(f'<rect class="bin" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(bar_w - 1, 0.5):.1f}" '
                     f'height="{h:.1f}" fill="{BLUE}"><title>[{edges[i]:.4g}, {edges[i + 1]:.4g}): {c}</title></rect>')
    if len(edges) >= 2:
        parts.append(f'<text x="{left}" y="{height - 10}">{edges[0]:.3g}</text>'
                     f'<text x="{width - 10}" y="{height - 10}" text-anchor="end">{edges[-1]:.3g}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
