"""Every subtool: -v/-q/--log-file/--no-color, its own usage on errors, did-you-mean, no abbreviations, one shape
syntax, unknown input names rejected."""
import argparse
import os

import pytest

from debugkit.cli import _args
from debugkit.cli.main import build_parser
from native.errors import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")


def _leaf_parsers(parser):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for a in subs:
        for child in dict.fromkeys(a.choices.values()):
            yield from _leaf_parsers(child)


def test_every_command_has_the_common_options_and_no_abbreviations():
    leaves = [p for p in _leaf_parsers(build_parser()) if p.prog != "debugkit"]
    progs = {p.prog for p in leaves}
    assert {"debugkit run", "debugkit convert", "debugkit inspect model", "debugkit inspect data",
            "debugkit surgeon sanitize", "debugkit surgeon extract", "debugkit surgeon insert",
            "debugkit check lint"} <= progs
    for p in leaves:
        flags = {o for a in p._actions for o in a.option_strings}
        assert {"-v", "-q", "--log-file", "--no-color"} <= flags, p.prog
        assert p.allow_abbrev is False, p.prog


def test_unknown_flag_gets_the_subtools_usage_and_a_suggestion(cli):
    with pytest.raises(SystemExit) as e:
        cli("run", EXAMPLE, "--engine", "--onnxrt", "--atl", "1e-3")
    assert e.value.code == 2


def test_unknown_flag_message(capsys):
    from debugkit.cli.main import main
    with pytest.raises(SystemExit):
        main(["surgeon", "sanitize", EXAMPLE, "-o", "x.onnx", "--fold-constant"])
    err = capsys.readouterr().err
    assert "usage: debugkit surgeon sanitize" in err
    assert "did you mean --fold-constants" in err


def test_abbreviated_flags_are_refused(capsys):
    from debugkit.cli.main import main
    with pytest.raises(SystemExit):
        main(["run", EXAMPLE, "--eng", "--onnxrt"])
    assert "unrecognized arguments: --eng" in capsys.readouterr().err


def test_log_file_quiet_and_reset(cli, tmp_path):
    from native.logger import G_LOGGER
    before = (G_LOGGER.min_severity, G_LOGGER.stream, G_LOGGER.formatter)
    log = tmp_path / "log.txt"
    code, out, err = cli("run", EXAMPLE, "--engine", "--onnxrt", "-v", "--log-file", log, "--no-color")
    assert code == 0
    text = log.read_text()
    assert "[I]" in text and "\x1b[" not in text
    assert (G_LOGGER.min_severity, G_LOGGER.stream, G_LOGGER.formatter) == before   # nothing leaks to later commands
    code, _, err = cli("run", EXAMPLE, "--onnxrt", "--input-shapes", "nope:[1,8]", "--log-file", log)
    assert code == 2 and "debugkit run: error: --input-shapes names unknown input(s) ['nope']" in log.read_text()


def test_quiet_hides_warnings(cli, chain):
    code, _, err = cli("run", chain, "--onnxrt")          # dynamic input: a warning says dims default to 1
    assert code == 0 and "[W] input 'x' has dynamic shape" in err
    code, _, err = cli("run", chain, "--onnxrt", "-q")
    assert code == 0 and "[W]" not in err


def test_quiet_silences_progress_bars(cli, monkeypatch):
    progress = pytest.importorskip("native.progress")
    seen = []
    monkeypatch.setattr(progress, "set_quiet", lambda q=True: seen.append(q))
    cli("inspect", "model", EXAMPLE, "-q")
    assert seen[:1] == [True] and seen[-1] is False    # set for the command, undone after it


def test_verbose_and_quiet_move_one_level_each():
    from native.logger import G_LOGGER, Severity
    p = build_parser()
    for argv, level in ((["-v"], Severity.INFO), (["-vv"], Severity.VERBOSE), (["-q"], Severity.ERROR),
                        (["-v", "-q"], Severity.WARNING)):
        _args.apply_common_args(p.parse_args(["inspect", "model", EXAMPLE] + argv))
        try:
            assert G_LOGGER.min_severity == level, argv
        finally:
            _args.reset_common_args()
    _args.apply_common_args(p.parse_args(["surgeon", "sanitize", EXAMPLE, "-o", "x", "-q"]))   # default info
    try:
        assert G_LOGGER.min_severity == Severity.WARNING
    finally:
        _args.reset_common_args()


@pytest.mark.parametrize("text", ["x:[1,3,224,224]", "x:1x3x224x224"])
def test_one_shape_syntax(text):
    assert _args.parse_shape_list([text]) == {"x": (1, 3, 224, 224)}


def test_shape_syntax_details():
    assert _args.parse_shape_list(["a:b:[2,3]", "s:[]", "y:7"]) == {"a:b": (2, 3), "s": (), "y": (7,)}
    assert _args.parse_shape_list("x:[1,3],y:2x2") == {"x": (1, 3), "y": (2, 2)}
    assert _args.parse_shape_list(["x:[N,3]"], symbolic=True) == {"x": ("N", 3)}
    for bad in ["x", "x:[1,a]", "x:1xax2", "x:[-1,2]", ":[1]"]:
        with pytest.raises(UsageError):
            _args.parse_shape_list([bad])


def test_surgeon_and_convert_take_both_spellings(tmp_path, cli):
    from debugkit.surgeon.shapes import parse_shape_spec
    assert parse_shape_spec(["x:1x4", "y:[N,16]"]) == {"x": [1, 4], "y": ["N", 16]}
    from debugkit.options import parse_profiles as _parse_profiles
    assert _parse_profiles(["x:1x4:2x4:8x4"]) == _parse_profiles(["x:[1,4]:[2,4]:[8,4]"]) == \
        {"x": ((1, 4), (2, 4), (8, 4))}


def test_unknown_input_names_rejected_everywhere(cli, tmp_path, capsys):
    code, _, err = cli("run", EXAMPLE, "--onnxrt", "--input-shapes", "X:1x4")
    assert code == 2 and "unknown input(s) ['X']" in err
    code, _, err = cli("convert", EXAMPLE, "-o", tmp_path / "e.plan", "--input-shapes", "X:1x4")
    assert code == 2 and "unknown input(s) ['X']" in err and "did you mean 'x'" in err
    import tools.benchmark as bench
    assert bench.main([EXAMPLE, "--shapes", "X:1x4", "--iterations", "1"]) == 2
    assert "unknown input(s) ['X']" in capsys.readouterr().err
    assert bench.parse_shapes(["x:1x4", "y:[2,3],z:5"]) == {"x": [1, 4], "y": [2, 3], "z": [5]}
