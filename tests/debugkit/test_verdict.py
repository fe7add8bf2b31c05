"""The one verdict and its one exit-code rule (debugkit/verdict.py)."""
from debugkit.verdict import Compared, Verdict, combine, exit_code, search_verdict


def _compared(**kw):
    base = dict(outputs=1, iterations=1, inputs=1, comparisons=1, finite=1)
    base.update(kw)
    return Compared(**base)


def test_the_rule():
    assert Verdict("run", compared=_compared()).exit_code == 0
    assert Verdict("run", ["y: 3 of 4 elements exceed"], _compared()).exit_code == 1
    # nothing compared is never a pass: no input, no comparison, no finite pair
    for c in (Compared(), _compared(comparisons=0, finite=0), _compared(finite=0)):
        v = Verdict("run", compared=c)
        assert v.exit_code == 1 and v.status == "FAILED" and v.reasons()[0].startswith("nothing compared")
    # one source, not asked to compare: ran on an input = passed; ran on none = nothing compared
    assert Verdict("run", compared=Compared(iterations=1), comparing=False).exit_code == 0
    assert Verdict("run", compared=Compared(), comparing=False).exit_code == 1
    assert Verdict("run", error="bad input", compared=_compared()).exit_code == 2
    assert Verdict("run", internal="bug", error="bad input").exit_code == 3
    assert exit_code(Verdict("run", compared=_compared())) == 0


def test_failed_verdict_always_says_why_and_round_trips():
    for v in (Verdict("run"), Verdict("run", ["differ"], _compared()), Verdict("run", error="no model")):
        doc = v.to_json()
        assert doc["passed"] is False and doc["reasons"], doc
        back = Verdict.from_json(doc)
        assert back.exit_code == v.exit_code and back.reasons() == v.reasons()
    one_source = Verdict("run", compared=Compared(iterations=1), comparing=False)
    assert Verdict.from_json(one_source.to_json()).exit_code == 0
    ok = Verdict("run", compared=_compared(), fingerprint="abc")
    assert Verdict.from_json(ok.to_json()).passed and ok.to_json()["fingerprint"] == "abc"


def test_combine_passes_only_when_every_part_passed():
    good = Verdict("check", compared=_compared())
    bad = Verdict("check", ["y differs"], _compared())
    v = combine([good, bad, good], "debug build", label=lambda i: f"build {i}")
    assert v.exit_code == 1 and v.reasons() == ["build 1: y differs"] and v.compared.comparisons == 3
    assert combine([good, good]).exit_code == 0
    assert combine([]).exit_code == 1   # nothing ran
    assert combine([good, Verdict("check", error="unreadable")]).exit_code == 2
    assert Verdict.from_exit_code(0).exit_code == 0 and Verdict.from_exit_code(2, "x").status == "ERROR"
    assert Verdict.from_exit_code(1).status == "FAILED" and Verdict.from_exit_code(3).status == "INTERNAL ERROR"


def test_a_search_answer_is_a_verdict():
    """debug tactics/precision/reduce: an answer found passes (0), none found fails (1) with the reason, and the
    verdict round-trips through JSON (sweep reads it back from precision.json)."""
    found = search_verdict("debug tactics", True, "2 guilty layer(s)")
    assert found.exit_code == 0 and found.status == "PASSED" and found.details == {"answer": "2 guilty layer(s)"}
    none = search_verdict("debug tactics", False, "0 guilty layer(s)", "no culprit found")
    assert none.exit_code == 1 and none.reasons() == ["no culprit found"]
    back = Verdict.from_json(none.to_json())
    assert back.exit_code == 1 and back.reasons() == ["no culprit found"]
    assert Verdict.from_json(found.to_json()).exit_code == 0


def test_sweep_reads_a_precision_task_verdict_from_its_answer_file(tmp_path):
    import json

    from debugkit.cli.sweep import _task_summary
    v = search_verdict("debug precision", True, "3 of 40 layer(s) in fp32")
    (tmp_path / "precision.json").write_text(json.dumps({"layer_precisions": {"a": "fp32"}, "layers": 40,
                                                         "probes": 9, "verdict": v.to_json()}))
    row = _task_summary("precision", str(tmp_path), 0, None)
    assert row["status"] == "FOUND" and row["verdict"]["details"] == {"answer": "3 of 40 layer(s) in fp32"}
    row = _task_summary("precision", str(tmp_path), 2, "bad model")   # an exit code the file does not match
    assert row["status"] == "ERROR" and row["reasons"] == ["bad model"]
