"""Build-to-build spread: one model built N times in one process, every engine timed interleaved, and the layer
choices that separate the fast engines from the slow ones.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python tools/build_spread.py [--model yolov8n] [--builds 8]
        [--iterations 40] [--block 5] [--no-streams] [--ab NAME=VALUE] [--max-others 0.1] [--json F]

Each build is `tools/benchmark.py`'s (every tactic, the process tuned as the CLI tunes it: the CPU pool and BLAS
threads; DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread). Each engine's context is run until its
two-stream region (runtime/streams.py) has decided, then all are timed in alternating blocks
(debugkit.benchmark.interleaved), so a shared machine's load hits every engine alike; with `--max-others`, a
block counts only when other processes used at most that share of a CPU meanwhile (/proc/stat,
tools/layer_scaling.py's gate), for a machine others share. Prints the spread (min /
median / max of the engines' median latencies), then per layer whose tactic differs between builds the engines'
median latency by the tactic chosen (and each tactic's build timing), and the region's decision per engine.
`--ab 'tactic_selection.RUNOFF_ROUNDS=0;native.cpu.device.CpuDevice.TIMING_WAIT_S=0'`: every other build (A) with
those settings, the others (B) as the code stands; the spread of each, from the same interleaved timing.
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


def _settings(text) -> list:
    """[(object, attribute, value)] of 'DOTTED.NAME=VALUE[;...]' (a module or class attribute, VALUE a Python
    literal; a name without a package is a module of backends/engine/builder)."""
    import ast
    import importlib
    out = []
    for item in [x for x in text.split(";") if x.strip()]:
        name, value = item.strip().split("=", 1)
        parts = name.split(".")
        if len(parts) == 2:
            parts = ["backends", "engine", "builder"] + parts
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for p in parts[cut:-1]:
                obj = getattr(obj, p)
            getattr(obj, parts[-1])   # an unknown name fails here, not silently
            out.append((obj, parts[-1], ast.literal_eval(value)))
            break
        else:
            raise SystemExit(f"build_spread: no module in {name!r}")
    return out


def _spearman(x, y) -> float:
    """Spearman's rank correlation of two equal-length lists (no ties expected: medians of timings)."""
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rx, ry)[0, 1])


