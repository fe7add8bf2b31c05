"""--tactic-sources as trtexec reads it: NAME,... restricts, -NAME excludes, +NAME adds; unknown names and
exclusions that leave a layer kind nothing are usage errors."""
import json

import pytest

from backends.engine.builder.tactic_sources import allowed, normalise
from debugkit.cli.main import main
from native.errors import UsageError
from native.tactics import tactics_for
from tests.tactics.models import conv_chain, save

KNOWN = {"a", "b", "c"}


@pytest.mark.parametrize("text, want", [
    ("a,b", {"a", "b"}), ("a,+b", {"a", "b"}), ("+a", None), ("-a", {"-a"}), ("a, -b", {"a", "-b"}),
    ("+a,-b", {"-b"}), (" ", None)])
def test_normalise(text, want):
    assert normalise(text, KNOWN) == want


@pytest.mark.parametrize("text, match", [("a,-a", r"both enable and disable \['a'\]"),
                                         ("-nope", r"unknown tactic name\(s\) \['nope'\]; registered tactics: a, b, c")])
def test_bad_sources_are_usage_errors(text, match):
    with pytest.raises(UsageError, match=match):
        normalise(text, KNOWN)


def test_allowed_per_kind():
    conv = tactics_for("Convolution")
    names = lambda ts: [t.name for t in ts]   # noqa: E731
    kept, note = allowed("Convolution", conv, {"winograd-f2x3", "blas"})
    assert names(kept) == ["winograd-f2x3"] and note is None
    kept, note = allowed("Softmax", tactics_for("Softmax"), {"winograd-f2x3"})
    assert names(kept) == ["numpy", "online"] and "Softmax layers keep all of theirs" in note
    kept, note = allowed("Convolution", conv, {"-im2col-gemm", "-winograd-f2x3"})
    assert names(kept) == [n for n in names(conv) if n not in ("im2col-gemm", "winograd-f2x3")]
    assert "excluded" in note
    with pytest.raises(UsageError, match="exclude every Softmax tactic"):
        allowed("Softmax", tactics_for("Softmax"), {"-numpy", "-online"})


@pytest.fixture
def model(tmp_path):
    return save(conv_chain(), tmp_path)


def test_cli_minus_plus_and_plain(model, tmp_path, capsys):
    t = str(tmp_path / "t.json")
    # -NAME as a separate argument (argparse would take it for an option)
    assert main(["convert", model, "-o", str(tmp_path / "a.plan"), "--tactic-sources", "-im2col-gemm,-winograd-f2x3",
                 "--save-tactics", t]) == 0
    doc = json.load(open(t))
    conv = [e["tactic"] for e in doc["layers"].values() if e["kind"] == "Convolution"]
    assert len(conv) == 7 and not {"im2col-gemm", "winograd-f2x3"} & set(conv)
    assert main(["convert", model, "-o", str(tmp_path / "b.plan"), "--tactic-sources=shifted-gemm,+winograd-f2x3",
                 "--save-tactics", t]) == 0
    conv = [e["tactic"] for e in json.load(open(t))["layers"].values() if e["kind"] == "Convolution"]   # (the
    # MatMul's tactic is timed: packed-gemm-t or blas)
    assert len(conv) == 7 and set(conv) <= {"shifted-gemm", "winograd-f2x3"}


def test_cli_errors_exit_2(model, tmp_path, capsys):
    plan = tmp_path / "a.plan"
    assert main(["convert", model, "-o", str(plan), "--tactic-sources", "-nope"]) == 2
    assert "unknown tactic name(s) ['nope']" in capsys.readouterr().err
    assert main(["convert", model, "-o", str(plan), "--tactic-sources", "blas,-blas"]) == 2
    assert "both enable and disable ['blas']" in capsys.readouterr().err
    everything = ",".join("-" + t.name for t in tactics_for("Convolution"))
    assert main(["convert", model, "-o", str(plan), "--tactic-sources", everything]) == 2
    assert "exclude every Convolution tactic" in capsys.readouterr().err
    assert not plan.exists()


def test_verbose_line_for_kinds_that_keep_theirs(model, tmp_path, capsys):
    assert main(["convert", model, "-o", str(tmp_path / "a.plan"), "--tactic-sources", "winograd-f2x3", "-vv"]) == 0
    out = capsys.readouterr()
    assert "name no MatrixMultiply tactic; MatrixMultiply layers keep all of theirs: ['blas'," in out.out + out.err
    assert main(["convert", model, "-o", str(tmp_path / "a.plan"), "--tactic-sources", "-blas", "-vv"]) == 0
    out = capsys.readouterr()
    assert "MatrixMultiply: ['blas'] excluded, ['packed-gemm'," in out.out + out.err


def test_names_are_the_build_devices_tactics():
    """--tactic-sources names the tactics of the device the build runs on: a DLA build's `dla:*` (a CUDA build's
    `cublas`, `host:numpy`) were refused as unknown because the CLI checked every name against the CPU's."""
    from debugkit.options import _parse_sources
    assert _parse_sources("dla:numpy,-dla:blas", "dla") == {"dla:numpy", "-dla:blas"}
    assert _parse_sources("-blas", "cpu") == {"-blas"}
    with pytest.raises(UsageError, match=r"unknown tactic name\(s\) \['blas'\]; registered tactics: dla:"):
        _parse_sources("-blas", "dla")
