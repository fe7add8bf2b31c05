"""tools/dispatch_bench.py: the chain keeps one layer per ONNX node (fusion off) and the report has every mode;
tools/benchmark.py's corpus table gives one row per model and the median ratio."""
import time

from tools import benchmark, dispatch_bench


def test_chain_keeps_every_layer_and_reports_each_mode():
    res = dispatch_bench.measure(20, 2, clock=time.thread_time)
    assert res["layers"] == 20
    for k in ("plain", "taps", "profiler"):
        assert res[f"{k}_us"] > 0 and f"{k}_overhead_us" in res
    assert res["bare_kernels_us"] > 0


def test_bad_arguments_exit_2(capsys):
    assert dispatch_bench.main(["--layers", "0"]) == 2
    assert "--layers" in capsys.readouterr().err


def test_corpus_table_rows_and_median():
    text = benchmark.corpus_table([("a", 2.0, 1.0, ""), ("b", 3.0, 2.0, ""), ("c", None, None, "failed: X"),
                                   ("d", 1.0, 1.0, "")], 20)
    lines = text.splitlines()
    assert "| a | 2.000 | 1.000 | 2.00 |" in lines and "| c | - | - | failed: X |" in lines
    assert lines[-1].startswith("median ours / ORT over 3 models: 1.50 (worst 2.00)")
