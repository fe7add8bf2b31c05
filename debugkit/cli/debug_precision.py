"""Find the smallest set of layers (ONNX nodes) that must run in higher precision for a low-precision build to pass.

The check is run's comparison of the low-precision engine (--fp16 / --int8 / --fp8, the candidate layers obeying
--higher) against the FP32 reference (ONNX Runtime, or the fp64 oracle with --reference fp64), with run's input and
comparison options. -o FILE.json gets {"layer_precisions": {...}, "probes": N, ...}, which `run` and `convert` take as
--layer-precisions FILE.json; beside it FILE_sensitivity.json/.svg (ranking), FILE.html (report) and the probe log. With
`--check CMD ...` (last option) the command decides instead: `{model}` is the model and `{precisions}` a JSON file
with the candidate's layer precisions, e.g. `--check debugkit run {model} --engine --onnxrt --fp16 --layer-precisions
{precisions}`; exit 0 means the candidate passes.
"""
from __future__ import annotations

import math
import os
import time
import uuid

from debugkit.cli import _search_args
from native.errors import InputFileError, UsageError
from native.files import write_json, write_text
from native.logger import G_LOGGER



def register(subparsers):
    p = subparsers.add_parser("precision", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="the ONNX model")
    low = p.add_argument_group("precision (the low precision is the build group's --fp16, --int8, --fp8 or --bf16: "
                               "exactly one)")
    low.add_argument("--higher", choices=["fp32", "fp16"], default="fp32",
                     help="the precision kept layers run in (default fp32; fp16 under --int8/--fp8)")
    low.add_argument("--mode", choices=["minimal", "bisect", "linear"], default="minimal",
                     help="minimal (default): a 1-minimal set from a sensitivity ranking; bisect/linear: "
                          "Polygraphy's prefix of layers in topological order (a count)")
    low.add_argument("--direction", choices=["forward", "reverse"], default="forward",
                     help="bisect/linear: grow the higher-precision prefix from the inputs (forward) or a suffix from "
                          "the outputs (reverse)")
    low.add_argument("--reference", choices=["onnxrt", "fp64"], default=None,
                     help="what the engine is compared with: ONNX Runtime in FP32 (default when installed) or the "
                          "fp64 oracle (the default without ONNX Runtime)")
    from debugkit import options
    low.add_argument("--share-base-timing", action="store_true",
                     help="cold searches with a GPU per worker: the workers time the base build's layer variants, "
                          "1/N each, and this process replays their timings (pays off where tactic timing "
                          "dominates a build, e.g. many cuDNN convolutions; each worker pays a build's fixed cost)")
    options.add_outputs(p, "output", output={"default": "precision.json", "help": "the answer (default precision.json)"})
    options.add_groups(p, "data", "build", "compare")
    _search_args.add_search_args(p, "<output>_probes.jsonl")
    _search_args.add_common(p)
    from debugkit.debug.checks import add_check_args
    add_check_args(p)
    p.set_defaults(func=run)


def _extra_flags(args):
    return ("reduced_probability_outputs",) if getattr(args, "reduced_probability_outputs", False) else ()


def _stem(path):
    return os.path.splitext(path)[0]


def run(args) -> int:
    from debugkit.debug import precision as P
    from debugkit.debug.checks import CompareOptions, ReducedPrecisionCheck, command_check_from_args, comparison_given

    _search_args.apply_common(args)
    from debugkit.options import Options
    opts = Options.from_args(args, "debug precision")
    lows = opts.build.precisions()
    if len(lows) != 1:
        raise UsageError("debug precision searches one low precision: give exactly one of --fp16, --int8, --fp8, "
                         f"--bf16 (got {', '.join('--' + x for x in lows) or 'none'})")
    args.low = lows[0]
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    if args.higher == "fp16" and args.low == "fp16":
        raise UsageError("--higher fp16 with --fp16 keeps nothing higher; use --higher fp32")
    command = command_check_from_args(args)
    options = CompareOptions.from_args(args) if comparison_given(args) else ReducedPrecisionCheck.for_precision(args.low)
    print(f"debug precision --{args.low}: check: {_describe_check(command, options)}", flush=True)
    # the workers start (imports, GPU contexts) while this process computes the reference and makes the base build
    with _search_args.make_executor(args).warm() as ex:
        return _search(P, args, opts, command, options, ex)


