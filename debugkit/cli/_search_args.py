"""Options every `debug` search and `sweep` share: executor (--workers, --ray), probe log (--log, --resume), feeds."""
from __future__ import annotations

from debugkit.cli import _args


def add_executor_args(g, what: str = "independent probes"):
    """--workers N|auto and --ray ADDRESS|auto on the argument group `g` (every command that spreads work)."""
    g.add_argument("--workers", type=_workers_arg, default=1, metavar="N|auto",
                   help=f"evaluate {what} in N local processes (default 1: in this process); auto: one "
                        "per core, or with --device cuda one per visible GPU (each worker owns one GPU). A worker "
                        "that dies is restarted and its work run again")
    g.add_argument("--ray", metavar="ADDRESS|auto", default=None,
                   help=f"evaluate {what} on a Ray cluster (pip install 'debugkit[ray]'); "
                        "auto joins a running cluster or starts a local one")
    return g


def add_search_args(parser, default_log: str):
    g = add_executor_args(parser.add_argument_group("search"))
    g.add_argument("--log", default=default_log, metavar="FILE.jsonl",
                   help=f"probe log, one JSON line per probe (default {default_log})")
    g.add_argument("--resume", action="store_true",
                   help="continue the search recorded in --log (refused if the log is of another model/search)")
    return g


def _workers_arg(text):
    import argparse

    from debugkit.debug.executor import parse_workers
    from native.errors import UsageError
    try:
        return parse_workers(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def device_name(args) -> str:
    """The search's --device as a name ("cpu", "cuda", ...)."""
    dev = getattr(args, "device", None) or "cpu"
    return str(getattr(dev, "name", dev))


def resolve_workers(args) -> int:
    """args.workers as a number (auto: one per visible GPU with --device cuda, else one per core)."""
    from debugkit.debug.executor import auto_workers
    if args.workers == "auto":
        args.workers = auto_workers(device_name(args))
    return args.workers


def make_executor(args):
    """The executor --workers / --ray / --device ask for."""
    from debugkit.debug.executor import make_executor as make
    return make(resolve_workers(args) if not args.ray else args.workers, args.ray, device_name(args))


def add_common(parser):
    """-v/-q/--log-file/--no-color, as on every subtool."""
    _args.add_common_args(parser)


def apply_common(args):
    _args.apply_common_args(args)


def generated_feeds(args, model) -> dict:
    """The first feed of run's data loader (same seed, ranges, shapes, scripts, saved inputs) for this model."""
    from backends.runners.model import onnx_input_metadata
    from debugkit.options import DataOptions
    return DataOptions.from_args(args).first_feed(onnx_input_metadata(model))


class Progress:
    """The search's one progress bar ("probe n of at most m, best so far"): tqdm on a terminal, silent otherwise.

    `total` is the search's bound; `plan(total)` revises it when a phase ends and `step()` counts work that is not a
    probe (a base build, a ranking run). While it is open, per-build lines go to the log (native.progress.status)."""

    def __init__(self, total, desc):
        from native.progress import SearchBar, search_scope
        self.best = None
        self._scope = search_scope()
        self._scope.__enter__()
        self.bar = SearchBar(desc, total)

    def plan(self, total):
        self.bar.plan(total)

    def step(self, n=1):
        self.bar.step(n)

    @property
    def done(self):
        return self.bar.n

    def __call__(self, rec, n):
        res = rec.get("result")
        hit = (res.get("hit", res.get("fails")) if isinstance(res, dict) else res) is True
        art = rec.get("artifact")
        if hit and isinstance(art, list) and (self.best is None or len(art) < self.best):
            self.best = len(art)
        self.bar.step(1, f"best so far: {self.best}" if self.best is not None else "no hit yet")

    def close(self):
        if self._scope is not None:
            self.bar.close()
            self._scope.__exit__(None, None, None)
            self._scope = None
