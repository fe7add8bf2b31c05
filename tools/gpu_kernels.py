"""Which GPU kernels each layer of our CUDA engine runs and for how long, from PyTorch's profiler (CUPTI) in the same
process: `tools/gpu_peer.py --kernels`.

Two executions are profiled: one without a CUDA graph, each layer inside a `record_function` range that ends after
a device synchronisation (so every kernel lands in its layer's range: which kernels a layer launches), and one
replay of the captured CUDA graph (the kernels' times as they run in the timed engine, no host in between). The
replay's kernels are given to the layers in stream order, by the count each layer launched in the first execution.
The engine's own `--profile` (LayerProfiler) times layers with a host clock around a synchronised layer: at large
batches that adds each layer's Python launch time (0.1-0.3 ms) to kernels of 20-60 us.
"""
from __future__ import annotations

import json
import os
import tempfile

PREFIX = "L:"     # the ranges' name prefix: layer ranges apart from PyTorch's own


class LayerRanges:
    """An execution context's timeline hooks (begin / end: runtime/trace.py's protocol): one record_function range
    per layer, closed after the device has finished the layer."""

    def __init__(self, torch):
        self.torch = torch
        self.tactics = {}

    def start_inference(self):
        pass

    def end_inference(self):
        pass

    def begin(self, name, cat):
        cm = self.torch.autograd.profiler.record_function(PREFIX + name)
        cm.__enter__()
        return cm

    def end(self, cm):
        self.torch.cuda.synchronize()
        cm.__exit__(None, None, None)


def _trace_events(prof) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)["traceEvents"]


def kernels(events) -> list:
    """[(start us, duration us, name)] of the kernel events of a Chrome trace, in start order."""
    return sorted((e["ts"], e["dur"], e["name"]) for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")


def kernels_by_range(events, slack_us: float = 50.0) -> dict:
    """{layer: [(kernel name, us)]}: each kernel of the trace given to the layer range (a `PREFIX` user annotation)
    it started in (or within `slack_us` after its end); "?" for kernels outside every range."""
    ranges = sorted((e["ts"], e["ts"] + e["dur"], e["name"][len(PREFIX):]) for e in events
                    if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                    and str(e.get("name", "")).startswith(PREFIX))
    out = {}
    for ts, dur, name in kernels(events):
        layer = next((n for a, b, n in ranges if a <= ts <= b + slack_us), "?")
        out.setdefault(layer, []).append((name, dur))
    return out


def by_layer(layers, launched: dict, replay: list) -> list:
    """[(layer, tactic, kernel names, us)] in execution order: the first replayed inference's kernels (`replay`,
    in stream order) given to the layers by how many each launched unreplayed (`launched`: kernels_by_range);
    the unreplayed times where the counts disagree (a replay holding several inferences is cut at the first)."""
    counts = [len(launched.get(name, ())) for name, _ in layers]
    total = sum(counts)
    replayed = total and len(replay) >= total and len(replay) % total == 0
    rows, i = [], 0
    for (name, tactic), n in zip(layers, counts):
        if replayed:
            seg = [(k, d) for _, d, k in replay[i:i + n]]
            i += n
        else:
            seg = list(launched.get(name, ()))
        rows.append((name, tactic, [k for k, _ in seg], sum(d for _, d in seg)))
    return rows


def profile(ctx, engine, feeds, torch) -> dict:
    """Profile `ctx` (an execution context of `engine`, CUDA graphs enabled or not) on `feeds`: {"rows": by_layer,
    "kernel_us": the replay's kernel time per inference, "span_us": first kernel start to last kernel end}."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    was_graph = getattr(ctx, "_graph_mode", False)
    ctx.profiler = LayerRanges(torch)
    try:
        with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            ctx.execute(feeds)
            torch.cuda.synchronize()
    finally:
        ctx.profiler = None
    launched = kernels_by_range(_trace_events(prof))
    ctx.enable_cuda_graph()
    for _ in range(2):
        ctx.execute(feeds)
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        ctx.execute(feeds)
        torch.cuda.synchronize()
    replay = kernels(_trace_events(prof))
    if not was_graph:
        ctx.enable_cuda_graph(False)
    layers = [(n.name, n.tactic_name or "") for n in engine.graph.nodes]
    rows = by_layer(layers, launched, replay)
    n = sum(len(k) for _, _, k, _ in rows)
    first = replay[:n]
    return {"rows": rows, "kernel_us": sum(r[3] for r in rows),
            "span_us": (first[-1][0] + first[-1][1] - first[0][0]) if first else 0.0}


def table(result: dict, top: int | None = None) -> str:
    """The per-layer rows as text, slowest first when `top` is given."""
    rows = result["rows"]
    shown = sorted(rows, key=lambda r: -r[3])[:top] if top else rows
    lines = [f"kernels of one replay: {result['kernel_us']:.1f} us in {sum(len(r[2]) for r in rows)} kernels "
             f"(first start to last end {result['span_us']:.1f} us)",
             f"{'us':>8s}  {'n':>2s}  {'tactic':22s}  {'layer':60s}  kernels"]
    for name, tactic, ks, us in shown:
        lines.append(f"{us:8.1f}  {len(ks):2d}  {tactic[:22]:22s}  {name[:60]:60s}  {' | '.join(k[:60] for k in ks)}")
    return "\n".join(lines)
