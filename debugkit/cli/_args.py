"""Argument groups and value parsers shared by run / convert / inspect (name:value syntax as in Polygraphy)."""
from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys

from native.device import get_device
from native.errors import UsageError


def device_arg(text):
    """--device NAME: the Device, resolved once here (an unknown name is a usage error naming the known ones)."""
    try:
        return get_device(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None

def parse_dims(text: str, *, what="--input-shapes", symbolic=False) -> tuple:
    """One shape in either spelling: "[1,3,224,224]" or "1x3x224x224" ("[]" is a scalar).
    symbolic=True lets a dim be a name ("[batch,16]", "batchx16"), for model surgery."""
    t = text.strip()
    body = t[1:-1] if t.startswith("[") and t.endswith("]") else None
    toks = ([x.strip() for x in body.split(",")] if body is not None else t.split("x"))
    if body is not None and body.strip() == "":
        return ()
    dims = []
    for tok in toks:
        tok = tok.strip().strip("'\"")
        if re.fullmatch(r"-?\d+", tok):
            d = int(tok)
            if d < 0 and not symbolic:
                raise UsageError(f"{what} '{text}': dims must be >= 0")
            dims.append(d)
        elif symbolic and re.fullmatch(r"[A-Za-z_][\w.-]*", tok or "-"):
            dims.append(tok)
        else:
            raise UsageError(f"{what} '{text}': a shape is [d0,d1,...] or d0xd1x..., with integer dims"
                             + (" or dim names" if symbolic else "") + ", e.g. [1,3,224,224] or 1x3x224x224")
    return tuple(dims)


def split_name_shape(item: str, what="--input-shapes"):
    """ "x:[1,3,224,224]" / "x:1x3x224x224" / "a:b:[2,3]" (names may hold ':') -> (name, shape text)."""
    if item.endswith("]") and ":[" in item and not item.startswith(":["):
        name, _, rest = item.rpartition(":[")
        return name, "[" + rest
    name, sep, rest = item.rpartition(":")
    if not sep or not name:
        raise UsageError(f"{what} expects NAME:[d0,d1,...] or NAME:d0xd1x..., got '{item}'")
    return name, rest


def split_top_level(text: str, sep=",") -> list:
    """Split on `sep` outside brackets: "x:[1,3],y:2x2" -> ["x:[1,3]", "y:2x2"]."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


def parse_shape_list(items, *, what="--input-shapes", symbolic=False) -> dict:
    """["x:[1,3,224,224]", "y:1x16"] (or one string, comma-separated) -> {"x": (1, 3, 224, 224), "y": (1, 16)}.
    Both spellings are accepted everywhere a shape is given (run, convert, surgeon, benchmark)."""
    if isinstance(items, str):
        items = [items]
    out = {}
    for group in items or []:
        for item in split_top_level(group):
            name, dims = split_name_shape(item, what)
            out[name] = parse_dims(dims, what=what, symbolic=symbolic)
    return out


def did_you_mean(name, choices):
    """The closest of `choices` to `name` (case-insensitive), or None."""
    lower = {str(c).lower(): c for c in choices}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=0.6)
    return lower[close[0]] if close else None


def check_input_names(names, model_inputs, what="--input-shapes"):
    """A name that is not a model input is a typo, not something to ignore silently."""
    unknown = [n for n in names if n and n not in model_inputs]
    if unknown:
        hint = "".join(f"; did you mean '{c}' for '{n}'?" for n in unknown for c in [did_you_mean(n, model_inputs)] if c)
        raise UsageError(f"{what} names unknown input(s) {unknown}; the model's inputs are {list(model_inputs)}"
                         f"{hint}")


def parse_ranges(items) -> dict:
    """["x:[0,1]", "[-1,1]"] → {"x": (0.0, 1.0), "": (-1.0, 1.0)}."""
    out = {}
    for item in items or []:
        name, sep, rest = item.rpartition(":[") if ":[" in item else ("", "[", item.lstrip("["))
        try:
            lo, hi = ast.literal_eval("[" + rest)
            out[name] = (float(lo), float(hi))
        except (ValueError, SyntaxError, TypeError):
            raise UsageError(f"--val-range expects [lo,hi] or name:[lo,hi], got '{item}'") from None
        if out[name][0] > out[name][1]:
            raise UsageError(f"--val-range '{item}': lo must be <= hi")
    return out


def parse_per_output(items, what, convert=float) -> dict:
    """["1e-3", "out:1e-2"] → {"": 1e-3, "out": 1e-2}."""
    out = {}
    for item in items or []:
        name, _, value = str(item).rpartition(":")
        try:
            out[name] = convert(value)
        except ValueError:
            raise UsageError(f"{what} expects a value or name:value, got '{item}'") from None
        if isinstance(out[name], float) and out[name] < 0:
            raise UsageError(f"{what} '{item}' must be >= 0")
    return out


def add_common_args(parser, *, default="warning"):
    """-v/--verbose, -q/--quiet, --log-file FILE and --no-color, the same on every subtool.
    `default` is the subtool's normal log level ("warning" or "info"); -v and -q move one level from it."""
    have = {o for a in parser._actions for o in a.option_strings}
    g = parser.add_argument_group("logging")

    def add(*flags, **kw):
        if not have & set(flags):
            g.add_argument(*flags, **kw)
    add("-v", "--verbose", action="count", default=0, help="more logging (-v: info and tracebacks, -vv: verbose)")
    add("-q", "--quiet", action="count", default=0,
        help="less logging (-q: one level quieter, -qq: errors only) and no progress bars")
    add("--log-file", metavar="FILE", help="also write the log to FILE (without colour)")
    add("--no-color", "--no-colour", dest="no_color", action="store_true",
        help="no colour (also off when NO_COLOR is set or the output is not a terminal)")
    if "_log_default" not in parser._defaults:
        parser.set_defaults(_log_default=default)
    return g


add_verbose = add_common_args   # older name


class _Tee:
    """Stream for the logger: the terminal (the current sys.stderr, so redirections keep working) plus a file."""

    def __init__(self, f):
        self.f = f

    def write(self, text):
        sys.stderr.write(text)
        self.f.write(re.sub(r"\x1b\[[0-9;]*m", "", text))

    def flush(self):
        sys.stderr.flush()
        self.f.flush()


_saved = []   # what apply_common_args changed, for reset_common_args


def apply_common_args(args):
    """Apply the logging options to the process: log level, colour, log file, progress bars.
    Every change is undone by `reset_common_args()` (the CLI calls it when the subtool returns)."""
    if getattr(args, "_dk_applied", False):
        return
    from debugkit import report
    from native.logger import G_LOGGER, Severity
    levels = [Severity.VERBOSE, Severity.INFO, Severity.WARNING, Severity.ERROR]
    base = levels.index(Severity.INFO if getattr(args, "_log_default", "warning") == "info" else Severity.WARNING)
    v, q = getattr(args, "verbose", 0) or 0, getattr(args, "quiet", 0) or 0
    level = levels[max(0, min(len(levels) - 1, base - v + q))]
    from native import progress
    _saved.append((G_LOGGER.min_severity, G_LOGGER.formatter, G_LOGGER.stream, report.colour_override(),
                   progress.is_quiet()))
    G_LOGGER.min_severity = level
    args._dk_applied = True
    if getattr(args, "no_color", False):
        report.set_colour(False)
    tags = {Severity.ERROR: ("[E]", "red"), Severity.WARNING: ("[W]", "yellow"), Severity.INFO: ("[I]", None),
            Severity.VERBOSE: ("[V]", None), Severity.INTERNAL_ERROR: ("[!]", "red")}

    def formatter(sev, msg):
        tag, colour = tags.get(sev, ("[?]", None))
        text = f"{tag} {msg}"
        return report.paint(text, colour, sys.stderr) if colour else text
    G_LOGGER.formatter = formatter
    log_file = getattr(args, "log_file", None)
    if log_file:
        try:
            f = open(log_file, "a")   # appended to by design, line by line (docs/hardening.md: not replaced)
        except OSError as e:
            from native.errors import InputFileError
            raise InputFileError(f"cannot open --log-file {log_file}: {e.strerror}") from None
        G_LOGGER.stream = _Tee(f)
        G_LOGGER.file = f   # the file also gets INFO (build lines, numpy warnings) below the terminal's level
    if q:
        progress.set_quiet(True)


def echo_to_log_file(text: str) -> None:
    """Also put a line the CLI prints itself (the final error) into --log-file, if one is open."""
    from native.logger import G_LOGGER
    if isinstance(G_LOGGER.stream, _Tee):
        G_LOGGER.stream.f.write(text + "\n")


def reset_common_args():
    """Undo every apply_common_args (log level, formatter, log file, colour, quiet progress bars)."""
    from debugkit import report
    from native import progress
    from native.logger import G_LOGGER
    while _saved:
        level, formatter, stream, colour, quiet = _saved.pop()
        if isinstance(G_LOGGER.stream, _Tee):
            G_LOGGER.stream.f.close()
        G_LOGGER.file = None
        G_LOGGER.min_severity, G_LOGGER.formatter, G_LOGGER.stream = level, formatter, stream
        report.set_colour(colour)
        progress.set_quiet(quiet)


apply_verbosity = apply_common_args   # older name


def data_generator(args) -> str:
    """--data-generator (default debugkit; run makes it polygraphy for a .json --save-outputs/--save-inputs)."""
    return getattr(args, "data_generator", None) or "debugkit"


def device_given(args):
    """--device when the command line gave it, else None (build for the CPU; a loaded plan runs where built)."""
    return args.device if getattr(args, "_device_given", False) else None
