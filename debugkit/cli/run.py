"""Run a model on our engine and/or ONNX Runtime, compare outputs (and every layer), and say where they part."""
from __future__ import annotations

import os
import sys

from debugkit.cli import _args
from native.errors import DataFileError, UsageError
from native.logger import G_LOGGER


def register(subparsers):
    p = subparsers.add_parser("run", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="ONNX model (or a plan file, for --engine only)")
    r = p.add_argument_group("runners (compared in the order given; ONNX Runtime is the reference)")
    r.add_argument("--engine", dest="runners", action="append_const", const="engine", help="run our engine")
    r.add_argument("--onnxrt", dest="runners", action="append_const", const="onnxrt", help="run ONNX Runtime")
    _args.add_data_loader_args(p)
    _args.add_build_args(p)
    p.add_argument("--save-engine", metavar="FILE.plan", help="save the built plan")
    c = p.add_argument_group("comparison")
    c.add_argument("--atol", nargs="+", default=[], metavar="[NAME:]VALUE",
                   help="absolute tolerance, global or per output (default by dtype: fp32 1e-4)")
    c.add_argument("--rtol", nargs="+", default=[], metavar="[NAME:]VALUE",
                   help="relative tolerance, global or per output (default by dtype: fp32 1e-3)")
    c.add_argument("--check-error-stat", nargs="+", default=[], metavar="[NAME:]STAT",
                   help="elemwise (default), max, mean, median or quantile")
    c.add_argument("--error-quantile", type=float, default=0.99, help="quantile for --check-error-stat quantile")
    c.add_argument("--compare", nargs="+", default=[], choices=["simple", "indices", "l2", "cosine", "psnr", "snr"],
                   help="extra checks on the outputs besides simple (all must pass)")
    c.add_argument("--index-tolerance", type=int, default=0, help="for --compare indices")
    c.add_argument("--l2-threshold", type=float, default=1e-2)
    c.add_argument("--cosine-threshold", type=float, default=0.999)
    c.add_argument("--psnr-threshold", type=float, default=30.0)
    c.add_argument("--snr-threshold", type=float, default=20.0)
    c.add_argument("--allow-nan", action="store_true", help="NaNs in the same place on both sides compare equal")
    c.add_argument("--strict-inf", action="store_true", help="matching infinities compare unequal (default: equal)")
    c.add_argument("--validate", action="store_true", help="fail on NaN/Inf in any output")
    lw = p.add_argument_group("layerwise")
    lw.add_argument("--mark-all", action="store_true",
                    help="compare every ONNX tensor observable at engine layer boundaries; names the first divergence")
    lw.add_argument("--mark", nargs="+", metavar="NAME|PATTERN", help="compare only these tensors (fnmatch patterns)")
    lw.add_argument("--layer-scale-tol", type=float, default=None, metavar="FRACTION",
                    help="intermediate tensors: atol is at least FRACTION x max|reference| (default by dtype: "
                         "fp32 1e-5, fp16 1e-3), so float rounding in large-valued layers is not called a "
                         "divergence; 0 turns it off")
    io = p.add_argument_group("data files (HDF5)")
    io.add_argument("--save-inputs", metavar="FILE.h5")
    io.add_argument("--save-outputs", metavar="FILE.h5", help="outputs (and layerwise tensors) of every runner")
    io.add_argument("--load-outputs", nargs="+", default=[], metavar="FILE.h5",
                    help="saved outputs to compare against (they become the reference)")
    _args.add_common_args(p)
    p.set_defaults(func=run)


def _extra_funcs(args):
    from debugkit.compare import funcs
    table = {"indices": lambda n, a, e: funcs.compare_indices(n, a, e, args.index_tolerance),
             "l2": lambda n, a, e: funcs.compare_l2(n, a, e, args.l2_threshold),
             "cosine": lambda n, a, e: funcs.compare_cosine(n, a, e, args.cosine_threshold),
             "psnr": lambda n, a, e: funcs.compare_psnr(n, a, e, args.psnr_threshold),
             "snr": lambda n, a, e: funcs.compare_snr(n, a, e, args.snr_threshold)}
    return {k: table[k] for k in dict.fromkeys(args.compare) if k != "simple"}


def _data_loader(args, metadata):
    from debugkit.data_loader import DataLoader, SavedDataLoader, ScriptDataLoader
    if args.load_inputs and args.data_loader_script:
        raise UsageError("use either --load-inputs or --data-loader-script, not both")
    if args.load_inputs:
        return SavedDataLoader(args.load_inputs)
    if args.data_loader_script:
        return ScriptDataLoader(args.data_loader_script)
    if args.iterations < 0:
        raise UsageError("--iterations must be >= 0")
    dl = DataLoader(args.seed, args.iterations, _args.parse_ranges(args.val_range),
                    _args.parse_shape_list(args.input_shapes))
    dl.input_metadata = metadata
    dl.check_names(metadata)
    for meta in metadata.values():   # shape problems surface before anything is built
        dl.shape_for(meta)
    return dl


