"""Modify ONNX models: sanitize (fold constants with our kernels, clean up, sort, reshape), extract, insert."""
from __future__ import annotations


from debugkit.cli import _args
from native.errors import UsageError
from native.logger import G_LOGGER


def _common(p):
    _args.add_common_args(p, default="info")
    p.add_argument("--external-data-dir", metavar="DIR",
                   help="folder holding the model's external weights (default: the model's folder)")
    p.add_argument("--save-external-data", nargs="?", const="", default=None, metavar="FILE",
                   help="save weights to an external data file next to the output (default name OUT.data); "
                        "done automatically for models over 2 GB")
    p.add_argument("--external-data-size-threshold", type=int, default=1024, metavar="BYTES",
                   help="only tensors at least this large go to the external file (default 1024)")


def register(subparsers):
    parser = subparsers.add_parser("surgeon", help=__doc__.splitlines()[0], description=__doc__)
    subs = parser.add_subparsers(dest="surgeon_cmd", metavar="COMMAND")

    p = subs.add_parser("sanitize", help="fold constants, clean up, toposort, override input shapes",
                        description="Fold constants with debugkit's own kernels, remove dead code, sort, "
                                    "and override input shapes.")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--fold-constants", action="store_true", help="fold constants (repeated to a fixed point)")
    p.add_argument("--num-passes", type=int, default=10, help="upper bound on folding passes (default 10)")
    p.add_argument("--fold-size-threshold", type=_size, default=None, metavar="BYTES",
                   help="do not write folded tensors larger than this (e.g. 16M); their producers stay")
    p.add_argument("--no-fold-shapes", action="store_true", help="do not fold Shape/Size of static dims")
    p.add_argument("--no-remove-noops", action="store_true",
                   help="keep Identity, Dropout, same-type Cast and other no-op nodes")
    p.add_argument("--cleanup", action="store_true", help="remove dead nodes, unused inputs and initializers")
    p.add_argument("--toposort", action="store_true", help="sort nodes topologically")
    p.add_argument("--override-input-shapes", "--input-shapes", nargs="+", default=[], metavar="NAME:[DIMS]",
                   help="e.g. x:[1,3,224,224] y:[batch,16]")
    p.add_argument("--no-shape-inference", action="store_true", help="do not run ONNX shape inference")
    p.add_argument("--report", metavar="JSON", help="write the folding report (failures, counts, time) here")
    _common(p)
    p.set_defaults(func=run)

    p = subs.add_parser("extract", help="cut the subgraph between named tensors",
                        description="Cut the subgraph between named tensors; 'auto' shapes/dtypes are inferred.")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--inputs", nargs="+", default=None, metavar="NAME:SHAPE:DTYPE",
                   help="new inputs, e.g. x:[1,3,224,224]:float32 or x:auto:auto or x:auto (default: keep)")
    p.add_argument("--outputs", nargs="+", default=None, metavar="NAME:DTYPE",
                   help="new outputs, e.g. y:auto or y:float32 (default: keep)")
    p.add_argument("--model-input-shapes", nargs="+", default=[], metavar="NAME:[DIMS]",
                   help="shapes of the model's inputs used to infer 'auto' shapes")
    _common(p)
    p.set_defaults(func=run)

    p = subs.add_parser("insert", help="replace the subgraph between tensors by one node",
                        description="Replace the subgraph between the given tensors by one node.")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--inputs", nargs="+", required=True, metavar="NAME", help="tensors the new node reads")
    p.add_argument("--outputs", nargs="+", required=True, metavar="NAME", help="tensors the new node produces")
    p.add_argument("--op", required=True, help="op type of the new node")
    p.add_argument("--name", default=None, help="name of the new node")
    p.add_argument("--domain", default="", help="domain of the new node (custom ops)")
    p.add_argument("--attrs", nargs="+", default=[], metavar="KEY=VALUE",
                   help="attributes, values as Python/JSON literals: alpha=0.5 perm=[0,2,1] mode='linear'")
    _common(p)
    p.set_defaults(func=run)
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(t)
    except ValueError:
        raise UsageError(f"bad size '{text}': expected bytes, optionally with K, M or G") from None


def _save(model, args):
    from debugkit.surgeon.external_data import save_model
    ext = args.save_external_data
    if ext == "":
        import os
        ext = os.path.basename(args.output) + ".data"
    save_model(model, args.output, external_data=ext, size_threshold=args.external_data_size_threshold)
    G_LOGGER.info(f"Saved model to {args.output}")


def run(args) -> int:
    _args.apply_common_args(args)
    cmd = args.surgeon_cmd
    from debugkit.surgeon.external_data import load_model
    model = load_model(args.model, args.external_data_dir)
    from backends.engine.onnx_parser.validate import check_model
    check_model(model, args.model)  # before ONNX shape inference sees it: a crafted model can crash it
    if cmd == "sanitize":
        return _sanitize(model, args)
    if cmd == "extract":
        from debugkit.surgeon.extract import extract_model, parse_input_specs, parse_output_specs
        from debugkit.surgeon.shapes import parse_shape_spec
        out = extract_model(model, parse_input_specs(args.inputs), parse_output_specs(args.outputs),
                            parse_shape_spec(args.model_input_shapes))
        _save(out, args)
        G_LOGGER.info(f"Extracted {len(out.graph.node)} nodes; inputs {[i.name for i in out.graph.input]}, "
                      f"outputs {[o.name for o in out.graph.output]}")
        return 0
    if cmd == "insert":
        from debugkit.surgeon.insert import insert_node, parse_attrs
        removed = insert_node(model, args.inputs, args.outputs, args.op, name=args.name, domain=args.domain,
                              attrs=parse_attrs(args.attrs))
        G_LOGGER.info(f"Replaced {removed} nodes by one '{args.op}' node")
        _save(model, args)
        return 0
    raise UsageError(f"unknown surgeon command {cmd!r}")


def _sanitize(model, args) -> int:
    from debugkit.surgeon.fold import FoldOptions
    from debugkit.surgeon.sanitize import SanitizeOptions, sanitize
    from debugkit.surgeon.shapes import parse_shape_spec
    if not (args.fold_constants or args.cleanup or args.toposort or args.override_input_shapes):
        G_LOGGER.warning("nothing to do: pass --fold-constants, --cleanup, --toposort or --override-input-shapes")
    opts = SanitizeOptions(
        fold_constants=args.fold_constants, cleanup=args.cleanup, toposort=args.toposort,
        override_input_shapes=parse_shape_spec(args.override_input_shapes),
        shape_inference=not args.no_shape_inference,
        fold=FoldOptions(size_threshold=args.fold_size_threshold, fold_shapes=not args.no_fold_shapes,
                         remove_noops=not args.no_remove_noops, max_passes=max(1, args.num_passes)))
    report = sanitize(model, opts)
    if report is not None:
        G_LOGGER.info(f"Total nodes | original: {report.nodes_before}, after folding: {report.nodes_after} | "
                      f"{report.folded} folded, {report.noops_removed} no-ops removed, {report.dead_removed} dead "
                      f"removed, {len(report.failures)} left unfolded by errors, {report.passes} passes, "
                      f"{report.seconds:.2f} s")
        if args.report:
            from native.files import write_json
            write_json(args.report, {"nodes_before": report.nodes_before, "nodes_after": report.nodes_after,
                                     "folded": report.folded, "noops_removed": report.noops_removed,
                                     "dead_removed": report.dead_removed,
                                     "passes": report.passes, "seconds": round(report.seconds, 4),
                                     "failures": report.failures, "too_large": report.too_large},
                       "--report", indent=2)
    _save(model, args)
    return 0