def _search(P, args, opts, command, options, ex) -> int:
    """The search proper, on the executor `ex` (its workers already starting)."""
    from backends.runners import load_onnx
    from debugkit.debug.probe_log import ProbeLog
    from debugkit.debug.report_html import error_svg, search_html
    from debugkit.debug.strategies import (Prober, bisect_prefix, confirm_minimal, linear, minimal_candidates, peel,
                                           probe_slots)
    from native.device import get_device
    get_device(args.device).warm_up()   # its context and kernel compiles beside the reference run
    model = load_onnx(args.model)
    # the workers get the model's bytes: serialized on a thread while ONNX Runtime computes the reference (it
    # releases the interpreter), not after it on the way to the ranking and the probes
    serialized = _Serialized(model) if type(ex).__name__ != "InlineExecutor" else None
    feeds = _search_args.generated_feeds(args, model)
    if args.reference is None:
        args.reference = "onnxrt" if _have_onnxruntime() else "fp64"
    outputs = [o.name for o in model.graph.output]
    ref = _Reference(P, model, feeds, outputs, args).start(beside=_reference_beside_base(args))
    log_path = args.log.replace("<output>", _stem(args.output))
    from debugkit.debug.fingerprint import search_fingerprint
    meta = search_fingerprint("precision", args, args.model, feeds, check=_describe_check(command, options))
    log = ProbeLog(log_path, meta, resume=args.resume)
    calib = None
    if args.low == "int8":   # calibrated once by the base build (or read from --calibration-cache), then shared
        calib = {"algorithm": args.calibration_algorithm, "percentile": args.calibration_percentile,
                 "cache": args.calibration_cache or _stem(args.output) + "_calibration.cache"}
        if not args.calibration_cache and os.path.exists(calib["cache"]) and not args.resume:
            os.remove(calib["cache"])   # a stale cache of an earlier search would silently fix the scales
    probe_fn = P.PrecisionProbe(args.model, feeds, ref.reference, command or options, args.low, args.higher,
                                extra_flags=_extra_flags(args), calib=calib, device=args.device, build=opts.build)
    ref.then(lambda: setattr(probe_fn, "reference", ref.reference))   # (beside the base build: once it is known)
    t0 = time.perf_counter()
    workers = probe_slots(ex)
    # the search's bound needs the layers: planned now, or once the reference beside the base build has them
    bar = _search_args.Progress(0 if ref.thread else _work_bound(args.mode, len(ref.layers), workers),
                                f"precision ({args.mode})")
    search_id = f"precision-{meta['model (sha256)'][:16]}-{uuid.uuid4().hex[:12]}"   # workers' cache key
    rows, answer, extra = [], [], {}
    rank_builds, rank_s, base_s, shared, overflow = 0, 0.0, 0.0, None, None
    try:
        seeded = probe_fn.seeded_timings()   # a --timing-cache file's timings: the base build has little to time
        if serialized is not None:
            probe_fn.serialized = serialized.result()
        if args.share_base_timing and P.shares_timing(ex, calib) and not seeded:
            # cold, one GPU each: the workers time the base build's variants, 1/N each
            probe_fn.ship(model)
            shared = P.share_timing(probe_fn, ex)
            G_LOGGER.info(f"base build's tactic timing spread over {ex.workers} GPU workers: "
                          f"{shared['variants']} layer variants timed in {shared['seconds']:.1f} s (shares "
                          f"{', '.join(f'{x:.1f}' for x in shared['shares'])} s); this process replays them")
        prober = Prober(probe_fn, log=log, executor=ex, on_probe=bar)
        early = None
        slots = P.beside_base(ex, shared, seeded) if args.mode == "minimal" else None
        exchange = None
        alongside = []
        if slots:
            probe_fn.ship(model)
            exchange = _timing_exchange(ex, probe_fn, seeded, shared)
            ref.then(lambda: alongside.append(_Alongside(P, prober, ref.sub, ref.layers, args, ex, search_id, calib,
                                                         opts.build, log, slots, exchange).start()))
        low_values, replay = _base_run(P, probe_fn, args)
        ref.result()    # the reference, every tensor and the layers (beside the base build: waited for here)
        sub, layers = ref.sub, ref.layers
        early = alongside[0] if alongside else None
        if replay is not None:   # (set now, not while the ranking beside the base build was being sent out)
            probe_fn.replay = replay
        if ref.thread is not None:
            bar.plan(_work_bound(args.mode, len(layers), workers))
        base_s = time.perf_counter() - t0
        bar.step()
        if type(ex).__name__ != "InlineExecutor":   # workers get the model's bytes, never a path of ours (and the
            probe_fn.ship(model)                   # timings the base build measured)
        empty = None if prober.known([])[0] else probe_fn.empty_set_answer(low_values)
        if empty is not None:   # the base build was the empty set's engine: no second build of it
            prober.settle([], empty)
        alone = None
        if early is not None:   # the workers' ranking and all-higher probe, run beside the base build
            if getattr(ex, "driver_slot", False):
                if early.summary()["all_higher_probe"]:   # a worker runs it: meanwhile the empty set's here
                    prober.here([[]])
                elif not early.finished(within_s=0.2 * base_s):
                    # the ranking goes on: meanwhile the all-higher probe here (its build costs this process about
                    # half its base build; a cold worker three times that). The empty set's probe goes into the
                    # batch after the ranking, where the free worker takes it. A ranking about to end is waited for
                    # instead: that batch then starts this probe here and the others on the worker at once
                    prober.here([layers])
            alone = early.join(bar)
        if exchange is not None:
            early.end_exchange(probe_fn)
        ranked = None
        if alone is not None and prober.workers > 1:
            # the ranking came from beside the base build, so the overflow guess is known before any probe: its
            # confirmation goes into one batch with the all-higher and empty-set probes (speculative: wasted only
            # where the base build passes, the all-higher one fails, or the guess is not the answer)
            ranked = _ranking(P, sub, layers, low_values, args, ex, search_id, calib, bar, opts.build, log,
                              cache=probe_fn.timing_cache(), alone=alone)
            guess = P.overflow_guess(ranked[0])
            if guess:
                prober.many([layers, []] + minimal_candidates(guess))
        if getattr(ex, "driver_slot", False):
            # the workers have built nothing yet: the all-higher engine costs one of them ~3x what it costs this
            # process after its base build (10 s against 3.4 s, 368-layer ResNet): it goes first (this process
            # takes the first item of a batch), the empty set's probe beside it on a worker
            prober.many([layers, []])
        base, top = prober.many([[], layers])
        _warn_if_barely(prober.known(layers)[1], options, args, len(layers))
        if base:
            G_LOGGER.info(f"the {args.low} build already passes: no layer needs {args.higher}")
        elif not top:
            rec = prober.known(layers)[1]
            raise P.PrecisionSearchError(
                f"the check fails even with all {len(layers)} layers in {args.higher} "
                f"({rec.get('reason', '') if isinstance(rec, dict) else ''}); loosen the tolerances or check "
                f"the reference")
        elif args.mode == "minimal":
            if ranked is None:
                t_rank = time.perf_counter()
                ranked = _ranking(P, sub, layers, low_values, args, ex, search_id, calib, bar, opts.build, log,
                                  cache=probe_fn.timing_cache(), alone=alone)
            rows, rank_builds = ranked
            rank_s = time.perf_counter() - t_rank if alone is None else alone["seconds"]
            guess = P.overflow_guess(rows)
            if guess:   # a few layers overflow the low precision: confirm them as the answer in a round or two
                confirmed = confirm_minimal(guess, prober)
                overflow = {"layers": len(guess), "confirmed": confirmed}
                G_LOGGER.info(f"the {len(guess)} layer(s) whose {args.low} output overflows "
                              + ("are the answer: they pass and no one of them can be dropped" if confirmed else
                                 "are not a 1-minimal answer; peeling the ranking"))
            answer = list(guess) if overflow and overflow["confirmed"] else peel([r["layer"] for r in rows], prober)
            answer.sort(key=layers.index)
        else:
            order = layers if args.direction == "forward" else layers[::-1]
            search = bisect_prefix if args.mode == "bisect" else linear
            count = search(len(order), prober, candidate=lambda k: order[:k])
            count = len(order) if count is None else count
            answer = sorted(order[:count], key=layers.index)
            extra = {"prefix_count": count, "direction": args.direction}
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    costs = P.probe_costs(prober.history)
    rate = prober.probes / seconds if seconds > 0 else 0.0
    bound = P.build_bound(len(layers))
    result = {"layer_precisions": {n: args.higher for n in answer}, "probes": prober.probes,
              "probes_per_second": round(rate, 3), **costs,
              "replayed": prober.replayed, "builds_bound": bound, "layers": len(layers), "mode": args.mode,
              "precision": args.low, "higher": args.higher, "reference": args.reference,
              "check": meta["check"],
              "model": os.path.abspath(args.model), "model_sha256": meta["model (sha256)"],
              "seconds": round(seconds, 3), "workers": getattr(ex, "workers", 1), "probe_slots": workers,
              "base_builds": 1, "layer_runs": len(rows), "ranking_builds": rank_builds,
              "base_s": round(base_s, 2), "ranking_s": round(rank_s, 2), "base_timing_shared": shared,
              "beside_base_build": None if early is None else early.summary(), "overflow_guess": overflow,
              "work": {"done": bar.done, "first_bound": bar.bar.first_total, "max_bound": bar.bar.max_total},
              "tactics_replayed": probe_fn.replay is not None,
              "options_fingerprint": opts.fingerprint(), "critical_path": prober.critical_path(), **extra}
    final = prober.known(answer)[1] if prober.known(answer)[0] else None
    if isinstance(final, dict):
        result["final_check"] = {"passed": final.get("hit"), "outputs": final.get("outputs")}
    from debugkit.verdict import search_verdict
    verdict = search_verdict("debug precision", True, f"{len(answer)} of {len(layers)} layer(s) in {args.higher}",
                             fingerprint=result["options_fingerprint"])
    result["verdict"] = verdict.to_json()
    stem = _stem(args.output)
    if rows:
        write_json(stem + "_sensitivity.json", [{k: (None if isinstance(v, float) and math.isinf(v) and k == "full"
                                                     else v) for k, v in r.items()} for r in rows],
                   "sensitivity table", indent=1, default=str)
        write_text(stem + "_sensitivity.svg",
                   error_svg(rows, answer, title=f"{os.path.basename(args.model)}: per-layer {args.low} error"),
                   "sensitivity chart")
        result["sensitivity"] = stem + "_sensitivity.json"
    result["probe_log"] = log_path
    result["report"] = stem + ".html"
    write_json(args.output, result, "-o", indent=1, default=str)
    write_text(stem + ".html", search_html(f"debug precision {os.path.basename(args.model)} --{args.low}",
                                           {k: v for k, v in result.items()
                                            if k not in ("layer_precisions", "final_check")},
                                           rows, answer, [r for r in log.records if r.get("artifact") != RANKING]),
               "report")
    what = f"prefix of {extra['prefix_count']} layer(s) ({args.direction})" if extra else f"{len(answer)} layer(s)"
    print(f"{what} of {len(layers)} must run in {args.higher}; {prober.probes} probe(s) "
          f"(+{prober.replayed} replayed) and {1 + rank_builds} other build(s) (base {base_s:.1f} s"
          + (f"; {len(rows)} layers alone {rank_s:.1f} s" if rows else "")
          + f"), {seconds:.1f} s, {rate:.2f} probes/s"
          + (f"; per probe (median) build {costs['probe_build_s_median']:.2f} s, run "
             f"{costs['probe_run_s_median'] * 1e3:.1f} ms" if costs else ""))
    cp = result["critical_path"]
    if cp["rounds"] and result["workers"] > 1:
        where = f"{result['workers']} workers" + (" and this process" if workers > result["workers"] else "")
        print(f"{cp['probes']} probe(s) in {cp['rounds']} round(s) on {where}: {cp['wall_s']:.1f} s of wall time "
              f"for {cp['probe_s']:.1f} s of probing ({cp['wall_speedup']:.2f}x over one worker); critical path "
              f"{cp['critical_path_s']:.1f} s with a worker per probe ({cp['speedup']:.2f}x)")
    for n in answer[:50]:
        print(f"  {n}")
    if len(answer) > 50:
        print(f"  ... {len(answer) - 50} more")
    print(f"wrote {args.output} (use: debugkit run {args.model} --engine --onnxrt --{args.low} "
          f"--layer-precisions {args.output}), {stem}.html")
    return verdict.exit_code


