"""The one table of what a command reads and writes (debugkit/options.py PATH_OPTIONS), walked over every command:
every option is declared as a path (with its role) or as a value, and every path a command writes (outputs, caches
it rewrites, logs it appends to, folders it fills) is checked against every path it reads, so a new flag cannot
escape the "output == input is exit 2" rule (issue 22)."""
import argparse
import os

import numpy as np
import pytest

from debugkit.cli.file_claims import claim, claimed_files
from debugkit.cli.main import build_parser
from debugkit.options import PATH_OPTIONS, VALUE_OPTIONS, path_role
from native.errors import OutputFileError

WRITES = ("write", "update", "append", "write-dir")


def _commands():
    """(command name, leaf parser, {subcommand dest: name}) of every command."""
    out = []

    def walk(parser, name, dests):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append((name, parser, dests))
        for a in subs:
            for n, sp in a.choices.items():
                walk(sp, (name + " " + n).strip(), {**dests, a.dest: n})

    walk(build_parser(), "", {})
    return out


COMMANDS = _commands()


def _options(parser):
    return [a for a in parser._actions if a.dest != "help" and not isinstance(a, argparse._SubParsersAction)
            and a.nargs != 0]


def _namespace(parser, dests, **values):
    ns = {a.dest: a.default for a in parser._actions if a.dest != "help" and a.default is not argparse.SUPPRESS}
    ns.update(parser._defaults)
    ns.update(dests)
    for a in parser._actions:
        if a.dest in values:
            v = values[a.dest]
            ns[a.dest] = [v] if a.nargs in ("+", "*") or isinstance(a, argparse._AppendAction) else v
    return argparse.Namespace(**ns)


def test_every_option_of_every_command_is_declared_a_path_or_a_value():
    assert not set(PATH_OPTIONS) & VALUE_OPTIONS
    undeclared = {(cmd, a.dest) for cmd, p, _ in COMMANDS for a in _options(p)
                  if a.dest not in PATH_OPTIONS and a.dest not in VALUE_OPTIONS}
    assert not undeclared, ("options that name neither a declared path nor a value: declare each in "
                            f"debugkit/options.py PATH_OPTIONS (with its role) or VALUE_OPTIONS: {sorted(undeclared)}")


def _pairs():
    rows = []
    for cmd, parser, dests in COMMANDS:
        opts = {a.dest for a in _options(parser)}
        writes = sorted(d for d in opts if path_role(d, cmd) and path_role(d, cmd).role in WRITES
                        and d != "save_external_data")
        reads = sorted(d for d in opts if path_role(d, cmd) and path_role(d, cmd).role == "read")
        rows += [(cmd, w, r) for w in writes for r in reads]
    return rows


PAIRS = _pairs()


def test_the_matrix_covers_every_writing_command():
    cmds = {c for c, _, _ in PAIRS}
    assert {"convert", "run", "bench", "surgeon sanitize", "surgeon extract", "surgeon insert", "debug reduce",
            "debug precision", "debug tactics", "debug build", "debug repeat", "check lint", "inspect capability",
            "sweep"} <= cmds, cmds
    assert ("run", "gen_script", "model") in PAIRS and ("debug tactics", "output", "good_tactics") in PAIRS
    assert len(PAIRS) > 200


def test_each_write_path_is_checked_against_each_read_path(tmp_path):
    """For every command, every written path (file, cache, log, folder) given the same path as every read option
    is refused before any work, naming both options."""
    shared_file = tmp_path / "shared.json"
    shared_file.write_text("{}")
    shared_dir = tmp_path / "shared_dir.json"   # .json: --layer-precisions counts only .json entries as files
    shared_dir.mkdir()
    escaped = []
    for cmd, write, read in PAIRS:
        parser, dests = next((p, d) for c, p, d in COMMANDS if c == cmd)
        role = path_role(write, cmd)
        shared = str(shared_dir if role.role == "write-dir" else shared_file)
        args = _namespace(parser, dests, **{write: shared, read: shared})
        try:
            with claim(args):
                escaped.append((cmd, write, read))
        except OutputFileError as e:
            msg = str(e)
            if not (role.flag in msg and path_role(read, cmd).flag in msg and "also this command's" in msg):
                escaped.append((cmd, write, read, msg))
    assert not escaped, f"writes not checked against reads: {escaped}"


def test_companion_outputs_are_claimed_too(tmp_path):
    """Files written beside the main output: debug reduce's <-o>_inputs.h5, surgeon's --save-external-data."""
    p = build_parser()
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "r_inputs.h5").write_bytes(b"x")
    args = p.parse_args(["debug", "reduce", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "r.onnx"),
                         "--load-inputs", str(tmp_path / "r_inputs.h5")])
    outs = {flag: path for flag, path, _ in claimed_files(args)["outputs"]}
    assert outs["-o's inputs file"] == str(tmp_path / "r_inputs.h5")
    with pytest.raises(OutputFileError, match="-o's inputs file .* also this command's --load-inputs"):
        with claim(args):
            pass
    args = p.parse_args(["surgeon", "sanitize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"),
                         "--save-external-data", "m.onnx"])
    with pytest.raises(OutputFileError, match="--save-external-data .* also this command's model"):
        with claim(args):
            pass
    args = p.parse_args(["surgeon", "sanitize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"),
                         "--save-external-data"])
    assert ("--save-external-data", str(tmp_path / "o.onnx.data"), False) in claimed_files(args)["outputs"]


def test_the_external_weights_of_the_model_are_inputs_too(tmp_path):
    """surgeon sanitize m.onnx -o o.onnx --save-external-data w.bin where w.bin holds m.onnx's weights: refused
    (the rename would leave m.onnx pointing into the new weights)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 64])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "o.onnx").write_bytes(b"old")
    args = build_parser().parse_args(["surgeon", "sanitize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"),
                                      "--save-external-data", "w.bin"])
    with pytest.raises(OutputFileError, match="--save-external-data .*w.bin is also this command's model's external"):
        with claim(args):
            pass


def test_debug_precision_files_beside_its_output_are_claimed(tmp_path):
    """-o p.json also writes p.html, p_sensitivity.json/.svg, the probe log p_probes.jsonl (the default
    '<output>_probes.jsonl') and, with --int8 and no cache given, p_calibration.cache: each is refused when it is an
    input of the same command."""
    p = build_parser()
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    out = str(tmp_path / "p.json")
    files = claimed_files(p.parse_args(["debug", "precision", str(model), "--int8", "-o", out]))
    written = {path for _, path, _ in files["outputs"]} | {path for _, path in files["updates"]}
    stem = str(tmp_path / "p")
    assert {out, stem + ".html", stem + "_sensitivity.json", stem + "_sensitivity.svg", stem + "_probes.jsonl",
            stem + "_calibration.cache"} <= written, written
    (tmp_path / "p_sensitivity.json").write_text("{}")
    args = p.parse_args(["debug", "precision", str(model), "--fp16", "-o", out,
                         "--layer-precisions", stem + "_sensitivity.json"])
    with pytest.raises(OutputFileError, match="sensitivity table .* also this command's --layer-precisions"):
        with claim(args):
            pass
