"""The corpus benchmark: `debugkit bench` (the trtexec-like tool) over the corpus, one row per model.

    python tools/benchmark.py --all-corpus [--models a,b] [--fusion-off] [--iterations 20]
                              (exported models from DEBUGKIT_CORPUS, shipped ones from the model cache)
    python tools/benchmark.py MODEL.onnx [...]      the same as `debugkit bench MODEL.onnx [...]` (flags translated:
                                                    --shapes -> --input-shapes, --compare-onnxrt -> --compare onnxrt,
                                                    --no-fusion -> --disable-fusion, --nhwc -> --prefer-nhwc)

--all-corpus times every model of the corpus manifest (tests/corpus/models.json) that is available here: our engine
and ONNX Runtime in interleaved rounds (debugkit.benchmark.interleaved, as `bench --compare onnxrt` times them), ONNX
Runtime opened by the same factory with the same settings (debugkit.benchmark.onnxrt_session: intra-op threads = the
CPUs this process may use, one inter-op thread, spinning and arena on; printed), so the two tools give one ONNX
Runtime number. It ends with one table (model, ours ms, ORT ms, ours/ORT) and the median ratio; a model that is not
available or fails is listed with the reason. --fusion-off also builds with fusion off and prints the fusion-on /
fusion-off latency ratio: the ratio of the interleaved medians, and then (ONNX Runtime idle) the median of
call-by-call ratios from 2x--iterations alternating ABBA pairs with a bootstrap 95% interval, so a few-percent
difference can be told from this shared machine's noise. Feeds are random (seeded) from the corpus list.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import CorpusUnavailable, find_path, manifest  # noqa: E402


def corpus_names() -> list[str]:
    """Every model of the corpus manifest, in its order."""
    return [m["name"] for m in manifest()]


def stats(times_s):
    t = np.asarray(times_s) * 1e3
    return {"min": float(t.min()), "median": float(np.median(t)), "mean": float(t.mean()),
            "p90": float(np.percentile(t, 90)), "p99": float(np.percentile(t, 99))}


def make_feeds(spec: dict, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, s in spec.items():
        dtype = np.dtype(s.get("dtype", "float32"))
        if "value" in s:
            feeds[name] = np.full(s["shape"], s["value"], dtype)
        else:
            lo, hi = s.get("range", [-1, 1])
            feeds[name] = (rng.integers(lo, hi + 1, s["shape"]) if dtype.kind in "iu"
                           else rng.uniform(lo, hi, s["shape"])).astype(dtype)
    return feeds


def model_feed_spec(path, shapes):
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    from debugkit.cli._args import check_input_names
    check_input_names(shapes, [vi.name for vi in m.graph.input if vi.name not in inits], "--shapes")
    spec = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = shapes.get(vi.name) or [d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim]
        spec[vi.name] = {"shape": list(shape), "dtype": dtype.name}
    return spec


def interleaved(fns: dict, iterations, warmup, block=5) -> dict:
    """`warmup` untimed calls of each contender, then debugkit.benchmark.interleaved (the loop `debugkit bench
    --compare onnxrt` uses: alternating blocks, the order rotating each round; at each switch it waits until the
    other contender's threads are idle, ONNX Runtime's workers spinning ~40 ms after a run, then makes one untimed
    call)."""
    from debugkit import benchmark as B
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times, _ = B.interleaved(fns, iterations, 0.0, block=block)
    return times


def alternate(fa, fb, pairs, warmup=2):
    """Time a and b call by call in ABBA order (so neither always runs first): ([a seconds], [b seconds]), the i-th
    of each taken back to back. For two engines of ours; ONNX Runtime's still-spinning threads (see `interleaved`)
    would tax whichever ran right after it."""
    for _ in range(warmup):
        fa()
        fb()
    ta, tb = [], []
    for i in range(pairs):
        for fn, out in ((fa, ta), (fb, tb)) if i % 2 == 0 else ((fb, tb), (fa, ta)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return ta, tb


def paired_ratio(a_times, b_times, block=1, seed=0) -> dict:
    """a/b compared round by round (a round: `block` calls of each, taken close together in time), so the ratio
    cancels the machine's drift. Returns the median of the per-round ratios, a bootstrap 95% interval over rounds,
    and how many rounds a was faster in."""
    rounds = min(len(a_times), len(b_times)) // block
    if rounds == 0:
        return {}
    r = np.array([np.median(a_times[i * block:(i + 1) * block]) / np.median(b_times[i * block:(i + 1) * block])
                  for i in range(rounds)])
    rng = np.random.default_rng(seed)
    boot = np.median(r[rng.integers(0, rounds, (2000, rounds))], axis=1)
    return {"median": float(np.median(r)), "ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "a_faster_rounds": int(np.sum(r < 1)), "rounds": rounds}


def tactics_by_source(ctx) -> dict:
    """{first ONNX node of each layer: tactic name} of a built engine's context."""
    return {(node.source_nodes or [node.name])[0]: tactic.name for node, tactic, *_ in ctx.engine.executor.steps}