def _describe_check(command, options) -> str:
    """The criterion a probe must meet, in words (the command's first line)."""
    if command is not None:
        return f"the command `{' '.join(command.argv)}` exits 0"
    if hasattr(options, "describe"):
        return options.describe()
    tol = [f"{k}={v}" for k, v in (("atol", options.atol), ("rtol", options.rtol),
                                   ("check-error-stat", options.check_error_stat)) if v]
    extra = f" and {'/'.join(options.compare)}" if options.compare else ""
    return f"run's comparison ({', '.join(tol) or 'default tolerances'}{extra}) against the FP32 reference"


def _warn_if_barely(record, options, args, n_layers):
    """The all-higher-precision probe should pass with room to spare; near the limit, the reference and the engine
    disagree already, and the search's answer says more about the criterion than about the layers."""
    if not isinstance(record, dict) or not record.get("hit") or not hasattr(options, "margin"):
        return
    used = options.margin(record.get("outputs"))
    if used > 0.5:
        G_LOGGER.warning(f"the check barely passes with all {n_layers} layers in {args.higher} (it uses "
                         f"{used:.0%} of the allowed error): the answer may depend on rounding noise; check the "
                         f"reference (--reference fp64) or loosen the criterion with --compare/--atol")


def _have_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _oracle_values(model, feeds) -> dict:
    import numpy as np
    from backends.runners.oracle import Fp64OracleRunner
    with Fp64OracleRunner(model, shapes={k: np.shape(v) for k, v in feeds.items()}) as r:
        out = r.infer(feeds, taps=r.observable_tensors())
    values = dict(feeds)
    values.update({k: (v.astype(np.float32) if np.asarray(v).dtype == np.float64 else v) for k, v in out.items()})
    return values


