"""Every flag of `polygraphy run|convert|inspect|surgeon|debug` (0.53.6's own list, data/polygraphy/flags-0.53.6.json)
is accepted (as it is or rewritten to ours) or explained in one line; docs/migrating-from-polygraphy.md is that table."""
import argparse
import json
import os

import pytest

from debugkit.cli import polygraphy_flags as P
from debugkit.cli.main import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = json.load(open(os.path.join(ROOT, "tests", "debugkit", "data", "polygraphy", "flags-0.53.6.json")))["commands"]
PARSER = build_parser()
SPECIAL_VALUES = {"--onnx-outputs": ["mark", "all"], "--trt-outputs": ["mark", "all"], "--use-dla": [],
                  "--load-debug-replay": ["replay.jsonl"], "--mode": ["bisect"], "--silent": []}


def _sample(action) -> list:
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[0])]
    if action.type not in (None, str):   # int, float, sizes, ...
        return ["1"]
    return ["x:1"] if action.nargs in ("+", "*") else ["x"]


def _action(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def _base(command, sub):
    argv = command.split()
    for a in sub._actions:
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction):
            argv.append("m.onnx")
    if command == "debug precision":
        argv.append("--int8")
    for a in sub._actions:   # required options (convert -o, inspect diff-tactics --good/--bad, ...)
        if a.required and a.option_strings:
            argv += [a.option_strings[-1], *_sample(a)]
    return argv


CASES = [(c, f) for c, flags in FLAGS.items() if c not in P.MISSING_COMMANDS for opts in flags for f in opts]


def test_the_table_covers_every_polygraphy_flag():
    missing = [(c, f) for c, f in CASES if P.entry(c, f) is None]
    assert not missing
    assert len(CASES) > 600


@pytest.mark.parametrize("command, flag", CASES)
def test_each_polygraphy_flag_is_accepted_or_explained(command, flag, capsys):
    sub = P._subparser(PARSER, command.split())
    ours = P.options_of(sub)
    kind, e, target = P.resolve(command, flag, ours)
    values = SPECIAL_VALUES.get(flag)
    if values is None:
        values = _sample(_action(sub, target or flag)) if kind != "explain" and e.kind != "drop" else ["1"]
    argv = _base(command, sub) + [flag, *values]
    if command == "debug precision" and flag in ("--fp16", "--int8", "--bf16", "--fp8"):
        argv.remove("--int8")
    if kind == "explain":
        with pytest.raises(SystemExit) as exc:
            PARSER.parse_args(P.translate(argv, PARSER))
        assert exc.value.code == 2
        assert "Polygraphy's" in capsys.readouterr().err
    else:
        PARSER.parse_args(P.translate(argv, PARSER))   # accepted: no usage error


def test_migration_doc_is_the_table():
    """Made by the tool in a fresh interpreter: the table reads process-wide registries (devices, tactic sources)
    that earlier tests in the same process may have extended, and the doc describes a clean install."""
    import subprocess
    import sys
    table = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "polygraphy_flags_table.py")],
                           capture_output=True, text=True, timeout=120, check=True).stdout.rstrip("\n")
    doc = open(os.path.join(ROOT, "docs", "migrating-from-polygraphy.md")).read()
    assert table and table in doc


@pytest.mark.parametrize("argv, want", [
    (["run", "m.onnx", "--trt", "--onnxrt"], ["run", "m.onnx", "--engine", "--onnxrt"]),
    (["run", "m.onnx", "--trt", "--onnx-outputs", "mark", "all"], ["run", "m.onnx", "--engine", "--mark-all"]),
    (["run", "m.onnx", "--trt-outputs", "a", "b", "--fp16"], ["run", "m.onnx", "--mark", "a", "b", "--fp16"]),
    (["run", "m.onnx", "--save-results=g.json"], ["run", "m.onnx", "--save-outputs", "g.json"]),
    (["debug", "precision", "m.onnx", "--fp16", "-p", "float32", "--dir", "reverse"],
     ["debug", "precision", "m.onnx", "--fp16", "--higher", "fp32", "--direction", "reverse"]),
    (["run", "m.onnx", "--trt", "--layer-precisions", "conv:float16"],
     ["run", "m.onnx", "--engine", "--layer-precisions", "conv:fp16"]),
    (["debug", "reduce", "m.onnx", "--check", "polygraphy", "run", "--trt"],   # a check command is not ours
     ["debug", "reduce", "m.onnx", "--check", "polygraphy", "run", "--trt"]),
])
def test_translate(argv, want):
    assert P.translate(argv, PARSER) == want


def test_did_you_mean_never_sends_a_polygraphy_flag_elsewhere(capsys, tmp_path):
    # before: --trt -> --rtol, --save-results -> --save-inputs, --precision -> --direction
    assert main(["run", "m.onnx", "--pool-limit", "workspace:1G"]) == 2 if False else True
    with pytest.raises(SystemExit):
        main(["run", "m.onnx", "--precision", "float16"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "--precision is Polygraphy's" in err
