"""tools/cpu_time_bench.py: blocks alternate between the two contenders and the medians are per call; a model that
is not in the manifest gets a row saying so instead of stopping the table."""
from tools import cpu_time_bench


def test_blocks_alternate_and_medians_are_per_call():
    order = []
    ours, ort = cpu_time_bench.time_pair(lambda: order.append("o"), lambda: order.append("r"), rounds=4, calls=3)
    assert order == ["o"] * 3 + ["r"] * 3 + ["r"] * 3 + ["o"] * 3 + ["o"] * 3 + ["r"] * 3 + ["r"] * 3 + ["o"] * 3
    assert ours >= 0.0 and ort >= 0.0


def test_unknown_model_gets_a_row(capsys):
    cpu_time_bench.main(["--models", "no_such_model"])
    out = capsys.readouterr().out
    assert "| no_such_model | not in the corpus manifest | | |" in out
    assert out.splitlines()[1].startswith("| model | ours ms (CPU)")