def _base_run(P, probe_fn, args):
    """The base low-precision build, once, in this process: (every observable tensor, for the ranking; the tactic
    replay document of every layer, replayed by the probes so untouched layers keep their tactics, or None)."""
    recorder = P.tactic_recorder()
    try:
        low_values = probe_fn.engine_outputs([], taps="all", recorder=recorder)
    except Exception as e:   # a low-precision build that cannot run layerwise still ranks by the alone errors
        G_LOGGER.warning(f"layerwise {args.low} run failed ({str(e).splitlines()[0][:120]}); ranking by each "
                         f"layer alone")
        return {}, None
    return low_values, (recorder.document if recorder is not None else None)


# None: beside the base build on a device with memory of its own (a GPU), first on the CPU; tests set True/False
REFERENCE_BESIDE_BASE = None


def _reference_beside_base(args) -> bool:
    """Whether the FP32 reference runs on a thread beside the base build: where the build runs on a device of its
    own (ONNX Runtime on the host's cores meanwhile, the interpreter released while it runs: on a 368-layer
    ResNet on an H200 it took 2.6 s before the base build could start), not on the CPU, whose cores both need."""
    if REFERENCE_BESIDE_BASE is not None:
        return REFERENCE_BESIDE_BASE
    from native.device import get_device
    return not get_device(args.device).host_memory