def run(args) -> int:
    from backends.runners import EngineRunner, OnnxrtRunner, load_onnx, model_sha256
    from backends.runners.engine import is_plan
    from backends.runners.model import markable_onnx_tensors, onnx_input_metadata
    from debugkit.compare.comparator import Comparator, LiveSource, LoadedSource
    from debugkit.compare.funcs import Tolerances
    from debugkit.data_file import DataFile, DataWriter
    from debugkit.data_loader import coerce_feeds
    from debugkit.report import render

    _args.apply_common_args(args)
    runners = list(dict.fromkeys(args.runners or []))
    if not runners and not args.load_outputs:
        raise UsageError("choose at least one runner (--engine, --onnxrt) or give --load-outputs")
    if not os.path.exists(args.model):
        from native.errors import InputFileError
        raise InputFileError(f"model file not found: {args.model}")
    plan_model = is_plan(args.model)
    model = None if plan_model else load_onnx(args.model)
    if plan_model and "onnxrt" in runners:
        raise UsageError(f"{args.model} is a plan file; ONNX Runtime needs the ONNX model")
    sha = model_sha256(args.model)
    layerwise = True if args.mark_all else (args.mark or None)

    live = []
    for kind in runners:
        if kind == "engine":
            live.append(EngineRunner(args.model, config=_args.build_config_from_args(args), device=args.device,
                                     save_plan=args.save_engine))
        else:
            live.append(OnnxrtRunner(model, mark="all" if layerwise else None))

    loaded, files = [], []
    for path in args.load_outputs:
        f = DataFile(path, expect_kind="outputs")
        files.append(f)
        saved_sha = f.attrs.get("model_sha256")
        if saved_sha and saved_sha != sha:
            G_LOGGER.warning(f"MISMATCHED MODEL: outputs in {path} were produced by model {f.attrs.get('model_path')} "
                             f"(sha256 {saved_sha[:12]}…), not by {args.model} (sha256 {sha[:12]}…)")
        loaded.extend(LoadedSource(f, r) for r in f.runners())

    tol = Tolerances(_args.parse_per_output(args.atol, "--atol"), _args.parse_per_output(args.rtol, "--rtol"),
                     _args.parse_per_output(args.check_error_stat, "--check-error-stat", str), args.error_quantile)
    writer = input_writer = None
    try:
        for r in live:
            r.activate()
        metadata = live[0].input_metadata() if live else (onnx_input_metadata(model) if model is not None else {})
        known = set(live[0].output_names()) if live else set()
        if model is not None:
            known |= {o.name for o in model.graph.output}
            if layerwise:
                known |= set(markable_onnx_tensors(model))
        for f, src in ((f, s) for f in files for s in loaded if s.file is f):
            known |= set(src.output_names)
        unknown = sorted(n for n in tol.names() if n not in known)
        if unknown:
            raise UsageError(f"--atol/--rtol/--check-error-stat name unknown output(s) {unknown}; outputs are "
                             f"{sorted(o.name for o in model.graph.output) if model is not None else sorted(known)}")
        loader = _data_loader(args, metadata)
        feeds_iter = (coerce_feeds(f, metadata) for f in loader)

        provenance = {"model_path": os.path.abspath(args.model), "model_sha256": sha,
                      "command": " ".join(["debugkit"] + sys.argv[1:])}
        if args.save_inputs:
            input_writer = DataWriter(args.save_inputs, "inputs", provenance)
        if args.save_outputs:
            writer = DataWriter(args.save_outputs, "outputs", provenance)

        sources = [LiveSource(r) for r in live] + loaded
        reference = _reference(sources)
        comparator = Comparator(tol, nan_equal=args.allow_nan, inf_equal=not args.strict_inf,
                                extra_funcs=_extra_funcs(args), validate=args.validate, layerwise=layerwise,
                                model=model, scale_tol=args.layer_scale_tol)
        summary = comparator.run(sources, reference, feeds_iter, writer=writer, input_writer=input_writer)
        if writer is not None:
            for r in live:
                attrs = {"model_sha256": sha}
                if isinstance(r, EngineRunner):
                    attrs["build_config"] = r.build_config
                writer.set_runner_attrs(r.name, attrs)
    finally:
        for w in (writer, input_writer):
            if w is not None:
                w.close()
        for r in live:
            r.deactivate()
        for f in files:
            f.close()
    for w in summary.warnings:
        if w.startswith("MISMATCHED"):
            print(f"WARNING: {w}", file=sys.stderr)
    for r in live:
        times = getattr(r, "inference_times", [])
        if times:
            print(f"{r.name:16s} | {len(times)} inference(s), median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
    print(render(summary, verbose=args.verbose >= 2))
    if args.save_outputs:
        print(f"saved outputs to {args.save_outputs}")
    if args.save_inputs:
        print(f"saved inputs to {args.save_inputs}")
    return 0 if summary.passed else 1


def _reference(sources):
    """Saved outputs win (golden), then ONNX Runtime, then the last runner given."""
    loaded = [s for s in sources if s.loaded]
    if loaded:
        return next((s for s in loaded if s.runner_name.startswith("onnxrt")), loaded[0])
    return next((s for s in sources if s.name.startswith("onnxrt")), sources[-1])
