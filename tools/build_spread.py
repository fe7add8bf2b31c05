"""Build-to-build spread: one model built N times in one process, every engine timed interleaved, and the layer
choices that separate the fast engines from the slow ones.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/build_spread.py [--model yolov8n] [--builds 8]
        [--iterations 40] [--block 5] [--no-streams] [--ab NAME=VALUE] [--json F]

Each build is `tools/benchmark.py`'s (every tactic, the process tuned as the CLI tunes it: the CPU pool and BLAS
threads; DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread). Each engine's context is run until its
two-stream region (runtime/streams.py) has decided, then all are timed in alternating blocks
(debugkit.benchmark.interleaved), so a shared machine's load hits every engine alike. Prints the spread (min /
median / max of the engines' median latencies), then per layer whose tactic differs between builds the engines'
median latency by the tactic chosen (and each tactic's build timing), and the region's decision per engine.
`--ab tactic_selection.RUNOFF_ROUNDS=0`: every other build (A) with that builder setting (a module of
backends/engine/builder), the others (B) as the code stands; the spread of each, from the same interleaved timing.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def layer_choices(ctx) -> dict:
    """{layer name: (tactic name, {tactic: build ms})} of a built engine."""
    return {node.name: (tactic.name, dict(node.meta.get("timings_ms") or {}))
            for node, tactic, *_ in ctx.engine.executor.steps}


def regions(ctx) -> list:
    """[(first layer, two streams?)] of the context's compiled plans' two-stream regions (decided or dropped)."""
    from backends.engine.runtime import streams
    out = []
    for cp in ctx.arenas.compiled.values():
        for u in cp.__dict__.get("_units", ((), ()))[0]:
            if isinstance(u, streams.Region):
                out.append((u.name, u.side))
    return out or [("-", False)]


def settle_streams(ctx, feeds):
    """Run until the two-stream region has made its choice (its trials run on a context's first executes)."""
    from backends.engine.runtime import streams
    for _ in range(4 + 2 * (streams.WARM + 2 * (streams.TRIALS + 1))):
        ctx.execute(dict(feeds))


def differing(choices: list) -> dict:
    """{layer: [tactic per build]} for the layers whose tactic is not the same in every build."""
    out = {}
    for name in choices[0]:
        picked = [c.get(name, (None, {}))[0] for c in choices]
        if len(set(picked)) > 1:
            out[name] = picked
    return out


def agreement(choices: list) -> float:
    """The share of layers two builds chose the same tactic for, averaged over every pair of `choices`."""
    pairs = [(a, b) for i, a in enumerate(choices) for b in choices[i + 1:]]
    if not pairs:
        return 1.0
    return statistics.mean(sum(a[k][0] == b.get(k, (None,))[0] for k in a) / max(1, len(a)) for a, b in pairs)


def by_choice(picked: list, medians: list) -> dict:
    """{tactic: [engine median ms]} for one layer."""
    out = collections.defaultdict(list)
    for t, m in zip(picked, medians):
        out[t].append(m)
    return dict(out)


def _setting(text):
    """(module, attribute, value) of 'MODULE.NAME=VALUE' (a module of backends/engine/builder; VALUE a Python
    literal)."""
    import ast
    import importlib
    name, value = text.split("=", 1)
    mod, attr = name.rsplit(".", 1)
    module = importlib.import_module(f"backends.engine.builder.{mod}")
    getattr(module, attr)   # an unknown name fails here, not silently
    return module, attr, ast.literal_eval(value)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov8n")
    ap.add_argument("--builds", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=40, help="timed calls per engine")
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--no-streams", action="store_true", help="plans without a two-stream region")
    ap.add_argument("--ab", help="MODULE.NAME=VALUE: builds 0, 2, 4, ... (A) with this builder setting")
    ap.add_argument("--json", help="also write the per-build rows here")
    a = ap.parse_args(argv)
    import tools.benchmark as B
    from tools.tactics_ab import model_input
    from debugkit.benchmark import interleaved
    from backends.engine.runtime import streams
    from native.cpu import threads
    threads.tune()
    if a.no_streams:
        streams.ENABLED = False
    path, feeds = model_input(a.model)
    print(f"{a.model}: {a.builds} builds, {threads.num_threads()} threads; load {os.getloadavg()[0]:.2f} at "
          f"{time.strftime('%H:%M:%S UTC', time.gmtime())}", flush=True)
    ctxs, choices, build_s, runs = [], [], [], []
    setting = _setting(a.ab) if a.ab else None
    from native.device import get_device
    dev_cls = type(get_device("cpu"))
    real_time, counted = dev_cls.time, [0]

    def time_counted(self, fn, stream=None):   # the builder's timed runs (tactic timing's device clock)
        counted[0] += 1
        return real_time(self, fn, stream)
    dev_cls.time = time_counted
    for i in range(a.builds):
        if setting is not None:
            mod, attr, value = setting
            was = getattr(mod, attr)
            setattr(mod, attr, value if i % 2 == 0 else was)
        counted[0] = 0
        try:
            ctx, s, _ = B.build_engine(path, feeds)
        finally:
            if setting is not None:
                setattr(mod, attr, was)
        runs.append(counted[0])
        settle_streams(ctx, feeds)
        ctxs.append(ctx)
        choices.append(layer_choices(ctx))
        build_s.append(s)
        print(f"  build {i}: {s:.1f} s, {runs[-1]} timed runs, region {regions(ctx)}", flush=True)
    dev_cls.time = real_time
    ref = ctxs[0].execute(dict(feeds))
    for c in ctxs[1:]:
        out = c.execute(dict(feeds))
        diff = max(float(np.max(np.abs(out[k].astype(np.float64) - ref[k]))) for k in ref)
        if diff > 1e-2:
            print(f"  warning: an engine's outputs differ from build 0's by {diff:.3g}")
    load0 = os.getloadavg()[0]
    fns = {i: (lambda c=c: c.execute(dict(feeds))) for i, c in enumerate(ctxs)}
    times, _ = interleaved(fns, a.iterations, 0, block=a.block)
    med = [float(np.median(times[i])) * 1e3 for i in range(len(ctxs))]
    srt = sorted(med)
    print(f"timed {time.strftime('%H:%M:%S UTC', time.gmtime())}, load {load0:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"build s {min(build_s):.1f}-{max(build_s):.1f}")
    print("engine medians ms: " + ", ".join(f"{m:.3f}" for m in med))
    print(f"SPREAD min {srt[0]:.3f} / median {statistics.median(srt):.3f} / max {srt[-1]:.3f} ms "
          f"(max / min {srt[-1] / srt[0]:.3f})")
    if setting is not None:
        for label, part in (("A " + a.ab, med[0::2]), ("B as is", med[1::2])):
            p = sorted(part)
            which = slice(0 if label[0] == "A" else 1, None, 2)
            print(f"  {label}: min {p[0]:.3f} / median {statistics.median(p):.3f} / max {p[-1]:.3f} ms "
                  f"(max / min {p[-1] / p[0]:.3f}); builds {sum(build_s[which]):.1f} s; "
                  f"{statistics.mean(runs[which]):.0f} timed runs a build; "
                  f"{len(differing(choices[which]))} layers differ, pairs agree on {agreement(choices[which]):.1%}")
    else:
        print(f"  builds agree pairwise on {agreement(choices):.1%} of the layers")
    for i, c in enumerate(ctxs):
        print(f"  engine {i}: {med[i]:.3f} ms, region {regions(c)}")
    diff = differing(choices)
    print(f"{len(diff)} layers whose tactic differs between builds:")
    for name, picked in diff.items():
        groups = by_choice(picked, med)
        timed = collections.defaultdict(list)
        for c in choices:
            for t, ms in c[name][1].items():
                timed[t].append(ms)
        print(f"  {name[:60]}: " + "; ".join(
            f"{t} x{len(v)} -> engines {statistics.median(v):.3f} ms (build {statistics.median(timed[t]):.3f} ms)"
            for t, v in sorted(groups.items())) + " | build timings " + ", ".join(
            f"{t} {min(v):.3f}-{max(v):.3f}" for t, v in sorted(timed.items())))
    if a.json:
        from native.files import write_json
        write_json(a.json, {"model": a.model, "medians_ms": med, "build_s": build_s, "timed_runs": runs,
                            "regions": [regions(c) for c in ctxs],
                            "choices": [{k: v[0] for k, v in c.items()} for c in choices]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
