"""Benchmark our engine on a model or plan (trtexec's job): latency statistics, throughput, per-layer profile.

Warm-up (untimed, --warm-up MS), then at least --iterations inferences and at least --duration seconds, one at a
time on one execution context with the same feed. Latency is the host wall time of each execute (for a device with
its own memory it includes the copies, which the device also reports apart); throughput is timed inferences per
second of their summed time, and samples per second with the batch (dim 0 of the first input). --compare onnxrt
times ONNX Runtime on the same feed in the same run, interleaved with ours. As trtexec reports: the host's enqueue
time apart from the device's compute, the device's busy time against the wall time, --streams N contexts in flight
(aggregate throughput) and --timeline FILE, a Chrome trace of layers, copies and host syncs (docs/bench.md).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from debugkit.cli import _args
from native.device import get_device
from native.errors import ExecutionError, InputFileError, UsageError
from native.logger import G_LOGGER


def register(subparsers):
    p = subparsers.add_parser("bench", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="an ONNX model (built here) or a plan file")
    t = p.add_argument_group("timing")
    t.add_argument("--warm-up", type=float, default=200.0, metavar="MS",
                   help="untimed inferences for at least MS milliseconds first (default 200; 0: none)")
    t.add_argument("--iterations", type=int, default=10, metavar="N", help="at least N timed inferences (default 10)")
    t.add_argument("--duration", type=float, default=3.0, metavar="S",
                   help="time for at least S seconds (default 3; 0: exactly --iterations inferences)")
    t.add_argument("--use-cuda-graph", action="store_true",
                   help="capture the execution as a CUDA graph and replay it (needs --device cuda)")
    t.add_argument("--compare", choices=["onnxrt"], default=None,
                   help="also time ONNX Runtime (CPU) on the same feed in the same run, interleaved with ours")
    pr = p.add_argument_group("per-layer profile")
    pr.add_argument("--separate-profile-run", action="store_true",
                    help="profile layers in a run of their own after the timing run (profiling adds overhead, so "
                         "the latency figures stay clean); the per-layer table is printed")
    pr.add_argument("--dump-profile", metavar="FILE.json",
                    help="write the per-layer profile as JSON (profiled during the timing run unless "
                         "--separate-profile-run)")
    p.add_argument("--load-engine", metavar="FILE.plan",
                   help="benchmark this plan; MODEL is the ONNX model it was built from (for --compare onnxrt)")
    from debugkit import options
    # the data group makes the one feed (bench's --iterations, above, counts timed inferences as trtexec's does);
    # a plan runs on the device it names unless --device says otherwise
    options.add_groups(p, "data", "build", "bench", defaults={"device": None})
    p.add_argument("--prefer-nhwc", action="store_true",
                   help="build with the NHWC layout pass on (the layout experiment of tools/benchmark.py --nhwc)")
    options.add_outputs(p, "save_engine", "json", "timeline", save_engine={"help": "save the plan built from MODEL"},
                        json={"metavar": "FILE", "help": "write every figure as JSON"},
                        timeline={"help": "after the timing run, trace --iterations inferences (layers, copies, "
                                          "host syncs; on the host's and the device's clock) and write them as a "
                                          "Chrome trace JSON (chrome://tracing, ui.perfetto.dev)"})
    _args.add_common_args(p, default="info")
    p.set_defaults(func=run)


def _check_args(args):
    if args.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {args.iterations}")
    if args.streams < 1:
        raise UsageError(f"--streams must be >= 1, got {args.streams}")
    if args.streams > 1 and args.compare:
        raise UsageError("--streams N with --compare onnxrt: the comparison times one inference at a time; run them "
                         "apart")
    if args.duration < 0:
        raise UsageError(f"--duration must be >= 0 seconds, got {args.duration}")
    if args.warm_up < 0:
        raise UsageError(f"--warm-up must be >= 0 ms, got {args.warm_up}")
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    target = args.device or (None if _is_plan(args.model) else "cpu")    # a plan names its own device
    if args.use_cuda_graph and target is not None and not get_device(target).supports_graphs:
        raise UsageError(f"--use-cuda-graph: CUDA graphs need --device cuda (device '{target}' cannot capture "
                         f"an execution)")
    if args.load_engine:
        if _is_plan(args.model):
            raise UsageError(f"{args.model} is a plan file; --load-engine takes the plan and MODEL the ONNX model "
                             f"it was built from")
        if args.save_engine:
            raise UsageError("--save-engine with --load-engine: the plan is already saved")
        if not _is_plan(args.load_engine):
            from native.errors import PlanError
            raise PlanError(f"--load-engine {args.load_engine} is not a debugkit plan file"
                            if os.path.exists(args.load_engine) else f"plan file not found: {args.load_engine}")
    if _is_plan(args.model) and args.save_engine:
        raise UsageError(f"{args.model} is already a plan; --save-engine saves a plan built from an ONNX model")
    if args.compare == "onnxrt" and _is_plan(args.model):
        raise UsageError(f"{args.model} is a plan file; --compare onnxrt needs the ONNX model: bench MODEL.onnx "
                         f"--load-engine {args.model} --compare onnxrt")
    for opt in ("json", "dump_profile", "save_engine", "timeline"):   # fail before the work, not after it
        path = getattr(args, opt)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UsageError(f"--{opt.replace('_', '-')} {path}: directory "
                             f"{os.path.dirname(os.path.abspath(path))} does not exist")


def _is_plan(path):
    from backends.runners.engine import is_plan
    return is_plan(path)


def run(args) -> int:
    _args.apply_common_args(args)
    _check_args(args)
    from backends.runners import EngineRunner, load_onnx
    from debugkit import benchmark as B

    plan_only = _is_plan(args.model)
    model = None if plan_only else load_onnx(args.model)
    source = args.load_engine or args.model
    from debugkit.options import Options
    opts = Options.from_args(args, "bench")
    config = opts.builder_config()
    if args.prefer_nhwc:
        config.prefer_nhwc = True
    runner = EngineRunner(source, config=config, device=args.device, save_plan=args.save_engine,
                          shapes=opts.build.shape_ranges())
    ort = None
    try:
        runner.activate()
        if args.load_engine:
            from debugkit.cli.run import check_plan_source
            check_plan_source(runner.engine, model, args.load_engine, args.model)
        feeds = _feeds(args, runner)
        runner.infer(feeds)   # builds here when the model has dynamic shapes (the feed fixes them)
        ctx, engine = runner.context, runner.engine
        graph_note = None
        if args.use_cuda_graph:
            if not engine.device.supports_graphs:
                raise UsageError(f"--use-cuda-graph: CUDA graphs need --device cuda (this plan runs on "
                                 f"{engine.device})")
            if not hasattr(ctx, "enable_cuda_graph"):
                raise UsageError("--use-cuda-graph: this engine's execution context has no CUDA graph support")
            graph_note = _enable_cuda_graph(ctx, engine, feeds)
        result = {"model": os.path.abspath(args.model), "plan": os.path.abspath(args.load_engine or args.model)
                  if (args.load_engine or plan_only) else None, "saved_engine": args.save_engine,
                  "device": engine.device.name, "build_seconds": runner.build_seconds,
                  "precision_flags": opts.build.flags(), "options_fingerprint": opts.fingerprint(), "layers": len(engine.graph.nodes),
                  "inputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in feeds.items()},
                  "batch": _batch(feeds, engine), "cuda_graph": bool(args.use_cuda_graph) and not graph_note,
                  "iterations_min": args.iterations, "duration_min_s": args.duration, "machine": _machine()}
        if graph_note:
            if args.streams > 1 and not engine.device.concurrent_contexts:
                raise UsageError(f"--streams {args.streams} replays captured executions on streams of their own, "
                                 f"and this engine's execution cannot be captured ({graph_note}); use --streams 1")
            result["cuda_graph_note"] = graph_note
            args.use_cuda_graph = False   # the rest of the run (the timeline) times without the graph
        dev = engine.device
        graph_streams = args.streams > 1 and not dev.concurrent_contexts and dev.concurrent_graphs
        if args.streams > 1 and not dev.concurrent_contexts and not (graph_streams and args.use_cuda_graph):
            raise UsageError(f"--streams {args.streams}: the {dev} device runs one stream per process, so contexts "
                             f"cannot be in flight at once on it" + (
                                 "; with --use-cuda-graph each context's captured execution replays on a stream "
                                 "of its own" if graph_streams else "; use --streams 1"))
        result["streams"] = args.streams
        device_times, host_times = [], []

        def collect(name="engine"):
            t = getattr(ctx, "timings", None)
            if name == "engine" and t:
                device_times.append(dict(t))
            h = getattr(ctx, "host_timings", None)
            if name == "engine" and h:
                host_times.append(dict(h))
        contenders = {"engine": lambda: ctx.execute(feeds)}
        if args.compare == "onnxrt":
            result["onnxrt_settings"] = B.onnxrt_settings()
            ort = B.onnxrt_session(model, result["onnxrt_settings"])
            ort_feeds = {i.name: feeds[i.name] for i in ort.get_inputs()}
            contenders["onnxrt"] = lambda: ort.run(None, ort_feeds)
        profile_during = args.dump_profile and not args.separate_profile_run
        profiler = _profiler(ctx) if profile_during else None
        G_LOGGER.info(f"warming up for {args.warm_up:g} ms")
        result["warm_up"] = {"ms": args.warm_up, "inferences": {k: B.warm_up(fn, args.warm_up)
                                                                for k, fn in contenders.items()}}
        if profiler is not None:
            profiler.runs.clear()
        G_LOGGER.info(f"timing: at least {args.iterations} inferences and {args.duration:g} s"
                      + (" (interleaved with ONNX Runtime)" if ort else ""))
        if graph_streams:
            rounds, wall = _streams_graph_loop(engine, ctx, feeds, args)
            times, per = {"engine": rounds}, [len(rounds)] * args.streams
        elif args.streams > 1:
            times, wall, per = _streams_loop(engine, ctx, feeds, args, device_times, host_times)
            times = {"engine": times}
        elif ort is None:
            times, wall = B.timed_loop(contenders["engine"], args.iterations, args.duration, after=collect)
            times = {"engine": times}
        else:
            times, _ = B.interleaved(contenders, args.iterations, args.duration, after=collect)
            wall = None
        result.update(_figures(times["engine"], result["batch"], wall))
        if args.streams > 1:
            result["throughput"] = B.throughput(sum(per), wall, result["batch"])
            result["throughput"]["per_stream_inferences"] = per
            result["inferences"] = sum(per)
        result.update(_transfers(device_times, engine, feeds))
        if graph_streams:
            result["latency_note"] = (f"--streams {args.streams} with --use-cuda-graph: each timed round replays "
                                      f"every context's captured execution on its own stream and waits for all; "
                                      f"latency is the round's time")
            result["transfers_note"] = ("not timed: the replays read the inputs already on the device and leave "
                                        "the outputs there (trtexec --noDataTransfers)")
        result.update(_busy(host_times, device_times, engine, wall if wall is not None else sum(times["engine"]),
                            args.streams))
        if ort is not None:
            o = _figures(times["onnxrt"], result["batch"], None)
            o["median_ratio_engine_over_onnxrt"] = result["latency_ms"]["median"] / o["latency_ms"]["median"]
            result["compare"] = {"onnxrt": o}
        if args.separate_profile_run:
            profiler = _profiler(ctx)
            n = max(args.iterations, 1)
            G_LOGGER.info(f"profile run: {n} inferences with per-layer timing")
            for _ in range(n):
                ctx.execute(feeds)
        if profiler is not None:
            ctx.profiler = None
            result["profile"] = _profile(profiler, engine, separate=bool(args.separate_profile_run),
                                         median_latency=result["latency_ms"]["median"])
        if args.timeline:
            trace = _trace(ctx, engine, feeds, max(args.iterations, 1), bool(args.use_cuda_graph))
    finally:
        ort = None
        runner.deactivate()
    if args.timeline:
        from backends.engine.runtime.trace import chrome_trace
        from native.files import write_json
        rec, result["timeline"] = trace
        write_json(args.timeline, chrome_trace(rec, engine, {"model": result["model"], "batch": result["batch"],
                                                             "precision_flags": result["precision_flags"]}),
                   "--timeline")
    _print(result, args)
    if args.timeline:
        print(f"wrote the timeline of {result['timeline']['inferences']} inferences to {args.timeline} (open it in "
              f"chrome://tracing or ui.perfetto.dev)")
    if args.dump_profile and "profile" in result:
        from native.files import write_json
        write_json(args.dump_profile, result["profile"], "--dump-profile", indent=1)
        print(f"wrote the per-layer profile to {args.dump_profile}")
    if args.json:
        from native.files import write_json
        write_json(args.json, result, "--json", indent=1)
        print(f"wrote {args.json}")
    return 0


def _machine() -> dict:
    """Where the figures were taken: CPUs this process may use, the load (a shared machine's numbers drift), and
    the threads our CPU kernels run on."""
    from native.cpu.threads import num_threads
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpus": cpus, "load_average_1m": load, "cpu_kernel_threads": num_threads()}


def _feeds(args, runner) -> dict:
    """One feed: loaded (--load-inputs, --data-loader-script) or generated like run's (--seed, --val-range, --input-shapes)."""
    from debugkit.options import DataOptions
    return DataOptions.from_args(args).first_feed(runner.input_metadata())


def _batch(feeds, engine):
    """Dim 0 of the first tensor input (the samples one inference processes), or None for a scalar input."""
    for name in engine.graph.input_names:
        shape = getattr(feeds.get(name), "shape", ())
        if shape:
            return int(shape[0])
    return None


def _figures(times, batch, wall) -> dict:
    from debugkit import benchmark as B
    tp = B.throughput(len(times), sum(times), batch)
    out = {"inferences": len(times), "timed_seconds": sum(times), "latency_ms": B.latency_stats(times),
           "throughput": tp}
    if wall is not None:
        out["loop_wall_seconds"] = wall
    return out


def _transfers(device_times, engine, feeds) -> dict:
    """Host-to-device, compute and device-to-host times as the device measured them (and the upload's bandwidth
    over the feeds' bytes), or why there are none."""
    from debugkit import benchmark as B
    if device_times:
        out = {}
        for key in ("h2d_ms", "compute_ms", "d2h_ms"):
            vals = [t[key] / 1e3 for t in device_times if t.get(key) is not None]
            out[key] = B.latency_stats(vals) if vals else None
        nbytes = sum(int(getattr(v, "nbytes", 0) or 0) for v in feeds.values())
        median = out["h2d_ms"]["median"] if out["h2d_ms"] else None
        out["h2d_bytes"] = nbytes
        out["h2d_gb_per_s"] = nbytes / (median * 1e6) if median else None
        out["transfers_note"] = f"measured by the {engine.device} device on its own clock, per execute"
        return out
    why = (f"not applicable: the {engine.device} device computes in host memory (no copies)"
           if engine.device.host_memory else
           f"not reported: the {engine.device} device did not time its copies (ExecutionContext.timings unset)")
    return {"h2d_ms": None, "compute_ms": None, "d2h_ms": None, "transfers_note": why}


def _streams_loop(engine, ctx, feeds, args, device_times, host_times):
    """`--streams N`: N execution contexts (the first is `ctx`), each timed in its own host thread for at least
    --iterations inferences and --duration seconds, all started together. Returns (every inference's seconds,
    the wall seconds from the start until the last finished, inferences per context)."""
    import threading

    from debugkit import benchmark as B
    ctxs = [ctx] + [engine.create_execution_context() for _ in range(args.streams - 1)]
    for c in ctxs[1:]:
        c.execute(feeds)             # plans its arena before the clock starts
        B.warm_up(lambda c=c: c.execute(feeds), args.warm_up)
    results, errors = [None] * len(ctxs), []
    lock, start = threading.Lock(), threading.Barrier(len(ctxs))

    def worker(i, c):
        mine_dev, mine_host = [], []

        def after():
            if c.timings:
                mine_dev.append(dict(c.timings))
            if c.host_timings:
                mine_host.append(dict(c.host_timings))
        try:
            start.wait()
            results[i] = B.timed_loop(lambda: c.execute(feeds), args.iterations, args.duration, after=after)
        except BaseException as e:   # noqa: BLE001  (re-raised in the caller's thread)
            errors.append(e)
            start.abort()
        with lock:
            device_times.extend(mine_dev)
            host_times.extend(mine_host)
    import time
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i, c), name=f"debugkit-bench-stream-{i}")
               for i, c in enumerate(ctxs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return [x for r in results for x in r[0]], wall, [len(r[0]) for r in results]


def host_layers(engine) -> list:
    """The engine's layers that run on the host between copies (`host:*` tactics): each synchronizes the stream."""
    return [n.name for n in engine.graph.nodes if (getattr(n, "tactic_name", None) or "").startswith("host:")]


def _enable_cuda_graph(ctx, engine, feeds):
    """Capture the execution as a CUDA graph, as trtexec --useCudaGraph does; None when it is captured, else why
    not, after a warning: an engine with host layers (or another layer that synchronizes) cannot be captured, and
    bench then times it without the graph, as trtexec does, instead of failing."""
    hosts = host_layers(engine)
    if hosts:
        why = (f"{len(hosts)} layer(s) run on the host ('{hosts[0]}'" + (f" and {len(hosts) - 1} more"
               if len(hosts) > 1 else "") + ") and synchronize the stream")
    else:
        ctx.enable_cuda_graph()
        try:
            ctx.execute(feeds)        # the capture, now: a failure is reported here, not in the warm-up
            return None
        except ExecutionError as e:
            if "graph capture failed" not in str(e):
                raise
            ctx.enable_cuda_graph(False)
            why = str(e).split("; ")[0]
    G_LOGGER.warning(f"--use-cuda-graph: the execution cannot be captured as a CUDA graph: {why}; timing without "
                     f"a CUDA graph, as trtexec does (save the plan with --save-engine and `debugkit inspect model "
                     f"PLAN --show layers` lists each layer's tactic)")
    return f"not captured: {why}"


def _streams_graph_loop(engine, ctx, feeds, args):
    """`--streams N --use-cuda-graph` on a device that replays captured executions on streams of their own: N
    contexts, each captured once; a round launches every context's graph on its stream and waits for all of them.
    Returns (each timed round's seconds, the loop's wall seconds)."""
    from debugkit import benchmark as B
    dev = engine.device
    ctxs = [ctx] + [engine.create_execution_context() for _ in range(args.streams - 1)]
    for c in ctxs:
        if c is not ctx:                 # (bench's context has its graph enabled already)
            c.enable_cuda_graph()
        c.execute(feeds)                 # captures (or replays) with this feed in the static inputs
    streams = [dev.new_stream() for _ in ctxs]

    def round_():
        for c, s in zip(ctxs, streams):
            c.replay(s)
        for s in streams:
            dev.synchronize(s)
    B.warm_up(round_, args.warm_up)
    return B.timed_loop(round_, args.iterations, args.duration)


def _busy(host_times, device_times, engine, wall_s, streams) -> dict:
    """trtexec's enqueue and utilisation figures: the host's time to enqueue each inference's compute, the device's
    busy time summed over the timed inferences against the wall time they took, and whether the device waited for
    the host (enqueue-bound)."""
    from debugkit import benchmark as B
    enq = [h["enqueue_ms"] / 1e3 for h in host_times if h.get("enqueue_ms") is not None]
    out = {"enqueue_ms": B.latency_stats(enq) if enq else None}
    compute = [t["compute_ms"] for t in device_times if t.get("compute_ms") is not None]
    if compute:
        busy, clock = sum(compute), f"the {engine.device} device's clock (compute per execute)"
    elif engine.device.host_memory and enq and streams == 1:   # (threads' host times overlap: no busy figure)
        busy, clock = sum(enq) * 1e3, f"the host's clock: the {engine.device} device computes as it is enqueued"
    else:
        busy, clock = None, None
    wall_ms = wall_s * 1e3 if wall_s else None
    out["device_busy"] = None if busy is None or not wall_ms else {
        "busy_ms_total": busy, "wall_ms_total": wall_ms, "utilization": busy / wall_ms, "clock": clock,
        "streams": streams}
    out["enqueue_bound"] = None
    if compute and enq and not engine.device.host_memory:
        # the host needs about as long to enqueue as the device to run it: the device waits for the host
        out["enqueue_bound"] = bool(out["enqueue_ms"]["median"] >= 0.8 * float(np.median(compute)))
    return out


def _trace(ctx, engine, feeds, n, graph):
    """(recorder, summary): `n` inferences traced with a TraceRecorder (runtime/trace.py)."""
    from backends.engine.runtime.trace import TraceRecorder
    rec = TraceRecorder(engine.device)
    ctx.profiler = rec
    G_LOGGER.info(f"timeline run: {n} inferences traced" + (" (without the CUDA graph: layers are enqueued one by "
                                                             "one so each can be marked)" if graph else ""))
    try:
        for _ in range(n):
            ctx.execute(feeds)
    finally:
        ctx.profiler = None
    shares = []
    for k, inf in enumerate(rec.inferences):
        span = inf["host"][1] - inf["host"][0]
        if span > 0:
            shares.append(rec.layer_seconds(k) / span)
    return rec, {"inferences": len(rec.inferences), "without_cuda_graph": graph,
                 "layers_over_execute_median": float(np.median(shares)) if shares else None}


def _profiler(ctx):
    from backends.engine.runtime.profiler import LayerProfiler
    ctx.profiler = LayerProfiler()
    return ctx.profiler


def _profile(profiler, engine, *, separate, median_latency) -> dict:
    """Per layer: median ms, share of the layers' total, tactic and the ONNX nodes it was built from."""
    sources = {n.name: list(n.source_nodes or []) for n in engine.graph.nodes}   # [] for builder-inserted layers
    kinds = {n.name: n.kind for n in engine.graph.nodes}
    precisions = {n.name: n.precision for n in engine.graph.nodes}
    rows = profiler.summary()
    total = sum(r["median_ms"] for r in rows)
    layers = [{"layer": r["layer"], "onnx_nodes": sources.get(r["layer"], []),
               "kind": kinds.get(r["layer"]), "precision": precisions.get(r["layer"]), "median_ms": r["median_ms"], "mean_ms": r["mean_ms"],
               "percent": (100.0 * r["median_ms"] / total if total else 0.0), "tactic": r["tactic"]}
              for r in rows]
    return {"separate_run": separate, "inferences": len(profiler.runs), "layers_total_ms": total,
            "median_latency_ms": median_latency, "layers": layers}


def _fmt(v, unit=""):
    if v is None:
        return "n/a"
    return f"{v:.3f}{unit}" if v < 10 else f"{v:.2f}{unit}" if v < 1000 else f"{v:.0f}{unit}"


def _stat_line(stats) -> str:
    return "  ".join(f"{k} {_fmt(stats[k])}" for k in ("min", "mean", "median", "p90", "p99", "max"))


def _print(r, args):
    out = sys.stdout
    ins = ", ".join(f"{k} {v['shape']} {v['dtype']}" for k, v in r["inputs"].items())
    built = f"built in {r['build_seconds']:.2f} s" if r["build_seconds"] is not None else "loaded plan"
    flags = "+".join(r["precision_flags"]) or "fp32"
    print(f"bench {os.path.basename(args.model)}: engine on {r['device']} ({built}, {r['layers']} layers, {flags}"
          f"{', CUDA graph' if r['cuda_graph'] else ''}); inputs {ins}", file=out)
    m = r["machine"]
    print(f"machine: {m['cpus']} CPUs, load average {m['load_average_1m']}, CPU kernels on "
          f"{m['cpu_kernel_threads']} thread(s)", file=out)
    warm = r["warm_up"]["inferences"]
    print(f"warm-up {r['warm_up']['ms']:g} ms ({', '.join(f'{k} {n}' for k, n in warm.items())} inferences); "
          f"timed {r['inferences']} inferences" +
          (f" in {_fmt(r['loop_wall_seconds'])} s" if "loop_wall_seconds" in r else " (interleaved)"), file=out)
    print(f"latency ms: {_stat_line(r['latency_ms'])}", file=out)
    tp = r["throughput"]
    samples = (f", {_fmt(tp['samples_per_s'])} samples/s (batch {tp['batch']})" if tp["samples_per_s"] is not None
               else " (no batch dim)")
    print(f"throughput: {_fmt(tp['inferences_per_s'])} inferences/s{samples}", file=out)
    if r["h2d_ms"] is None and r["d2h_ms"] is None:
        print(f"host-to-device / device-to-host: {r['transfers_note']}", file=out)
    else:
        for key, label in (("h2d_ms", "host-to-device"), ("compute_ms", "compute"), ("d2h_ms", "device-to-host")):
            if r.get(key):
                print(f"{label} ms: {_stat_line(r[key])}", file=out)
        if r.get("h2d_gb_per_s"):
            print(f"host-to-device bandwidth: {r['h2d_gb_per_s']:.1f} GB/s ({r['h2d_bytes'] / 1e6:.1f} MB of inputs "
                  f"per inference, median)", file=out)
    if r.get("enqueue_ms"):
        print(f"enqueue ms (host): {_stat_line(r['enqueue_ms'])}", file=out)
    b = r.get("device_busy")
    if b:
        print(f"{r['device']} busy {_fmt(b['busy_ms_total'])} ms of {_fmt(b['wall_ms_total'])} ms wall "
              f"({100 * b['utilization']:.1f}%" + (f", {b['streams']} streams" if b["streams"] > 1 else "") +
              f"; {b['clock']})", file=out)
    if r.get("enqueue_bound"):
        print("* throughput may be bound by enqueue time rather than device compute: the device waits for the host "
              "(try --use-cuda-graph)", file=out)
    if r.get("streams", 1) > 1:
        print(f"streams: {r['streams']} contexts in flight; inferences per context "
              f"{r['throughput']['per_stream_inferences']}" + (f" ({r['latency_note']})" if r.get("latency_note")
                                                              else ""), file=out)
    if "compare" in r:
        o = r["compare"]["onnxrt"]
        from debugkit.benchmark import onnxrt_settings_line
        print(onnxrt_settings_line(r["onnxrt_settings"]), file=out)
        print(f"onnxrt (same run, interleaved) latency ms: {_stat_line(o['latency_ms'])}", file=out)
        print(f"onnxrt throughput: {_fmt(o['throughput']['inferences_per_s'])} inferences/s; engine/onnxrt median "
              f"latency {o['median_ratio_engine_over_onnxrt']:.2f}x", file=out)
    if "profile" in r:
        _print_profile(r["profile"], out)


def _print_profile(p, out):
    how = "separate profile run" if p["separate_run"] else "profiled during the timed run, which adds overhead"
    print(f"per-layer profile ({how}, {p['inferences']} inferences, median): layers {_fmt(p['layers_total_ms'])} ms "
          f"of {_fmt(p['median_latency_ms'])} ms median latency", file=out)
    rows = sorted(p["layers"], key=lambda x: -x["median_ms"])
    width = min(50, max([len(x["layer"]) for x in rows] + [5]))
    print(f"{'layer':{width}s}  {'ms':>9s}  {'%':>5s}  {'precision':9s}  {'tactic':24s}  ONNX nodes", file=out)
    for x in rows:
        name = x["layer"] if len(x["layer"]) <= width else x["layer"][:width - 1] + "…"
        nodes = ", ".join(x["onnx_nodes"]) or "(inserted by the builder)"
        print(f"{name:{width}s}  {x['median_ms']:9.4f}  {x['percent']:5.1f}  {str(x['precision'] or ''):9s}  "
              f"{str(x['tactic'] or ''):24s}  "
              f"{nodes if len(nodes) < 80 else nodes[:79] + '…'}", file=out)
