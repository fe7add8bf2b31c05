"""`debugkit <subtool> ...`: dispatch, exit codes and error reporting.

Exit codes: 0 pass, 1 failed comparison or check, 2 bad usage or bad input (one line, no traceback unless -v),
3 internal error: an exception that is not a DebugkitError is a bug in debugkit; it is reported as "internal error in
<layer>" with where it happened, and the traceback only with -v.
Each subtool module defines `register(subparsers)` (adds its parser, whose help is the module docstring) and
`run(args) -> int`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback

SUBTOOLS = ["run", "inspect", "convert", "surgeon", "check", "debug", "bench", "sweep", "template"]  # missing modules are skipped


# package prefix -> the layer named in "internal error in <layer>" (longest prefix wins)
LAYERS = {
    "backends.engine.onnx_parser": "the ONNX parser", "backends.engine.builder": "the builder",
    "backends.engine.builder.passes": "a builder pass", "backends.engine.builder.tactic_selection": "tactic selection",
    "backends.engine.plan": "the plan loader", "backends.engine.runtime": "the runtime", "backends.engine": "the engine",
    "backends.runners": "a runner", "backends": "the backends", "native.cpu": "a CPU kernel", "native.cuda": "CUDA",
    "native.dla": "the DLA emulation", "native": "native", "debugkit.compare": "the comparator",
    "debugkit.surgeon": "the surgeon", "debugkit.debug": "a debug search", "debugkit.cli": "the command line",
    "debugkit": "debugkit", "onnx": "ONNX (called by debugkit)", "onnxruntime": "ONNX Runtime (called by debugkit)",
    "numpy": "numpy (called by debugkit)",
}


def internal_error_site(exc: BaseException) -> tuple[str, str]:
    """(layer, 'file:line') of the deepest frame in our packages (else the deepest frame) where `exc` was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(root + os.sep)]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "debugkit", "?"
    path = os.path.abspath(frame.filename)
    rel = os.path.relpath(path, root) if path.startswith(root + os.sep) else os.path.basename(path)
    module = rel[:-3].replace(os.sep, ".") if rel.endswith(".py") else rel
    layer = next((LAYERS[p] for p in sorted(LAYERS, key=len, reverse=True)
                  if module == p or module.startswith(p + ".")), "debugkit")
    return layer, f"{rel}:{frame.lineno}"


