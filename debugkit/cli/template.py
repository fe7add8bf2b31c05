"""Write starting-point scripts that run as they are: `template data-loader MODEL` (a --data-loader-script for
MODEL's inputs) and `template check` (a --check command for the debug searches: engine vs ONNX Runtime, exit 1 on a
mismatch). Edit them to taste; the header of each says how it is used.
"""
from __future__ import annotations

import os

from debugkit import options
from debugkit.cli import _args
from native.errors import InputFileError, UsageError

_DATA_LOADER = '''#!/usr/bin/env python3
"""Inputs for {model_name}, for `debugkit run {model_name} --engine --onnxrt --data-loader-script {script}`
(also bench, convert --int8 calibration and the debug searches). Written by `debugkit template data-loader`.

`load_data()` returns or yields one {{input name: array}} dict per iteration; replace the random values by real
data (images, token ids, ...). Shapes and dtypes are the model's{dynamic_note}.
"""
import numpy as np

ITERATIONS = 2
INPUTS = {{
{inputs}
}}


def load_data():
    rng = np.random.default_rng(0)
    for _ in range(ITERATIONS):
        feeds = {{}}
        for name, (shape, dtype) in INPUTS.items():
            if np.issubdtype(dtype, np.floating):
                feeds[name] = rng.uniform(0.0, 1.0, shape).astype(dtype)
            elif dtype == np.bool_:
                feeds[name] = rng.integers(0, 2, shape).astype(bool)
            else:
                feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        yield feeds


if __name__ == "__main__":   # show what the script makes
    for i, feeds in enumerate(load_data()):
        print(i, {{k: (v.dtype.name, list(v.shape)) for k, v in feeds.items()}})
'''

_CHECK = '''#!/usr/bin/env python3
"""A check for the debug searches: does our engine agree with ONNX Runtime on MODEL?

    python {script} MODEL.onnx [INPUTS.h5]            exit 0 if they agree, 1 if not
    debugkit debug reduce M.onnx -o small.onnx --check python {script} {{model}} {{inputs}}
    debugkit debug build M.onnx --check python {script} {{model}}

Written by `debugkit template check`. Edit BUILD_FLAGS, the tolerances and `agrees()` to check what you need (a
top-1 class, a task metric, ...).
"""
import sys

import numpy as np

from backends.runners import EngineRunner, OnnxrtRunner, load_onnx
from debugkit.compare.funcs import Tolerances, compare_simple
from debugkit.data_loader import DataLoader, SavedDataLoader, coerce_feeds

BUILD_FLAGS = ("fp16",)                                  # the engine under test (fp16, bf16, int8, ...)
TOLERANCES = Tolerances(atol={{"": 1e-2}}, rtol={{"": 1e-2}})


def feeds_for(model, runner, inputs_path):
    meta = runner.input_metadata()
    if inputs_path:
        loader = SavedDataLoader(inputs_path)
    else:
        loader = DataLoader(seed=1, iterations=1)
        loader.input_metadata = meta
    return [coerce_feeds(f, meta) for f in loader]


def agrees(ours: dict, reference: dict) -> bool:
    ok = True
    for name, expected in reference.items():
        res = compare_simple(name, ours[name], expected, TOLERANCES, hist=False)
        print(f"{{'PASSED' if res.passed else 'FAILED'}} | {{name}} | max abs {{res.max_abs}} | {{res.reason}}")
        ok = ok and res.passed
    return ok


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    model = load_onnx(argv[0])
    with OnnxrtRunner(model) as ort, EngineRunner(argv[0], flags=BUILD_FLAGS) as engine:
        feeds = feeds_for(model, ort, argv[1] if len(argv) > 1 and argv[1] else None)
        return 0 if all(agrees(engine.infer(f), ort.infer(f)) for f in feeds) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def register(subparsers):
    p = subparsers.add_parser("template", help=__doc__.splitlines()[0], description=__doc__)
    subs = p.add_subparsers(dest="template_cmd", metavar="TEMPLATE")
    d = subs.add_parser("data-loader", help="a --data-loader-script for MODEL's inputs",
                        description="Write a --data-loader-script whose load_data() yields feeds for MODEL's inputs "
                                    "(names, shapes, dtypes filled in); it runs as is.")
    d.add_argument("model", help="the ONNX model whose inputs the script feeds")
    options.add_outputs(d, "output", output={"default": "data_loader.py",
                                             "help": "the script (default data_loader.py)"})
    options.add_option(d, "input_shapes")
    d.set_defaults(func=run_data_loader)
    c = subs.add_parser("check", help="a --check command for the debug searches (engine vs ONNX Runtime)",
                        description="Write a check script: exit 0 when our engine agrees with ONNX Runtime on the "
                                    "model given to it, 1 when not; it runs as is.")
    options.add_outputs(c, "output", output={"default": "check.py", "help": "the script (default check.py)"})
    c.set_defaults(func=run_check)
    for q in (d, c):
        q.add_argument("--force", action="store_true", help="overwrite an existing file")
        _args.add_common_args(q)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _write(args, text):
    from debugkit.data_json import write_text_atomically
    if os.path.exists(args.output) and not args.force:
        raise UsageError(f"{args.output} exists; pass --force to overwrite it")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        raise UsageError(f"-o {args.output}: folder {os.path.dirname(os.path.abspath(args.output))} does not exist")
    write_text_atomically(args.output, text)
    os.chmod(args.output, 0o755)
    print(f"wrote {args.output}")
    return 0


def run_data_loader(args) -> int:
    import numpy as np
    from backends.runners import load_onnx
    from backends.runners.model import onnx_input_metadata
    from debugkit.data_loader import DataLoader
    _args.apply_common_args(args)
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    meta = onnx_input_metadata(load_onnx(args.model))
    shapes = DataLoader(shapes=_args.parse_shape_list(args.input_shapes))
    shapes.check_names(meta)
    rows, dynamic = [], []
    for m in meta.values():
        if m.is_dynamic() and m.name not in shapes.shapes:
            dynamic.append(m.name)
        shape = shapes.shape_for(m)
        rows.append(f"    {m.name!r}: ({list(shape)}, np.{np.dtype(m.dtype).name}),")
    note = f"; dynamic dims of {', '.join(dynamic)} are 1 here: set real sizes" if dynamic else ""
    name = os.path.basename(args.model)
    return _write(args, _DATA_LOADER.format(model_name=name, script=os.path.basename(args.output),
                                            dynamic_note=note, inputs="\n".join(rows)))


def run_check(args) -> int:
    _args.apply_common_args(args)
    return _write(args, _CHECK.format(script=os.path.basename(args.output)))
