"""Run a model on our engine and/or ONNX Runtime, compare outputs (and every layer), and say where they part."""
from __future__ import annotations

import os
import sys

from debugkit.cli import _args
from native.errors import ExecutionError, UsageError
from native.logger import G_LOGGER


def register(subparsers):
    p = subparsers.add_parser("run", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="ONNX model (or a plan file, for --engine only)")
    r = p.add_argument_group("runners (compared in the order given; ONNX Runtime is the reference)")
    r.add_argument("--engine", dest="runners", action="append_const", const="engine", help="run our engine")
    r.add_argument("--onnxrt", dest="runners", action="append_const", const="onnxrt", help="run ONNX Runtime")
    r.add_argument("--reference", choices=["fp64"], default=None,
                   help="fp64: also run the fp64 oracle (our engine in float64, fusion off) on the first feed and "
                        "say per output (and per layer with --mark-all) which side is closer to it")
    from debugkit import options
    options.add_groups(p, "data", "build", "compare")
    p.add_argument("--profile-layers", dest="profile_layers", action="store_true",
                   help="per-layer time of our engine over the inferences (TensorRT's IProfiler)")
    p.add_argument("--load-engine", metavar="FILE.plan",
                   help="run this saved plan as the engine; MODEL is the ONNX model it was built from (checked), "
                        "for ONNX Runtime and layerwise names")
    p.add_argument("--warm-up", type=int, default=None, metavar="N",
                   help="untimed inferences per runner before the timed ones (default 1; 0: the timing is cold and "
                        "says so)")
    p.add_argument("--allow-mismatched-inputs", action="store_true",
                   help="compare with saved outputs although they came from other inputs (otherwise that fails)")
    lw = p.add_argument_group("layerwise")
    lw.add_argument("--mark-all", action="store_true",
                    help="compare every ONNX tensor observable at engine layer boundaries; names the first divergence")
    lw.add_argument("--mark", nargs="+", metavar="NAME|PATTERN", help="compare only these tensors (fnmatch patterns)")
    p.add_argument("--exclude-outputs", nargs="+", default=[], metavar="NAME|PATTERN",
                   help="leave these outputs and tensors (names or fnmatch patterns) out of every comparison "
                        "(Polygraphy: --onnx-exclude-outputs / --trt-exclude-outputs)")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop after the first iteration with a failed comparison")
    lw.add_argument("--layer-scale-tol", type=float, default=None, metavar="FRACTION",
                    help="intermediate tensors: atol is at least FRACTION x max|reference| (default by dtype: "
                         "fp32 1e-5, fp16 1e-3), so float rounding in large-valued layers is not called a "
                         "divergence; 0 turns it off")
    p.add_argument("--load-outputs", nargs="+", default=[], metavar="FILE.h5|FILE.json",
                   help="saved outputs to compare against (they become the reference); ours or Polygraphy's")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write the report as one self-contained HTML page: per-layer error chart along the "
                        "network with the first divergence marked (with --mark-all/--mark), error histograms per "
                        "output, the table")
    options.add_outputs(p, "save_engine", "save_inputs", "save_outputs", "json", "gen_script", json={
        "help": "write the verdict as JSON (status, exit_code, reasons, compared, outputs, layerwise, timing, "
                "provenance, fingerprint); '-' for stdout (the report then goes to stderr)"})
    options.add_aliases(p, "run")
    _args.add_common_args(p)
    p.set_defaults(func=run)


def tolerances_from_args(args):
    """The Tolerances of the comparison options (debugkit/options.py CompareOptions.tolerances)."""
    from debugkit.options import CompareOptions
    return CompareOptions.from_args(args).tolerances()


def _data_loader(opts, metadata):
    from debugkit.data_loader import DataLoader
    dl = opts.data.loader(metadata)
    if isinstance(dl, DataLoader):
        for meta in metadata.values():   # shape problems surface before anything is built
            dl.shape_for(meta)
    return dl


