"""Check models: `check lint` finds what is wrong with an ONNX model, naming the node every time."""
from __future__ import annotations


from debugkit.cli import _args
from native.logger import G_LOGGER


def register(subparsers):
    parser = subparsers.add_parser("check", help=__doc__.splitlines()[0], description=__doc__)
    subs = parser.add_subparsers(dest="check_cmd", metavar="COMMAND")
    p = subs.add_parser("lint", help="lint an ONNX model (exit 1 if it has errors)",
                        description="Run the ONNX checker and per-node checks (unknown ops, missing inputs, "
                                    "duplicate names, dangling outputs, empty graph, type and shape mismatches); "
                                    "exit 1 if any error is found, 0 otherwise (warnings do not fail).")
    p.add_argument("model")
    p.add_argument("--json", "-o", dest="json", metavar="REPORT", help="write the report as JSON here")
    p.add_argument("--external-data-dir", metavar="DIR", help="folder of the model's external weights")
    p.add_argument("--no-importer-check", action="store_true",
                   help="do not warn about ops that debugkit's engine cannot import yet")
    _args.add_common_args(p, default="info")
    p.set_defaults(func=run)
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])


def run(args) -> int:
    from debugkit.surgeon.external_data import load_model
    from debugkit.surgeon.lint import ERROR, WARNING, lint_model
    _args.apply_common_args(args)
    model = load_model(args.model, args.external_data_dir)
    report = lint_model(model, check_importers=not args.no_importer_check)
    for e in report.entries:
        text = f"LINT | {e}"
        if e.level == ERROR:
            G_LOGGER.error(text)
        elif e.level == WARNING:
            G_LOGGER.warning(text)
        else:
            G_LOGGER.info(text)
    if args.json:
        from native.files import write_json
        write_json(args.json, report.to_json(), "--json", indent=2)
        G_LOGGER.info(f"Saved lint report to {args.json}")
    n_err = len(report.errors)
    if n_err:
        G_LOGGER.error(f"FAILED | {n_err} error(s) in {args.model}; failing nodes: {report.failing[:20]}")
        return 1
    G_LOGGER.info(f"PASSED | {args.model}: no errors ({len(report.entries)} warning(s)/note(s))")
    return 0