def _same_tactics_selector(picks: dict):
    """An algorithm selector that gives each layer the tactic `picks` names for its first ONNX node (when that
    tactic is among its choices): the fusion-off engine then runs the fused engine's convolution tactics, so the
    on/off ratio measures fusion and not two builds' timing luck."""
    from backends.engine.builder.config import AlgorithmSelector

    class SameTactics(AlgorithmSelector):
        def select_algorithms(self, context, choices):
            want = picks.get((context.get("source_nodes") or [context["name"]])[0])
            hit = [i for i, c in enumerate(choices) if c["tactic_name"] == want]
            return hit or list(range(len(choices)))
    return SameTactics()


def build_engine(path, feeds, fusion=True, nhwc=None, same_tactics_as=None, tactic_sources=None):
    """(context, build seconds, layer count) for an engine built at the feeds' shapes. same_tactics_as: {ONNX
    node: tactic name} to reuse (see `_same_tactics_selector`); tactic_sources: the builder's
    `config.tactic_sources` (None: every tactic)."""
    from backends.engine import BuilderConfig, BuilderFlag, Runtime, parse_onnx
    from backends.engine.build import profile_from_shapes
    from backends.engine.builder import Builder
    from backends.engine.plan import serialize_plan
    net, _ = parse_onnx(path)
    cfg = BuilderConfig()
    if not fusion:
        cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    cfg.prefer_nhwc = nhwc
    cfg.tactic_sources = tactic_sources
    if same_tactics_as:
        cfg.algorithm_selector = _same_tactics_selector(same_tactics_as)
    profile = profile_from_shapes(net, {k: v.shape for k, v in feeds.items()})
    if profile is not None:
        cfg.add_optimization_profile(profile)
    t0 = time.perf_counter()
    graph = Builder().build_graph(net, cfg, timing_feeds=feeds)
    plan = serialize_plan(graph, cfg)
    build_s = time.perf_counter() - t0
    return Runtime().deserialize_engine(plan).create_execution_context(), build_s, len(graph.nodes)


def ort_session(path, feeds):
    """ONNX Runtime as `debugkit bench --compare onnxrt` opens it (same factory, same settings)."""
    from debugkit import benchmark as B
    sess = B.onnxrt_session(path)
    f = {i.name: feeds[i.name] for i in sess.get_inputs()}
    return sess, f


def load_plan_engine(plan_path):
    """(context, engine) of a saved plan: no build, the plan's own tactics."""
    from backends.engine import Runtime
    with open(plan_path, "rb") as f:
        engine = Runtime().deserialize_engine(f.read())
    return engine.create_execution_context(), engine


def plan_feed_spec(engine, shapes):
    """Feeds for a plan: its inputs at the given shapes, else at their fixed shape or the profile's opt shape."""
    from debugkit.cli._args import check_input_names
    names = [t.name for t in engine.graph.inputs]
    check_input_names(shapes, names, "--shapes")
    profile = engine.profiles[0] if engine.profiles else None
    spec = {}
    for t in engine.graph.inputs:
        shape = shapes.get(t.name)
        if shape is None and profile is not None and profile.get_shape(t.name) is not None:
            shape = list(profile.get_shape(t.name)[1])
        if shape is None:
            shape = [d if d >= 0 else 1 for d in (t.shape or [])]
        spec[t.name] = {"shape": list(shape), "dtype": t.dtype or "float32"}
    return spec