def run(args) -> int:
    """The exit code: 0 pass, 1 fail (the summary's one verdict), 2 bad input (DebugkitError, raised)."""
    from native.errors import DebugkitError
    try:
        return _run(args)
    except DebugkitError as e:
        if getattr(args, "json", None):   # CI reads the file even when the run could not start
            from debugkit.verdict import Verdict
            v = Verdict("run", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            _write_json(args.json, dict(v.to_json(), error=v.error, outputs=[], layerwise=None, timing={},
                                        provenance={}))
        raise


def _run(args) -> int:
    from backends.runners import EngineRunner, OnnxrtRunner, load_onnx, model_sha256
    from backends.runners.engine import is_plan
    from backends.runners.model import markable_onnx_tensors, onnx_input_metadata
    from debugkit.compare.comparator import Comparator, LiveSource, LoadedSource
    from debugkit.debug.checks import run_output_check
    from debugkit.data_file import open_data_file, package_versions
    from debugkit.data_json import data_writer
    from debugkit.data_loader import coerce_feeds
    from debugkit.options import Options
    from debugkit.report import render

    _args.apply_common_args(args)
    _polygraphy_data_for_json(args)
    if args.gen_script:
        from debugkit.cli import run_script
        if not os.path.exists(args.model):
            from native.errors import InputFileError
            raise InputFileError(f"model file not found: {args.model}")
        run_script.write(args, args.gen_script, tolerances_from_args(args))
        print(f"wrote {args.gen_script} (run it: python {args.gen_script})")
        return 0
    opts = Options.from_args(args, "run")
    runners = list(dict.fromkeys(args.runners or []))
    if args.report and not os.path.isdir(os.path.dirname(os.path.abspath(args.report))):
        raise UsageError(f"--report {args.report}: folder {os.path.dirname(os.path.abspath(args.report))} does "
                         f"not exist")
    if not runners and not args.load_outputs:
        raise UsageError("choose at least one runner (--engine, --onnxrt) or give --load-outputs")
    if args.warm_up is not None and args.warm_up < 0:
        raise UsageError("--warm-up must be >= 0")
    if not os.path.exists(args.model):
        from native.errors import InputFileError
        raise InputFileError(f"model file not found: {args.model}")
    plan_model = is_plan(args.model)
    if args.load_engine:
        if plan_model:
            raise UsageError(f"{args.model} is a plan file; --load-engine takes the plan and MODEL the ONNX model "
                             f"it was built from")
        if "engine" not in runners:
            raise UsageError("--load-engine needs --engine (it is the engine that runs)")
        if args.save_engine:
            raise UsageError("--save-engine with --load-engine: the plan is already saved")
        if not is_plan(args.load_engine):
            from native.errors import PlanError
            raise PlanError(f"--load-engine {args.load_engine} is not a debugkit plan file"
                            if os.path.exists(args.load_engine) else f"plan file not found: {args.load_engine}")
    model = None if plan_model else load_onnx(args.model)
    if plan_model and "onnxrt" in runners:
        raise UsageError(f"{args.model} is a plan file; ONNX Runtime needs the ONNX model: run MODEL.onnx "
                         f"--engine --load-engine {args.model} --onnxrt")
    sha = model_sha256(args.model)
    layerwise = True if args.mark_all else (args.mark or None)

    live = []
    for kind in runners:
        if kind == "engine":
            r = EngineRunner(args.load_engine or args.model, config=opts.builder_config(),
                             device=_args.device_given(args), save_plan=args.save_engine,
                             profile=args.profile_layers, shapes=opts.build.shape_ranges())
            if args.load_engine:
                r.onnx_model = model      # the plan's tensors keep their ONNX names; layerwise walks this graph
            live.append(r)
        else:
            live.append(OnnxrtRunner(model, mark="all" if layerwise else None))

    loaded, files = [], []
    provenance = {"model_path": os.path.abspath(args.model), "model_sha256": sha,
                  "command": " ".join(["debugkit"] + sys.argv[1:]), "versions": package_versions(),
                  "loaded_outputs": [], "loaded_inputs": args.load_inputs}
    provenance["options_fingerprint"] = opts.fingerprint()
    tol = opts.compare.tolerances()
    opts.compare.warn_unused()
    postprocess = opts.compare.postprocessing()
    writer = input_writer = None
    timing = {}
    caught = None
    try:
        for path in args.load_outputs:
            f = open_data_file(path, expect_kind="outputs")
            files.append(f)
            saved_sha = f.attrs.get("model_sha256")
            provenance["loaded_outputs"].append({"path": path, "format": f.attrs.get("format"),
                                                 "model_sha256": saved_sha, "runners": f.runners()})
            if saved_sha and saved_sha != sha:
                G_LOGGER.warning(f"MISMATCHED MODEL: outputs in {path} were produced by model "
                                 f"{f.attrs.get('model_path')} (sha256 {saved_sha[:12]}…), not by {args.model} "
                                 f"(sha256 {sha[:12]}…)")
            if f.attrs.get("format") == "polygraphy-json" and not args.load_inputs:
                G_LOGGER.warning(f"{path} is a Polygraphy file, which does not record its inputs: pass the inputs "
                                 f"Polygraphy saved with it (--save-inputs) via --load-inputs, or outputs computed "
                                 f"from other data will differ")
            loaded.extend(LoadedSource(f, r) for r in f.runners())
        from backends.engine.runtime.executor import current_layer
        from native.logger import tally_warnings
        with tally_warnings(current_layer) as caught:   # each logged with its layer; one line at the end
            for r in live:
                r.activate()
            for r in live:
                if args.load_engine and isinstance(r, EngineRunner):
                    provenance["plan"] = check_plan_source(r.engine, model, args.load_engine, args.model)
            metadata = live[0].input_metadata() if live else (onnx_input_metadata(model) if model is not None else {})
            known = set(live[0].output_names()) if live else set()
            if model is not None:
                known |= {o.name for o in model.graph.output}
                if layerwise:
                    known |= set(markable_onnx_tensors(model))
            for src in loaded:
                known |= set(src.output_names)
            import fnmatch
            stray = [p for p in args.exclude_outputs if not any(k == p or fnmatch.fnmatchcase(k, p) for k in known)]
            if stray:
                raise UsageError(f"--exclude-outputs {' '.join(stray)} matches no output or tensor of the model")
            unknown = sorted(n for n in tol.names() | set(postprocess) if n and n not in known)
            if unknown:
                raise UsageError(f"--atol/--rtol/--check-error-stat/--error-quantile/--index-tolerance/--postprocess "
                                 f"name unknown output(s) {unknown}; outputs are "
                                 f"{sorted(o.name for o in model.graph.output) if model is not None else sorted(known)}")
            loader = _data_loader(opts, metadata)
            feeds_iter = (coerce_feeds(f, metadata) for f in loader)
            warm_up = 1 if args.warm_up is None else args.warm_up
            feeds_iter = _warm_up(live, feeds_iter, warm_up)

            if args.save_inputs:
                input_writer = data_writer(args.save_inputs, "inputs", provenance)
            if args.save_outputs:
                writer = data_writer(args.save_outputs, "outputs", provenance)

            sources = [LiveSource(r) for r in live] + loaded
            reference = _reference(sources)
            comparator = Comparator(tol, nan_equal=args.allow_nan, inf_equal=not args.strict_inf,
                                    output_check=run_output_check(args, runners),
                                    extra_funcs=opts.compare.extra_funcs(tol), validate=args.validate,
                                    layerwise=layerwise,
                                    model=model, scale_tol=args.layer_scale_tol,
                                    allow_mismatched_inputs=args.allow_mismatched_inputs,
                                    check_shapes=args.check_shapes, postprocess=postprocess,
                                    exclude=args.exclude_outputs, fail_fast=args.fail_fast)
            try:
                summary = comparator.run(sources, reference, feeds_iter, writer=writer, input_writer=input_writer)
            except ExecutionError as e:
                raise _with_shape_hint(e, loader) from None
        if writer is not None:
            for r in live:
                attrs = {"model_sha256": sha}
                if isinstance(r, EngineRunner):
                    attrs["build_config"] = r.build_config
                writer.set_runner_attrs(r.name, attrs)
        for r in live:
            timing[r.name] = _timing(r, warm_up)
        oracle_text = None
        if args.reference == "fp64" and model is not None and live:
            from debugkit.debug.oracle import truth_report
            first = next(iter(_data_loader(opts, metadata)), None)
            if first is not None:
                oracle_text = truth_report(model, live, coerce_feeds(first, metadata), layerwise)
        for w in (input_writer, writer):   # whole files replace the targets only now, after every step passed
            if w is not None:
                w.commit()
    finally:
        for w in (writer, input_writer):
            if w is not None:
                w.close()
        for r in live:
            r.deactivate()
        for f in files:
            f.close()
        _report_numpy_warnings(caught)
    verdict = _verdict(summary, opts, sources)
    human = sys.stderr if args.json == "-" else sys.stdout   # with --json - stdout is the JSON alone
    for w in summary.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    for name, t in timing.items():
        if t["inferences"]:
            print(_timing_line(name, t), file=human)
    for r in live:
        if getattr(r, "profiler", None) is not None and r.profiler.runs:
            print(r.profiler.table(), file=human)
    if args.save_outputs:
        print(f"saved outputs to {args.save_outputs}", file=human)
    if args.save_inputs:
        print(f"saved inputs to {args.save_inputs}", file=human)
    if args.json and args.json != "-":
        _write_json(args.json, _json(verdict, summary, timing, provenance))
        print(f"saved the verdict as JSON to {args.json}", file=human)
    if args.report:
        from debugkit.data_json import write_text_atomically
        from debugkit.report_html import run_html
        write_text_atomically(args.report, run_html(summary, f"debugkit run {os.path.basename(args.model)}",
                                                    provenance))
        print(f"wrote the HTML report to {args.report}", file=human)
    if oracle_text:
        print(oracle_text, file=human)
    print(render(summary, verbose=args.verbose >= 2, stream=human), file=human)   # the verdict: the last line
    if args.json == "-":
        _write_json(args.json, _json(verdict, summary, timing, provenance))
    return verdict.exit_code


def _verdict(summary, opts, sources):
    """The run's verdict (debugkit/verdict.py). A run that compared nothing fails, and the report says why: its
    reason joins the summary's problems, so the terminal's last line, --json and the exit code agree. A loader
    script or saved-inputs file that yields no feed is bad input (exit 2)."""
    from debugkit.verdict import from_summary
    v = from_summary(summary, command="run", fingerprint=opts.fingerprint(), comparing=len(sources) > 1)
    if summary.iterations == 0 and (opts.data.load_inputs or opts.data.data_loader_script):
        v.error = f"{opts.data.describe_source()} yielded no feed: nothing was run or compared"
    why = v.nothing_compared()
    if (why and not v.disagreements or v.error) and (v.error or why) not in summary.problems:
        summary.problems.append(v.error or why)   # the run's own failure line says so (a disagreement says more)
    return v


def _json(verdict, summary, timing, provenance) -> dict:
    """run's --json: the verdict's fields first (status, passed, exit code, reasons, counts, fingerprint), then the
    report's document."""
    from debugkit.report import run_json
    doc = verdict.to_json()
    if verdict.error:
        doc["error"] = verdict.error
    doc.update({k: v for k, v in run_json(summary, timing, provenance).items() if k not in doc})
    return doc


def _with_shape_hint(e, loader):
    """A layer that failed on inputs whose dynamic dims defaulted to 1: say so, and point at --input-shapes (a
    dim of 1 can make an empty tensor further on, e.g. a text model's sequence length)."""
    names = getattr(loader, "defaulted_inputs", None)
    if not names:
        return e
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ExecutionError(f"{first}; the dynamic dims of input(s) {names} were set to 1 (no --input-shapes): give "
                          f"the real shapes with --input-shapes {names[0]}:[...]")


def _warm_up(live, feeds_iter, n):
    """Run every live runner `n` times on the first feed (untimed: builds, first-call allocation and caches are
    not what a user means by latency), then yield the feeds unchanged."""
    first = next(feeds_iter, None)
    if first is None:
        return
    for r in live:
        for _ in range(n):
            r.infer(first)
        r.inference_times = []
    yield first
    yield from feeds_iter


def _timing(runner, warm_up) -> dict:
    import numpy as np
    times = list(getattr(runner, "inference_times", []))
    t = {"inferences": len(times), "warm_up": warm_up, "cold": warm_up == 0}
    if times:
        ms = np.asarray(times) * 1e3
        t.update(median_ms=float(np.median(ms)), min_ms=float(ms.min()), max_ms=float(ms.max()))
    if getattr(runner, "build_seconds", None) is not None:
        t["build_s"] = round(runner.build_seconds, 3)
    return t


def _timing_line(name, t) -> str:
    how = (f"after {t['warm_up']} warm-up run(s)" if not t["cold"] else
           "cold: no warm-up, so it includes first-call costs (builds, allocation); use --warm-up N")
    return f"{name:16s} | {t['inferences']} inference(s), median {t['median_ms']:.2f} ms, min {t['min_ms']:.2f} ms | {how}"


def check_plan_source(engine, model, plan_path, model_path) -> dict:
    """A plan used beside its model must have been built from it: the plan header records the source model's
    sha256 (of its canonical serialisation). Another model's plan is bad input (PlanError, exit 2)."""
    from backends.engine.build import source_model_record
    from native.errors import PlanError
    recorded = (getattr(engine.graph, "meta", None) or {}).get("source_model")
    here = source_model_record(model)
    if not recorded:
        G_LOGGER.warning(f"{plan_path} does not record the model it was built from (built by an older debugkit or "
                         f"through the Python API from a network); cannot check that it belongs to {model_path}")
        return {"path": plan_path, "source_model": None, "checked": False}
    if recorded.get("sha256") != here["sha256"]:
        raise PlanError(f"{plan_path} was built from another model (graph '{recorded.get('graph_name')}', sha256 "
                        f"{str(recorded.get('sha256'))[:12]}…, inputs {recorded.get('inputs')}), not from "
                        f"{model_path} (graph '{here['graph_name']}', sha256 {here['sha256'][:12]}…); rebuild it "
                        f"with: debugkit convert {model_path} -o {plan_path}")
    return {"path": plan_path, "source_model": recorded, "checked": True}


_NUMPY_WORDS = {"invalid value": "invalid operations (they produce NaN)", "divide by zero": "divisions by zero (Inf)",
                "overflow": "overflows (Inf)", "underflow": "underflows"}


def _report_numpy_warnings(tally):
    """numpy's RuntimeWarnings from the kernels, once, in our words (each one is in the log at -v / --log-file,
    with the layer that raised it)."""
    if not tally:
        return
    if tally.count:
        what = "; ".join(f"{_NUMPY_WORDS.get(kind, kind)} in {op}" if op else _NUMPY_WORDS.get(kind, kind)
                         for (kind, op) in tally.sites)
        where = f" in {len(tally.layers)} layer(s)" if tally.layers else ""
        G_LOGGER.warning(f"numpy reported floating-point problems while running{where}: {what}. Outputs may hold "
                         f"NaN/Inf; --validate --mark-all names the first layer that produced one (each warning is "
                         f"in the log: -v or --log-file)")


def _write_json(dest, doc):
    import json
    text = json.dumps(doc, indent=1, default=str, allow_nan=False)
    if dest == "-":
        print(text)
        return
    from native.files import write_text
    write_text(dest, text + "\n", "--json")


def _polygraphy_data_for_json(args):
    """A .json --save-outputs/--save-inputs is for Polygraphy: unless --data-generator says otherwise, generate the
    inputs as Polygraphy does, so `polygraphy run --load-outputs FILE.json` with the same seed feeds the same data."""
    from debugkit.data_json import is_json_path
    if getattr(args, "data_generator", None) is None and (is_json_path(args.save_outputs)
                                                          or is_json_path(args.save_inputs)):
        G_LOGGER.info("saving Polygraphy JSON: inputs are generated as Polygraphy generates them "
                      "(--data-generator polygraphy)")
        args.data_generator = "polygraphy"


def _reference(sources):
    """Saved outputs win (golden), then ONNX Runtime, then the last runner given."""
    loaded = [s for s in sources if s.loaded]
    if loaded:
        return next((s for s in loaded if s.runner_name.startswith("onnxrt")), loaded[0])
    return next((s for s in sources if s.name.startswith("onnxrt")), sources[-1])
