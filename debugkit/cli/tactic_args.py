"""Tactic options shared by convert, run and the debug subtools: user tactics modules, tactic sources, replay
files, the timing cache file, timing iterations, workspace limit and heuristic (untimed) selection."""
from __future__ import annotations

from native.errors import UsageError


def add_tactic_args(parser):
    g = parser.add_argument_group("tactics")
    g.add_argument("--tactics-module", action="append", default=[], metavar="FILE.py",
                   help="import a Python file that registers Tactic subclasses (native.tactics.register_tactic); "
                        "repeatable")
    g.add_argument("--tactic-sources", metavar="[+-]NAME,...",
                   help="NAME,...: restrict every layer kind that has a tactic of these names to them (e.g. "
                        "im2col-gemm,blas); -NAME: never use NAME; +NAME: add NAME to the list (docs/tactics.md)")
    g.add_argument("--save-tactics", metavar="F.json", help="record every layer's tactic in a replay file")
    g.add_argument("--load-tactics", metavar="F.json", help="build with the tactics a replay file recorded")
    g.add_argument("--timing-cache", metavar="F", help="read tactic timings from F (when it exists) and write "
                                                        "the updated cache back after the build")
    g.add_argument("--ignore-timing-cache-mismatch", action="store_true",
                   help="use a timing cache measured on another device or config anyway")
    g.add_argument("--avg-timing-iterations", type=int, default=None, metavar="N",
                   help="timed runs per candidate tactic (default 4)")
    g.add_argument("--workspace", type=int, default=None, metavar="BYTES",
                   help="workspace limit: tactics that need more scratch memory are not considered")
    g.add_argument("--tactic-heuristic", action="store_true",
                   help="pick tactics without timing (the first registered tactic that supports each layer)")
    return g


def parse_sources(text) -> set | None:
    """--tactic-sources NAME,...|-NAME|+NAME (builder/tactic_sources.py) -> the config's set (None: all)."""
    if text is None:
        return None
    from backends.engine.builder.tactic_sources import normalise
    from native.tactic_modules import known_tactic_names
    return normalise(str(text), known_tactic_names())


def join_signed_sources(argv: list) -> list:
    """`--tactic-sources -NAME,...` as `--tactic-sources=-NAME,...`: argparse would read -NAME as an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--tactic-sources" and i + 1 < len(argv) and argv[i + 1][:1] == "-" \
                and argv[i + 1][:2] != "--":
            out.append(f"--tactic-sources={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


class _AfterBuild:
    """Writes the timing cache file when the build reports its choices (the end of tactic selection)."""

    def __init__(self, config, path):
        self.config, self.path = config, path

    def select_algorithms(self, context, choices):
        return []

    def report_algorithms(self, contexts, choices):
        from backends.engine.builder.timing_cache_file import save_timing_cache
        if self.config.timing_cache is not None:
            save_timing_cache(self.config.timing_cache, self.path, self.config)


def load_modules(args):
    from native.tactic_modules import load_tactics_module
    for path in getattr(args, "tactics_module", None) or []:
        load_tactics_module(path)


def apply_tactic_args(args, config):
    """Configure `config` from the parsed tactic options (loading tactics modules first)."""
    from backends.engine.builder import BuilderFlag, MemoryPoolType
    from backends.engine.builder.algorithm_selector import SelectorChain
    from backends.engine.builder.tactic_replay import TacticRecorder, TacticReplayer
    from backends.engine.builder.timing_cache_file import load_timing_cache
    load_modules(args)
    config.device = getattr(args, "device", None) or config.device
    config.tactic_sources = parse_sources(getattr(args, "tactic_sources", None))
    if getattr(args, "avg_timing_iterations", None) is not None:
        if args.avg_timing_iterations < 1:
            raise UsageError("--avg-timing-iterations must be >= 1")
        config.avg_timing_iterations = args.avg_timing_iterations
    if getattr(args, "workspace", None) is not None:
        config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, args.workspace)
    if getattr(args, "tactic_heuristic", False):
        config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
    selectors = []
    if getattr(args, "load_tactics", None):
        selectors.append(TacticReplayer(args.load_tactics))
    if getattr(args, "save_tactics", None):
        selectors.append(TacticRecorder(args.save_tactics, config.device))
    if getattr(args, "timing_cache", None):
        config.timing_cache = load_timing_cache(args.timing_cache, config,
                                                getattr(args, "ignore_timing_cache_mismatch", False))
        selectors.append(_AfterBuild(config, args.timing_cache))
    if selectors:
        config.algorithm_selector = SelectorChain(selectors + [config.algorithm_selector])
    return config