class _Reference:
    """The FP32 values of every tensor (ONNX Runtime, else the fp64 oracle), the reference outputs, the model's
    Subgraphs and the candidate layers: computed here and now, or on a thread (start(beside=True)) while this
    process makes the base build. then(fn) runs fn once they are known (at once, or on that thread); result()
    waits for them and raises what computing them raised."""

    def __init__(self, P, model, feeds, outputs, args):
        import threading
        self.P, self.model, self.feeds, self.outputs, self.args = P, model, feeds, outputs, args
        self.values = self.reference = self.sub = self.layers = None
        self.error, self.thread, self.ready = None, None, False
        self._then, self._lock = [], threading.Lock()

    def start(self, beside: bool):
        if beside:
            import threading
            G_LOGGER.verbose("the FP32 reference runs beside the base build")
            self.thread = threading.Thread(target=self._compute, name="debug precision: the FP32 reference",
                                           daemon=True)
            self.thread.start()
        else:
            self._compute()
            self.result()
        return self

    def _compute(self):
        try:
            self._values()
            with self._lock:
                self.ready = True
                todo, self._then = self._then, []
            for fn in todo:
                fn()
        except BaseException as e:   # raised again on the search's thread, by result()
            self.error = e

    def _values(self):
        from debugkit.debug.checks import ReferenceFailedError
        from debugkit.debug.reduce import Subgraphs, capture_values
        from native.errors import DebugkitError
        model, feeds, args = self.model, self.feeds, self.args
        if _have_onnxruntime():
            G_LOGGER.info("FP32 reference: every tensor from ONNX Runtime")
            values = capture_values(model, feeds)
        else:
            G_LOGGER.info("ONNX Runtime is not installed: every tensor from the fp64 oracle (rounded to float32)")
            values = _oracle_values(model, feeds)
        if args.reference == "fp64":
            from backends.runners.oracle import Fp64OracleRunner
            try:
                with Fp64OracleRunner(model, shapes={k: v.shape for k, v in feeds.items()}) as r:
                    reference = r.infer(feeds)
            except DebugkitError as e:
                raise ReferenceFailedError(f"the fp64 oracle fails on {args.model}: "
                                           f"{str(e).splitlines()[0]}") from None
        else:
            reference = {k: values[k] for k in self.outputs}
        sub = Subgraphs(model, feeds, values)
        layers = self.P.candidate_layers(sub)
        if not layers:
            raise self.P.PrecisionSearchError(f"{args.model} has no layers that compute float values")
        self.values, self.reference, self.sub, self.layers = values, reference, sub, layers

    def then(self, fn):
        with self._lock:
            if not self.ready:
                self._then.append(fn)
                return
        fn()

    def result(self):
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self


