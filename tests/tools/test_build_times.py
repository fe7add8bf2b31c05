"""tools/build_times.py: its table and limits verdict, and a bad model name (exit 2, before any build)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tools.build_times import main, table  # noqa: E402


def _build(seconds, cands):
    return {"seconds": seconds, "candidates_timed": cands, "timed_runs": 4 * cands, "layers": 10, "rc": 0}


def test_the_table_names_the_models_that_miss_the_limits():
    rows = [{"model": "a", "cold": _build(12.0, 50), "warm": _build(2.0, 0)},
            {"model": "b", "cold": _build(75.0, 400), "warm": _build(3.0, 0)},
            {"model": "c", "cold": {"error": "exit 1: boom"}, "warm": None},
            {"model": "d", "unavailable": "not cached"}]
    text = table(rows, 60, 10)
    lines = text.splitlines()
    assert lines[2] == "| a | 12.0 | 2.0 | 50 / 0 | 200 / 0 | 10 | yes |"
    assert lines[3].startswith("| b | 75.0 | 3.0 | 400 / 0 |") and lines[3].endswith("| NO |")
    assert "exit 1: boom" in lines[4] and "not available" in lines[5]
    assert lines[-1] == "limits: cold <= 60 s, warm <= 10 s; missed by ['b', 'c']"


def test_an_unknown_model_is_refused(capsys):
    assert main(["--models", "no-such-model", "--device", "cpu"]) == 2
    assert "unknown model(s) ['no-such-model']" in capsys.readouterr().err


def test_the_breakdown_lists_each_builds_work_largest_first():
    from tools.build_times import breakdown
    cold = dict(_build(136.4, 343), breakdown={"pass: layout": [1, 127.46], "cuDNN conv plans built": [690, 124.7],
                                               "NVRTC compiles": [4, 2.92], "pass: memory plan": [1, 0.0]})
    rows = [{"model": "yolov8n", "cold": cold, "warm": _build(9.0, 0)}]
    assert breakdown(rows) == ("yolov8n cold (136.4 s): pass: layout 1x 127.46 s; cuDNN conv plans built 690x "
                               "124.7 s; NVRTC compiles 4x 2.92 s")


def test_the_breakdown_says_what_cuDNN_compiles_cost_and_the_slowest_plan_builds():
    from tools.build_times import breakdown
    fam = "('float32', True, False, (('bias',), ('act', 'SILU', 0.0, 0.0)), (3, 3), 1, (8, 8))"
    cold = dict(_build(13.8, 194), breakdown={"pass: layout": [1, 12.41]},
                cudnn_compiles={"('float32', True, False)": [3, 1.9087, 0.8479]},
                cudnn_slowest_plans=[[fam, 15, "eng8", True, 0.8479, True], [fam, 3, "eng11_k2=4_k3=0", False,
                                                                               0.0002, True]])
    text = breakdown([{"model": "yolov8n", "cold": cold, "warm": None}])
    assert "cuDNN runtime compiles ('float32', True, False): 3x 1.9087 s (longest 0.8479 s)" in text
    assert "slow cuDNN plan build: 0.8479 s built plan 15 eng8 (runtime-compiled: True)" in text


def test_a_stopped_build_is_not_an_exception_the_builder_swallows():
    from tools.build_times import Stopped
    assert not issubclass(Stopped, Exception)
