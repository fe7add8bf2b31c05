"""Debug searches: `debug build | tactics | precision | reduce | repeat` find what makes a check fail.

Each search lives in `debugkit.cli.debug_<name>` with `register(subparsers)` and a `run(args) -> int` set as the
parser's `func`; a search whose module is not present is simply not offered.
"""
from __future__ import annotations

import importlib

SEARCHES = ["build", "tactics", "precision", "reduce", "repeat"]


def register(subparsers):
    parser = subparsers.add_parser("debug", help=__doc__.splitlines()[0], description=__doc__)
    subs = parser.add_subparsers(dest="debug_cmd", metavar="SEARCH", parser_class=type(parser))
    for name in SEARCHES:
        try:
            mod = importlib.import_module(f"debugkit.cli.debug_{name}")
        except ModuleNotFoundError as e:
            if e.name == f"debugkit.cli.debug_{name}":
                continue
            raise
        mod.register(subs)
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])