def _work_bound(mode: str, n_layers: int, workers: int, answer_guess: int = 8) -> int:
    """The most builds the search makes, for its progress bar: the base layerwise build, the probes of the empty
    and the full set, then per mode: minimal = one run per layer alone + peeling up to `answer_guess`
    needed layers off the ranking; bisect = the bisection; linear =
    one probe per prefix."""
    from debugkit.debug import strategies as S
    if mode == "minimal":   # + the overflow guess's confirmation (|guess| + 1 probes)
        from debugkit.debug.precision import OVERFLOW_GUESS_LIMIT
        rest = n_layers + OVERFLOW_GUESS_LIMIT + 1 + S.peel_bound(n_layers, answer_guess, workers)
    elif mode == "bisect":
        rest = S.bisect_bound(n_layers, workers)
    else:
        rest = n_layers + 1
    return 1 + 2 + rest


RANKING = {"ranking": "layer sensitivity"}   # the probe log's record of the ranking (so --resume skips it)


def _replayed_ranking(log, layers):
    """The ranking a resumed search's probe log holds for these layers, or None."""
    rec = log.lookup(RANKING) if log is not None else None
    if rec is not None and isinstance(rec.get("result"), list) and \
            [r.get("layer") for r in sorted(rec["result"], key=lambda r: r.get("order", 0))] == list(layers):
        return [{**r, **{k: math.inf for k in ("alone", "added", "score", "full") if r.get(k) == "inf"}}
                for r in rec["result"]]
    return None


class _Serialized:
    """A model's bytes, serialized on a thread of their own; result() waits for them."""

    def __init__(self, model):
        import threading
        self.data = None
        self.thread = threading.Thread(target=self._run, args=(model,), name="serialize the model", daemon=True)
        self.thread.start()

    def _run(self, model):
        try:
            self.data = model.SerializeToString()
        except BaseException:   # result() is None: ship() serializes again and raises the error there
            pass

    def result(self):
        self.thread.join()
        return self.data


