"""Argument groups and value parsers shared by run / convert / inspect (name:value syntax as in Polygraphy)."""
from __future__ import annotations

import ast

from native.errors import UsageError


def parse_shape_list(items) -> dict:
    """["x:[1,3,224,224]", ...] → {"x": (1, 3, 224, 224)}."""
    out = {}
    for item in items or []:
        name, sep, rest = item.rpartition(":[")
        if not sep:
            raise UsageError(f"--input-shapes expects name:[d0,d1,...], got '{item}'")
        try:
            dims = ast.literal_eval("[" + rest)
            out[name] = tuple(int(d) for d in dims)
        except (ValueError, SyntaxError, TypeError):
            raise UsageError(f"--input-shapes '{item}': dims must be integers, e.g. {name}:[1,3,224,224]") from None
        if any(d < 0 for d in out[name]):
            raise UsageError(f"--input-shapes '{item}': dims must be >= 0")
    return out


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


def add_verbose(parser):
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v: info and tracebacks, -vv: verbose)")


def apply_verbosity(args):
    from native.logger import G_LOGGER, Severity
    v = getattr(args, "verbose", 0)
    G_LOGGER.min_severity = Severity.VERBOSE if v >= 2 else Severity.INFO if v == 1 else Severity.WARNING
    from debugkit.report import paint
    tags = {Severity.ERROR: ("[E]", "red"), Severity.WARNING: ("[W]", "yellow"), Severity.INFO: ("[I]", None),
            Severity.VERBOSE: ("[V]", None), Severity.INTERNAL_ERROR: ("[!]", "red")}

    def formatter(sev, msg):
        import sys
        tag, colour = tags.get(sev, ("[?]", None))
        text = f"{tag} {msg}"
        return paint(text, colour, sys.stderr) if colour else text
    G_LOGGER.formatter = formatter


def add_data_loader_args(parser):
    g = parser.add_argument_group("data loader")
    g.add_argument("--seed", type=int, default=1, help="seed for generated inputs (default 1)")
    g.add_argument("--val-range", nargs="+", default=[], metavar="[LO,HI]|NAME:[LO,HI]",
                   help="value range of generated inputs, for all inputs or per input (default [0,1])")
    g.add_argument("--input-shapes", nargs="+", default=[], metavar="NAME:[D0,D1,...]",
                   help="shapes for inputs with dynamic dims (dynamic dims default to 1)")
    g.add_argument("--iterations", type=int, default=1, help="number of generated feeds (default 1)")
    g.add_argument("--data-loader-script", metavar="FILE.py[:FUNC]",
                   help="a Python function that returns or yields {input: array} dicts (FUNC defaults to load_data)")
    g.add_argument("--load-inputs", metavar="FILE.h5", help="inputs saved by --save-inputs")
    return g


def add_build_args(parser):
    g = parser.add_argument_group("engine build")
    g.add_argument("--fp16", action="store_true", help="allow FP16 kernels (default: FP32 only)")
    g.add_argument("--int8", action="store_true", help="allow INT8 kernels")
    g.add_argument("--no-tf32", action="store_true", help="disallow TF32 (on by default, as in TensorRT)")
    g.add_argument("--disable-fusion", action="store_true", help="keep every layer as parsed")
    g.add_argument("--device", default="cpu", choices=["cpu", "cuda", "dla"], help="device to build for")
    return g


def build_flags(args) -> list[str]:
    flags = []
    if args.fp16:
        flags.append("fp16")
    if args.int8:
        flags.append("int8")
    if args.disable_fusion:
        flags.append("disable_fusion")
    return flags


def build_config_from_args(args):
    from backends.engine.builder import BuilderConfig, BuilderFlag
    config = BuilderConfig()
    if args.no_tf32:
        config.clear_flag(BuilderFlag.TF32)
    for f in build_flags(args):
        config.set_flag(BuilderFlag(f))
    return config
