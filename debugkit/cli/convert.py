"""Build a plan file from an ONNX model (FP32 by default; --fp16/--int8 allow lower precision)."""
from __future__ import annotations

import os
import sys
import time

from debugkit.cli import _args
from native.errors import InputFileError


def register(subparsers):
    p = subparsers.add_parser("convert", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="ONNX model")
    p.add_argument("-o", "--output", required=True, metavar="FILE.plan", help="where to write the plan")
    p.add_argument("--input-shapes", nargs="+", default=[], metavar="NAME:[D0,...]|NAME:D0xD1x..",
                   help="fixed shapes for dynamic inputs (min=opt=max)")
    p.add_argument("--profile", nargs="+", default=[], metavar="NAME:[MIN]:[OPT]:[MAX]",
                   help="an optimization profile range per dynamic input, e.g. x:[1,3,64,64]:[1,3,224,224]:[4,3,512,512]")
    _args.add_build_args(p)
    from debugkit.cli.calibration_args import add_calibration_data_args
    add_calibration_data_args(p)
    _args.add_common_args(p)
    p.set_defaults(func=run)


def _parse_profiles(items):
    """["x:[1,3,64,64]:[1,3,224,224]:[4,3,512,512]"] or "x:1x3x64x64:1x3x224x224:4x3x512x512" -> {x: (min, opt, max)}."""
    from native.errors import UsageError
    out = {}
    for item in items:
        if ":[" in item:
            name, _, rest = item.partition(":[")
            parts = ["[" + p if not p.startswith("[") else p for p in ("[" + rest).split(":")]
        else:
            name, *parts = item.rsplit(":", 3)
        if len(parts) != 3 or not name:
            raise UsageError(f"--profile expects NAME:[min]:[opt]:[max] or NAME:MINx..:OPTx..:MAXx.., got '{item}'")
        out[name] = tuple(_args.parse_dims(p, what="--profile") for p in parts)
    return out


def run(args) -> int:
    from backends.engine.build import build_plan_from_onnx
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    _args.apply_common_args(args)
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    model = load_onnx(args.model)
    meta = onnx_input_metadata(model)
    shapes = _args.parse_shape_list(args.input_shapes)
    ranges = _parse_profiles(args.profile)
    _args.check_input_names(shapes, meta, "--input-shapes")
    _args.check_input_names(ranges, meta, "--profile")
    human = sys.stderr if args.output in ("-", "/dev/stdout") else sys.stdout   # stdout may carry the plan
    for m in meta.values():
        if m.is_dynamic() and m.name not in shapes and m.name not in ranges:
            shapes[m.name] = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in m.shape)
            print(f"input '{m.name}' has dynamic shape {list(m.shape)}; building for {list(shapes[m.name])} "
                  f"(set it with --input-shapes or --profile)", file=human)
    t0 = time.perf_counter()
    plan = build_plan_from_onnx(model, shapes=shapes, ranges=ranges, device=args.device,
                                config=_args.build_config_from_args(args), parts=True)
    seconds = time.perf_counter() - t0
    from backends.engine.plan import write_plan_parts
    size = write_plan_parts(plan, args.output)   # part by part: no joined copy of the weights
    print(f"wrote {args.output} ({size / 2**20:.2f} MiB; built in {seconds:.2f} s)", file=human)
    return 0