def _timing_exchange(ex, probe_fn, seeded, shared):
    """A TimingExchange between this process's base build and the ranking workers' builds, on this machine's
    local GPU workers when the base build times its own variants (none from a --timing-cache file or the workers'
    shares); else None. (builder/timing_exchange.py)"""
    from debugkit.debug.executor import LocalExecutor
    if not isinstance(ex, LocalExecutor) or seeded or shared is not None:
        return None
    import tempfile
    from backends.engine.builder.timing_exchange import TimingExchange
    from debugkit.debug.scratch import process_scratch_dir
    exchange = TimingExchange(tempfile.mkdtemp(prefix="timing_exchange_", dir=process_scratch_dir()))
    probe_fn.timing_cache().exchange = exchange
    return exchange


def _end_exchange(probe_fn, exchange):
    """The base build and the ranking are done: the search's cache stops looking in the exchange, which goes."""
    import shutil
    probe_fn.timing_cache().exchange = None
    shutil.rmtree(exchange.directory, ignore_errors=True)
    G_LOGGER.info(f"base build and ranking timed together: the base build took {exchange.taken} layer variant "
                  f"timing(s) from the ranking worker and handed it {exchange.given}")
    return {"base_build_took": exchange.taken, "base_build_gave": exchange.given}


def _alone_probe(P, sub, ex, search_id, args, calib, build):
    # a layer alone is its subgraph's output: without the flag, the FP32 rule for probability outputs would keep every
    # Sigmoid/Softmax FP32 there and rank it error-free
    alone_fn = P.LayerAloneProbe(search_id, args.low, ("reduced_probability_outputs",), subgraphs=sub, calib=calib,
                                 build=build)
    if type(ex).__name__ != "InlineExecutor":
        alone_fn.ship(sub)
    return alone_fn


def _chunks(layers, n: int):
    """n interleaved shares of the layers to rank (one side-by-side engine each)."""
    return [c for c in (layers[i::max(1, n)] for i in range(max(1, n))) if c]


class _Alongside:
    """The work the workers do while this process makes the base build (P.beside_base): the all-higher probe
    and the layers alone of the ranking, in one map on a thread of this process, so the ranking and the
    all-higher probe leave the search's critical path. join() records the probe in the Prober and returns
    {"errors": {layer: alone error}, "seconds", "builds"} (None for the errors when the probe log replays the
    ranking)."""

    def __init__(self, P, prober, sub, layers, args, ex, search_id, calib, build, log, slots, exchange=None):
        self.prober, self.layers, self.ex, self.slots = prober, list(layers), ex, list(slots)
        # the all-higher probe goes along only where every worker is free: a worker that is cold in the higher
        # precision builds it in ~3x the time this process does after its base build (10 s against 3.4 s on a
        # 368-layer ResNet), and on the one worker off this process's GPU it would hold up the ranking
        self.items = [] if prober.known(self.layers)[0] or len(self.slots) < 2 else [("probe", self.layers)]
        # 2k - 1 shares of the ranking beside the probe on k workers: one side-by-side engine each, few enough
        # that their builds stay cheap, enough that no worker waits long for another
        # with a timing exchange, last layer first: the base build times from the first, so the two meet in the
        # middle instead of timing the same variants twice
        order = self.layers[::-1] if exchange is not None else self.layers
        self.chunks = [] if _replayed_ranking(log, self.layers) is not None else \
            _chunks(order, 2 * len(self.slots) - 1)
        self.items += [("rank", c) for c in self.chunks]
        alone = _alone_probe(P, sub, ex, search_id, args, calib, build)
        if exchange is not None:
            alone.exchange_dir = exchange.directory
        self.work = P.BaseOverlap(prober.fails, alone) if self.items else None
        self.out, self.error, self.thread, self.seconds = None, None, None, 0.0
        self.exchange = exchange
        self.exchanged = None   # what the base build and the ranking handed each other (end_exchange)

    def start(self):
        import threading
        if self.items:
            G_LOGGER.info(f"while this process makes the base build, {len(self.slots)} worker(s) rank "
                          f"{len(self.layers)} layers alone" + (" and run the all-higher probe"
                                                                 if self.items[0][0] == "probe" else ""))
            self.thread = threading.Thread(target=self._run, name="debug precision: beside the base build",
                                           daemon=True)
            self.thread.start()
        return self

    def end_exchange(self, probe_fn):
        """The base build and the ranking are done: close the timing exchange and keep what went through it."""
        if self.exchange is not None:
            self.exchanged = _end_exchange(probe_fn, self.exchange)
            self.exchange = None

    def summary(self) -> dict:
        """What ran beside the base build, for the answer file."""
        return {"all_higher_probe": bool(self.items) and self.items[0][0] == "probe",
                "layers_ranked": sum(len(c) for c in self.chunks), "workers": self.slots,
                "seconds": round(self.seconds, 2), "timings_exchanged": self.exchanged}

    def _run(self):
        t0 = time.perf_counter()
        try:
            self.out = self.ex.map(self.work, self.items, slots=self.slots)
        except BaseException as e:   # raised again on the search's thread, by join()
            self.error = e
        self.seconds = time.perf_counter() - t0

    def finished(self, within_s: float = 0.0) -> bool:
        """Whether the work is done, waiting up to `within_s` for it."""
        if self.thread is None:
            return True
        self.thread.join(max(0.0, within_s))
        return not self.thread.is_alive()

    def join(self, bar=None):
        if self.thread is None:
            return None
        self.thread.join()
        if self.error is not None:
            raise self.error
        out = list(self.out)
        if self.items[0][0] == "probe":
            rec, cost = out.pop(0)
            self.prober.add(self.layers, rec, cost, alongside=True)
        if not self.chunks:
            return None
        errors = {lab: e for chunk, es in zip(self.chunks, out) for lab, e in zip(chunk, es)}
        if bar:
            for _ in self.layers:
                bar.step()
        return {"errors": {lab: errors[lab] for lab in self.layers}, "seconds": round(self.seconds, 2),
                "builds": len(self.chunks)}


