"""TensorRT's IProfiler: per-layer time of every inference.

Set `context.profiler = LayerProfiler()` (or any object with `report_layer_time(layer_name, ms)`); each
`execute` then times every layer on the device's clock (`Device.time`, as the builder times tactics: on a GPU,
events around the layer's kernels with the GPU held busy while the host enqueues them, so the time is the kernels'
own and not the host's Python launching them) and reports it. `LayerProfiler` keeps the times per inference and summarises them: median ms per layer, its share of
the total, and the tactic that ran it.
"""
from __future__ import annotations

import statistics


class IProfiler:
    """Receives one call per layer per inference."""

    def report_layer_time(self, layer_name: str, ms: float):
        raise NotImplementedError


class LayerProfiler(IProfiler):
    def __init__(self):
        self.runs: list[dict] = []       # one {layer: ms} per inference
        self._current: dict | None = None
        self.tactics: dict[str, str] = {}

    def start_inference(self):
        self._current = {}
        self.runs.append(self._current)

    def report_layer_time(self, layer_name, ms):
        if self._current is None:
            self.start_inference()
        self._current[layer_name] = self._current.get(layer_name, 0.0) + float(ms)

    def summary(self) -> list[dict]:
        """Per layer (in execution order): median and mean ms over the inferences, share of the total."""
        if not self.runs:
            return []
        names = list(dict.fromkeys(n for r in self.runs for n in r))
        med = {n: statistics.median([r.get(n, 0.0) for r in self.runs]) for n in names}
        total = sum(med.values()) or 1.0
        return [{"layer": n, "median_ms": round(med[n], 4),
                 "mean_ms": round(statistics.fmean([r.get(n, 0.0) for r in self.runs]), 4),
                 "percent": round(100 * med[n] / total, 1), "tactic": self.tactics.get(n)} for n in names]

    def table(self, top: int | None = None) -> str:
        rows = self.summary()
        total = sum(r["median_ms"] for r in rows)
        shown = sorted(rows, key=lambda r: -r["median_ms"])[:top] if top else rows
        width = min(70, max([len(r["layer"]) for r in shown] + [5]))
        lines = [f"per-layer time over {len(self.runs)} inference(s) (median): {total:.3f} ms in {len(rows)} layers",
                 f"{'layer':{width}s}  {'ms':>9s}  {'%':>5s}  tactic"]
        for r in shown:
            name = r["layer"] if len(r["layer"]) <= width else r["layer"][:width - 1] + "…"
            lines.append(f"{name:{width}s}  {r['median_ms']:9.3f}  {r['percent']:5.1f}  {r['tactic'] or ''}")
        return "\n".join(lines)
