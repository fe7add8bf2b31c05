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
    from debugkit import options
    options.add_outputs(p, "output", output={"required": True, "metavar": "FILE.plan", "help": "where to write the plan"})
    # the data group: --input-shapes fixes dynamic inputs (min=opt=max); the rest is INT8 calibration data
    options.add_groups(p, "data", "build")
    options.add_aliases(p, "convert")   # --profile: the old spelling of --shape-profiles
    _args.add_common_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backends.engine.build import build_plan_from_onnx
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    from debugkit.options import Options
    _args.apply_common_args(args)
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    model = load_onnx(args.model)
    meta = onnx_input_metadata(model)
    opts = Options.from_args(args, "convert")
    shapes = opts.data.shapes()
    ranges = opts.build.shape_ranges()
    _args.check_input_names(shapes, meta, "--input-shapes")
    _args.check_input_names(ranges, meta, "--shape-profiles")
    human = sys.stderr if args.output in ("-", "/dev/stdout") else sys.stdout   # stdout may carry the plan
    for m in meta.values():
        if m.is_dynamic() and m.name not in shapes and m.name not in ranges:
            shapes[m.name] = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in m.shape)
            print(f"input '{m.name}' has dynamic shape {list(m.shape)}; building for {list(shapes[m.name])} "
                  f"(set it with --input-shapes or --shape-profiles)", file=human)
    t0 = time.perf_counter()
    plan = build_plan_from_onnx(model, shapes=shapes, ranges=ranges, device=args.device,
                                config=opts.builder_config(), parts=True)
    seconds = time.perf_counter() - t0
    from backends.engine.plan import write_plan_parts
    size = write_plan_parts(plan, args.output)   # part by part: no joined copy of the weights
    print(f"wrote {args.output} ({size / 2**20:.2f} MiB; built in {seconds:.2f} s)", file=human)
    return 0