def _ranking(P, sub, layers, low_values, args, ex, search_id, calib=None, bar=None, build=None, log=None,
             cache=None, alone=None):
    """The layerwise low-precision values + one run per layer alone (independent: on the executor). Recorded in
    the probe log, so a resumed search reuses it instead of ranking again. Returns (rows, engines built). `cache`:
    the search's TimingCache, which the layers alone share when they are built in this process. `alone`: the alone
    errors the workers measured beside the base build (_Alongside.join)."""
    replayed = _replayed_ranking(log, layers)
    if replayed is not None:
        G_LOGGER.info(f"ranking of {len(layers)} layers replayed from the probe log")
        return replayed, 0
    t0 = time.perf_counter()
    if alone is not None:   # measured by the workers beside the base build
        alone, builds, seconds = alone["errors"], alone["builds"], alone["seconds"]
    else:
        alone, builds = _alone_errors(P, sub, layers, args, ex, search_id, calib, bar, build, cache)
        seconds = time.perf_counter() - t0
    rows = P.sensitivity(sub, layers, low_values, alone)
    if log is not None:
        log.record(RANKING, [{k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in r.items()}
                             for r in rows], seconds)
    return rows, builds


def _alone_errors(P, sub, layers, args, ex, search_id, calib, bar, build, cache):
    """({layer: its error alone in the low precision}, engines built), in this process or on the workers."""
    G_LOGGER.info(f"ranking {len(layers)} layers: one layerwise {args.low} run and one run per layer alone")
    alone_fn = _alone_probe(P, sub, ex, search_id, args, calib, build)
    if type(ex).__name__ == "InlineExecutor":   # one engine for every layer alone (LayerAloneProbe.many)
        alone_fn.shared_cache = cache
        alone = dict(zip(layers, alone_fn.many(layers)))
        builds = alone_fn.builds
        if bar:
            for _ in layers:
                bar.step()
    else:   # one engine per worker: each ranks an interleaved share of the layers side by side
        chunks = _chunks(layers, ex.workers)

        def step(errs):
            for _ in errs:
                bar.step()
        errs = ex.map(P.LayerAloneChunk(alone_fn), chunks, on_done=step if bar else None)
        alone = {lab: e for chunk, es in zip(chunks, errs) for lab, e in zip(chunk, es)}
        alone = {lab: alone[lab] for lab in layers}
        builds = len(chunks)
    return alone, builds