def bench_all(path, feeds, iterations, warmup, with_ort=True, with_off=True, fusion=True, nhwc=None, plan=None,
              profile=False):
    """Build our engine (and the fusion-off engine), open ONNX Runtime, then time them interleaved.
    plan: (context, engine) of a saved plan to time instead of building one (`path` is then the ONNX model for
    ONNX Runtime, or None)."""
    if plan is not None:
        ctx, engine = plan
        build_s, layers = None, len(engine.graph.nodes)
    else:
        ctx, build_s, layers = build_engine(path, feeds, fusion=fusion, nhwc=nhwc)
    fns = {"ours": lambda: ctx.execute(feeds)}   # the feeds as they are, as ONNX Runtime gets them (execute copies none)
    res = {"ours": {"build_s": build_s, "layers": layers, "outputs": ctx.execute(dict(feeds))}}
    if with_off:
        ctx_off, _, layers_off = build_engine(path, feeds, fusion=False, same_tactics_as=tactics_by_source(ctx))
        fns["off"] = lambda: ctx_off.execute(feeds)
        res["off"] = {"layers": layers_off}
    if with_ort:
        sess, f = ort_session(path, feeds)
        fns["ort"] = lambda: sess.run(None, f)
        res["ort"] = {"outputs": dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))}
    times = interleaved(fns, iterations, warmup)
    for k, t in times.items():
        res[k]["latency_ms"] = stats(t)
        if k == "ours":
            res[k]["throughput_qps"] = len(t) / sum(t)
    if profile:   # per-layer times (IProfiler) after the timed runs, so profiling does not slow them
        from backends.engine.runtime.profiler import LayerProfiler
        ctx.profiler = LayerProfiler()
        for _ in range(max(3, iterations // 2)):
            ctx.execute(dict(feeds))
        res["ours"]["profile"] = ctx.profiler
        ctx.profiler = None
    if with_off:  # then fusion on vs off alone, call by call, for a ratio that resolves a few percent
        on_t, off_t = alternate(fns["ours"], fns["off"], max(2 * iterations, 60))
        res["off"]["paired_on_off"] = paired_ratio(on_t, off_t)
    return res


def report(name, ours, ort=None, off=None):
    lat = ours["latency_ms"]
    built = "saved plan" if ours["build_s"] is None else f"build {ours['build_s']:.2f} s"
    line = (f"{name}: {built}, {ours['layers']} layers | latency ms min {lat['min']:.2f} "
            f"median {lat['median']:.2f} mean {lat['mean']:.2f} p90 {lat['p90']:.2f} p99 {lat['p99']:.2f} | "
            f"throughput {ours['throughput_qps']:.1f} qps")
    if ort is not None:
        line += f" | ORT median {ort['latency_ms']['median']:.2f} ms, ours/ORT {lat['median'] / ort['latency_ms']['median']:.2f}"
        errs = [float(np.max(np.abs(np.asarray(ours['outputs'][k], np.float64) - v))) for k, v in ort["outputs"].items()
                if k in ours["outputs"] and np.asarray(v).dtype.kind == "f" and np.shape(ours['outputs'][k]) == np.shape(v)]
        if errs:
            line += f", max |ours-ORT| {max(errs):.2e}"
    if off is not None:
        line += f" | fusion off median {off['latency_ms']['median']:.2f} ms ({off['layers']} layers), " \
                f"on/off {lat['median'] / off['latency_ms']['median']:.2f}"
        p = off.get("paired_on_off")
        if p:
            line += (f" (paired {p['median']:.3f}, 95% CI {p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}, "
                     f"on faster in {p['a_faster_rounds']}/{p['rounds']} pairs)")
    print(line, flush=True)


def corpus_table(rows, iterations) -> str:
    """The --all-corpus summary: one row per model (ours ms, ORT ms, ours/ORT, both medians of the interleaved
    timed runs) and the median ratio over the models that ran, with the machine's CPU count and load."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"corpus at batch 1 (median of {iterations} interleaved runs each; {os.cpu_count()} CPUs, load average "
             f"{load:.2f} at the end)",
             f"| model | ours ms | ORT ms | ours / ORT |", "|---|---|---|---|"]
    ratios = []
    for name, ours, ort, note in rows:
        if ours is None:
            lines.append(f"| {name} | - | - | {note} |")
            continue
        ratios.append(ours / ort)
        lines.append(f"| {name} | {ours:.3f} | {ort:.3f} | {ours / ort:.2f} |")
    if ratios:
        lines.append(f"median ours / ORT over {len(ratios)} models: {float(np.median(ratios)):.2f} "
                     f"(worst {max(ratios):.2f})")
    return "\n".join(lines)


def parse_shapes(items):
    """--shapes in the CLI's one syntax: x:1x3x224x224 or x:[1,3,224,224], several comma- or space-separated."""
    from debugkit.cli._args import parse_shape_list
    return {k: list(v) for k, v in parse_shape_list(items, what="--shapes").items()}


def _as_bench(a) -> int:
    """One model: `debugkit bench` with this tool's older flag spellings translated (one benchmark, one set of
    numbers). --warmup N (calls) has no bench equivalent: bench warms up for --warm-up MS (default 200)."""
    from debugkit.cli.main import main as cli
    argv = ["bench", a.model, "--iterations", str(a.iterations), "--duration", "0"]
    for flag, on in (("--disable-fusion", a.no_fusion), ("--prefer-nhwc", a.nhwc),
                     ("--separate-profile-run", a.profile)):
        if on:
            argv.append(flag)
    if a.compare_onnxrt:
        argv += ["--compare", "onnxrt"]
    if a.load_engine:
        argv += ["--load-engine", a.load_engine]
    if a.shapes:
        argv += ["--input-shapes", *a.shapes]
    if a.json:
        argv += ["--json", a.json]
    print("benchmark.py MODEL is `debugkit " + " ".join(argv) + "`", flush=True)
    return cli(argv)


def main(argv=None):
    from native.errors import DebugkitError
    try:
        return _main(argv)
    except DebugkitError as e:   # bad input: one line, exit 2, as the CLI does
        print(f"benchmark: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


def _main(argv=None):
    from native import config
    config.cli_defaults()   # engines built and run with process tuning on, as the CLI runs them
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("model", nargs="?", help="an ONNX model (built here) or a plan file (timed as saved)")
    ap.add_argument("--load-engine", metavar="PLAN",
                    help="time this saved plan; MODEL is the ONNX model it was built from (checked; for "
                         "--compare-onnxrt)")
    ap.add_argument("--shapes", nargs="+", default=[], metavar="NAME:1x3x224x224|NAME:[1,3,224,224]",
                    help="input shapes (names must be model inputs)")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-fusion", action="store_true")
    ap.add_argument("--nhwc", action="store_true", help="build with the NHWC layout pass on")
    ap.add_argument("--compare-onnxrt", action="store_true")
    ap.add_argument("--all-corpus", action="store_true")
    ap.add_argument("--models-dir", default=None, help="cache of fetched models (default $DEBUGKIT_MODEL_CACHE or "
                                                       "~/.cache/debugkit/models; tests/corpus/fetch_models.py)")
    ap.add_argument("--models", default="", help="with --all-corpus: only these (comma-separated names)")
    ap.add_argument("--fusion-off", action="store_true",
                    help="with --all-corpus: also time each model built with fusion off (the on/off ratio)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--profile", action="store_true", help="also print our engine's per-layer times (top 15)")
    a = ap.parse_args(argv)
    results = {}
    if a.all_corpus:
        if a.models_dir:
            os.environ["DEBUGKIT_MODEL_CACHE"] = a.models_dir
        entries = {m["name"]: m for m in manifest()}
        only = [m for m in a.models.split(",") if m]
        unknown = [m for m in only if m not in entries]
        if unknown:
            ap.error(f"unknown --models {unknown}; choose from {corpus_names()}")
        from debugkit import benchmark as B
        print(B.onnxrt_settings_line(B.onnxrt_settings()), flush=True)
        results["onnxrt_settings"] = B.onnxrt_settings()
        table = []
        for name in only or corpus_names():
            e = entries[name]
            try:
                path = find_path(e)
            except CorpusUnavailable as why:
                print(f"{name}: skipped ({why})")
                table.append((name, None, None, f"not available: {str(why)[:80]}"))
                continue
            feeds = make_feeds(e["feeds"])
            try:
                r = bench_all(path, feeds, a.iterations, a.warmup, with_off=a.fusion_off, profile=a.profile)
                ours, off, ort = r["ours"], r.get("off"), r["ort"]
            except Exception as ex:  # one failing model should not hide the others' numbers
                print(f"{name}: failed: {type(ex).__name__}: {str(ex)[:300]}")
                table.append((name, None, None, f"failed: {type(ex).__name__}"))
                continue
            report(name, ours, ort, off)
            if ours.get("profile") is not None:
                print(ours["profile"].table(top=15))
            results[name] = {"ours": ours["latency_ms"], "ort": ort["latency_ms"], "build_s": ours["build_s"]}
            if off is not None:
                results[name].update(fusion_off=off["latency_ms"], paired_on_off=off.get("paired_on_off"))
            table.append((name, ours["latency_ms"]["median"], ort["latency_ms"]["median"], ""))
        print(corpus_table(table, a.iterations))
    else:
        if not a.model:
            ap.error("give MODEL or --all-corpus")
        return _as_bench(a)
    if a.json:
        from native.files import write_json
        write_json(a.json, results, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