def gated(fns, iterations, block, max_others, patience):
    """({name: [seconds]}, blocks kept, blocks tried): blocks of `block` calls in rotating order, each after an
    untimed call, kept only where other processes used at most `max_others` of a CPU during it."""
    from native.cpu import threads
    from tools.layer_scaling import _cpu_ticks, _others_share
    times = {k: [] for k in fns}
    order = list(fns)
    kept = tried = r = 0
    give_up = time.time() + patience
    while min(len(v) for v in times.values()) < iterations and time.time() < give_up:
        for k in order[r % len(order):] + order[:r % len(order)]:
            threads.rest()
            fns[k]()
            before = _cpu_ticks()
            ts = []
            for _ in range(block):
                t0 = time.perf_counter()
                fns[k]()
                ts.append(time.perf_counter() - t0)
            tried += 1
            if _others_share(before, _cpu_ticks()) <= max_others:
                times[k] += ts
                kept += 1
        r += 1
    return times, kept, tried


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov8n")
    ap.add_argument("--builds", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=40, help="timed calls per engine")
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--no-streams", action="store_true", help="plans without a two-stream region")
    ap.add_argument("--streams-off-too", action="store_true", help="also time each engine's plan compiled without "
                    "a two-stream region (streams.ENABLED off), in the same loop")
    ap.add_argument("--ab", help="NAME=VALUE[;NAME=VALUE]: builds 0, 2, 4, ... (A) with these settings (module "
                    "or class attributes, e.g. 'tactic_selection.RUNOFF_ROUNDS=0;native.cpu.device.CpuDevice."
                    "TIMING_WAIT_S=0')")
    ap.add_argument("--max-others", type=float, help="keep only blocks during which other processes used at most "
                    "this share of a CPU")
    ap.add_argument("--passes", type=int, default=1, help="time every engine this many times over (the spread's "
                    "rank correlation between passes: builds or noise)")
    ap.add_argument("--patience", type=float, default=600, help="seconds the gated timing may take")
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
    ctxs, choices, build_s, runs, waits, offs = [], [], [], [], [], []
    settings = _settings(a.ab) if a.ab else []
    from native.device import get_device
    dev_cls = type(get_device("cpu"))
    real_time, counted = dev_cls.time, [0]

    def time_counted(self, fn, stream=None):   # the builder's timed runs (tactic timing's device clock)
        counted[0] += 1
        return real_time(self, fn, stream)
    dev_cls.time = time_counted
    for i in range(a.builds):
        saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in settings]
        if i % 2 == 0:
            for obj, attr, value in settings:
                setattr(obj, attr, value)
        counted[0] = 0
        try:
            ctx, s, _ = B.build_engine(path, feeds)
        finally:
            for obj, attr, was in saved:
                setattr(obj, attr, was)
        runs.append(counted[0])
        waited = getattr(get_device("cpu"), "timing_waited", [])
        waits.append((len(waited), sum(waited)))
        settle_streams(ctx, feeds)
        ctxs.append(ctx)
        if a.streams_off_too:    # the same engine, its plan compiled without a two-stream region
            was = streams.ENABLED
            streams.ENABLED = False
            try:
                off = ctx.engine.create_execution_context()
            finally:
                streams.ENABLED = was
            for _ in range(4):
                off.execute(dict(feeds))
            offs.append(off)
        choices.append(layer_choices(ctx))
        build_s.append(s)
        print(f"  build {i}: {s:.1f} s, {runs[-1]} timed runs, {waits[-1][0]} waits for the pool's back-off "
              f"({waits[-1][1]:.2f} s), region {regions(ctx)}", flush=True)
    dev_cls.time = real_time
    ref = ctxs[0].execute(dict(feeds))
    for c in ctxs[1:]:
        out = c.execute(dict(feeds))
        diff = max(float(np.max(np.abs(out[k].astype(np.float64) - ref[k]))) for k in ref)
        if diff > 1e-2:
            print(f"  warning: an engine's outputs differ from build 0's by {diff:.3g}")
    load0 = os.getloadavg()[0]
    fns = {i: (lambda c=c: c.execute(dict(feeds))) for i, c in enumerate(ctxs)}
    fns.update({len(ctxs) + i: (lambda c=c: c.execute(dict(feeds))) for i, c in enumerate(offs)})
    passes, off_ms = [], []
    for _ in range(a.passes):
        if a.max_others is None:
            times, _ = interleaved(fns, a.iterations, 0, block=a.block)
        else:
            times, kept, tried = gated(fns, a.iterations, a.block, a.max_others, a.patience)
            print(f"gated: {kept} of {tried} blocks kept (others <= {a.max_others} of a CPU)")
            if any(not v for v in times.values()):
                print("no quiet block for some engine: nothing to compare")
                return 1
        passes.append([float(np.median(times[i])) * 1e3 for i in range(len(ctxs))])
        if offs:
            off_ms.append([float(np.median(times[len(ctxs) + i])) * 1e3 for i in range(len(offs))])
    med = [statistics.median(p[i] for p in passes) for i in range(len(ctxs))]
    if len(passes) > 1:   # does an engine that read fast in one pass read fast in the next (build, not noise)?
        for j, p in enumerate(passes):
            print(f"pass {j} medians ms: " + ", ".join(f"{m:.3f}" for m in p))
        print(f"rank correlation of pass 0 and pass 1: {_spearman(passes[0], passes[1]):.2f}")
    srt = sorted(med)
    print(f"timed {time.strftime('%H:%M:%S UTC', time.gmtime())}, load {load0:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"build s {min(build_s):.1f}-{max(build_s):.1f}")
    print("engine medians ms: " + ", ".join(f"{m:.3f}" for m in med))
    print(f"SPREAD min {srt[0]:.3f} / median {statistics.median(srt):.3f} / max {srt[-1]:.3f} ms "
          f"(max / min {srt[-1] / srt[0]:.3f})")
    if settings:
        for label, part in (("A " + a.ab, med[0::2]), ("B as is", med[1::2])):
            p = sorted(part)
            which = slice(0 if label[0] == "A" else 1, None, 2)
            print(f"  {label}: min {p[0]:.3f} / median {statistics.median(p):.3f} / max {p[-1]:.3f} ms "
                  f"(max / min {p[-1] / p[0]:.3f}); builds {sum(build_s[which]):.1f} s; "
                  f"{statistics.mean(runs[which]):.0f} timed runs a build; "
                  f"{len(differing(choices[which]))} layers differ, pairs agree on {agreement(choices[which]):.1%}")
    else:
        print(f"  builds agree pairwise on {agreement(choices):.1%} of the layers")
    off_med = [statistics.median(p[i] for p in off_ms) for i in range(len(offs))]
    for i, c in enumerate(ctxs):
        print(f"  engine {i}: {med[i]:.3f} ms, region {regions(c)}"
              + (f"; without the region {off_med[i]:.3f} ms (on / off {med[i] / off_med[i]:.3f})" if offs else ""))
    if offs:
        srt = sorted(off_med)
        print(f"SPREAD without regions: min {srt[0]:.3f} / median {statistics.median(srt):.3f} / max {srt[-1]:.3f} ms "
              f"(max / min {srt[-1] / srt[0]:.3f})")
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
