"""`debugkit <subtool> ...`: dispatch, exit codes and error reporting.

Exit codes: 0 pass, 1 failed comparison or check, 2 bad usage or bad input (one line, no traceback unless -v).
Each subtool module defines `register(subparsers)` (adds its parser, whose help is the module docstring) and
`run(args) -> int`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

SUBTOOLS = ["run", "inspect", "convert", "surgeon", "check", "debug", "bench", "sweep"]  # missing modules are skipped


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"debugkit: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser():
    parser = _Parser(prog="debugkit", description="Compare an engine with ONNX Runtime, find where they part, "
                                                  "and fix the model.")
    parser.add_argument("--version", action="version", version=f"debugkit {__import__('debugkit').__version__}")
    subs = parser.add_subparsers(dest="subtool", metavar="SUBTOOL", parser_class=_Parser)
    for name in SUBTOOLS:
        try:
            mod = importlib.import_module(f"debugkit.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"debugkit.cli.{name}":
                continue
            raise
        mod.register(subs)
    return parser


def main(argv=None) -> int:
    from native.errors import DebugkitError
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "subtool", None):
        parser.print_help()
        return 2
    verbose = getattr(args, "verbose", 0)
    from native import progress
    was_quiet = progress.is_quiet()
    if getattr(args, "quiet", False):
        progress.set_quiet(True)
    try:
        return int(args.func(args) or 0)
    except DebugkitError as e:
        if verbose:
            raise
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"debugkit {args.subtool}: error: {first}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        progress.set_quiet(was_quiet)


if __name__ == "__main__":
    sys.exit(main())
