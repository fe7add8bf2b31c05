"""Debug searches: `debug build | tactics | precision | reduce | repeat` find what makes a check fail.

Every search takes run's build, data and comparison options (docs/run.md) and judges with run's comparison; exit
codes follow run's rule (0 pass, 1 failed or nothing compared, 2 bad input, 3 internal error).
"""
# Each search lives in `debugkit.cli.debug_<name>` with `register(subparsers)` and a `run(args) -> int` set as the
# parser's `func`; a search whose module is not present is simply not offered.
from __future__ import annotations

SEARCHES = ["build", "tactics", "precision", "reduce", "repeat"]


def register(subparsers):
    parser = subparsers.add_parser("debug", help=__doc__.splitlines()[0], description=__doc__)
    subs = parser.add_subparsers(dest="debug_cmd", metavar="SEARCH", parser_class=type(parser))
    from debugkit.cli.main import register_modules
    register_modules(subs, "debugkit.cli.debug_", SEARCHES)
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])