class _Parser(argparse.ArgumentParser):
    """Every (sub)parser: no abbreviated flags, errors with its own usage, a did-you-mean for unknown flags."""

    def __init__(self, *a, **kw):
        kw["allow_abbrev"] = False
        super().__init__(*a, **kw)

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if not hasattr(ns, "_dk_parser"):   # the innermost subparser finishes first and wins
            ns._dk_parser = self
        return ns, extras

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = getattr(ns, "_dk_parser", self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}{owner.suggest(extras)}")
        return ns

    def suggest(self, extras) -> str:
        """'; did you mean --atol?' for flags that look like one of this parser's; a Polygraphy flag without a
        counterpart here is explained instead (a look-alike of ours may mean something else)."""
        import difflib

        from debugkit.cli.polygraphy_flags import explain
        known = [o for a in self._actions for o in a.option_strings]
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        hints = []
        for x in extras:
            why = explain(command, x, _root_parser(self)) if x.startswith("-") else None
            if why:
                hints.append(why)
            elif x.startswith("-"):
                close = difflib.get_close_matches(x.split("=", 1)[0], known, n=1, cutoff=0.6)
                if close:
                    hints.append(f"did you mean {close[0]} (for {x})?")
        return ("; " + " ".join(hints)) if hints else ""

    def error(self, message):
        """Short usage of this (sub)command, the error, and where the full list of options is."""
        import re
        m = re.match(r"argument ([-\w]+)", message)
        if m and " " in self.prog:   # a Polygraphy spelling that is ours with another meaning (debug reduce --mode)
            from debugkit.cli.polygraphy_flags import entry
            e = entry(self.prog.split(" ", 1)[1], m.group(1))
            if e is not None and e.kind == "na":
                message += f" ({m.group(1)} differs from Polygraphy's: {e.reason})"
        positionals = " ".join(a.metavar or a.dest for a in self._actions
                               if not a.option_strings and a.help != argparse.SUPPRESS
                               and not isinstance(a, argparse._SubParsersAction))
        subs = any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        print(f"usage: {self.prog} [options] {'COMMAND ... ' if subs else ''}{positionals}".rstrip()
              + f"   ('{self.prog} -h' lists every option)", file=sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


_ROOT = []   # the top-level parser, for explaining Polygraphy flags against the command's own options


def _root_parser(parser):
    return _ROOT[-1] if _ROOT else None


def register_modules(subs, prefix: str, names):
    """Import `prefix + name` for each name and let it `register(subs)`; a module that does not exist is skipped
    (an error inside one that does is not)."""
    for name in names:
        try:
            mod = importlib.import_module(prefix + name)
        except ModuleNotFoundError as e:
            if e.name == prefix + name:
                continue
            raise
        mod.register(subs)


def build_parser():
    parser = _Parser(prog="debugkit", description="Compare an engine with ONNX Runtime, find where they part, "
                                                  "and fix the model.")
    parser.add_argument("--version", action="version", version=f"debugkit {__import__('debugkit').__version__}")
    subs = parser.add_subparsers(dest="subtool", metavar="SUBTOOL", parser_class=_Parser)
    register_modules(subs, "debugkit.cli.", SUBTOOLS)
    _common_args_everywhere(parser)
    _ROOT[:] = [parser]
    return parser


def _common_args_everywhere(parser):
    """Every command that does something (a parser without subcommands) gets -v/-q/--log-file/--no-color, also
    subtools registered by modules that did not add them; main applies them before the subtool runs."""
    from debugkit.cli._args import add_common_args
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            _common_args_everywhere(child)
    if parser.prog != "debugkit" and not subs:
        add_common_args(parser)   # adds only the options a subtool did not define itself


def _silence_stdout():
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush does not complain."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # stdout without a file descriptor (tests capture it)
        pass


class _Terminated(SystemExit):
    """SIGTERM/SIGHUP while a command runs: unwinds like Ctrl-C, so half-written outputs are removed."""


def _raise_terminated(signum, frame):
    raise _Terminated(128 + signum)


@contextlib.contextmanager
def _termination_as_exit():
    """For the command's duration, SIGTERM and SIGHUP raise (exit 128+N after cleanup) instead of killing the
    process where it stands; the previous handlers come back afterwards."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            saved[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _numpy_warnings_summarised(args):
    """numpy's overflow/invalid-value warnings go to the log, each attributed to the layer running; the terminal gets
    one summary line when the command ends (or the error)."""
    from native.logger import G_LOGGER, tally_warnings

    def current_layer():
        from backends.engine.runtime.executor import current_layer
        return current_layer()
    with tally_warnings(current_layer) as tally:
        try:
            yield tally
        finally:
            line = tally.summary(see=getattr(args, "log_file", None) or "-v or --log-file")
            if line:
                G_LOGGER.warning(line)


def main(argv=None) -> int:
    from native import config
    from native.errors import DebugkitError, UserCodeExit
    try:
        config.check_environment()
        config.cli_defaults()   # process tuning on for the CLI's engines (DEBUGKIT_TUNE_PROCESS=0 turns it off)
    except DebugkitError as e:   # a malformed DEBUGKIT_* variable: before any work, one line
        print(f"debugkit: error: {e}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else argv
    from debugkit.cli.tactic_args import join_signed_sources
    argv = join_signed_sources(argv)   # --tactic-sources -NAME: a value, not an option
    parser = build_parser()
    from debugkit.cli.polygraphy_flags import translate
    argv = translate(argv, parser)   # Polygraphy's spellings (--trt, --onnx-outputs mark all, ...) become ours
    args = parser.parse_args(argv)
    args._dk_argv = list(argv)   # the command as given (run --gen-script quotes it)
    if not getattr(args, "subtool", None):
        parser.print_help()
        return 2
    verbose = getattr(args, "verbose", 0)
    command = " ".join(x for x in (args.subtool, getattr(args, "debug_cmd", None)) if x)   # "debug precision"
    from debugkit.cli._args import apply_common_args, echo_to_log_file, reset_common_args
    from debugkit.cli.file_claims import claim
    try:
        with claim(args), _termination_as_exit():   # outputs checked and locked before any work (the log too)
            apply_common_args(args)
            with _numpy_warnings_summarised(args):
                return int(args.func(args) or 0)
    except DebugkitError as e:
        if verbose:
            raise
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"debugkit {command}: error: {first}", file=sys.stderr)
        echo_to_log_file(f"debugkit {command}: error: {first}")
        return 2
    except UserCodeExit as e:   # sys.exit / KeyboardInterrupt inside a tactics module or loader script
        print(f"debugkit {args.subtool}: error: {e}", file=sys.stderr)
        echo_to_log_file(f"debugkit {args.subtool}: error: {e}")
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:   # `debugkit ... | head`: the reader has all it wanted; not an error
        _silence_stdout()
        return 0
    except Exception as e:  # a bug: say where, never a bare traceback (unless asked for with -v)
        layer, site = internal_error_site(e)
        if verbose:
            traceback.print_exc()
        first = (str(e).splitlines() or [""])[0][:300]
        print(f"debugkit {command}: internal error in {layer} ({site}: {type(e).__name__}: {first}); this is a "
              f"bug in debugkit" + ("" if verbose else ": rerun with -v for the traceback and report it"),
              file=sys.stderr)
        return 3
    finally:
        reset_common_args()   # log level, log file, colour and progress settings are per command
        config.reload()       # and so are --ignore-fingerprint and the tuning default (the env's values again)


if __name__ == "__main__":
    sys.exit(main())
