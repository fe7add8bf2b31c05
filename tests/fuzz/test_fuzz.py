"""The fuzzer in CI: a short seeded run per target (every case in a worker process under RLIMIT_AS and a time
limit) must find no crash, no hang, no exception outside DebugkitError and no case over 10 s. At length:
`python tools/fuzz.py --minutes 20 --target T`."""
import pytest

from tests.children import HANG_GUARD_S
from tests.fuzz.fuzzer import TARGETS, CaseMaker, Worker, fuzz

# cases per target: ~10 s of the CI budget in all on a loaded 2-core machine
SHORT_RUN = {"onnx-bytes": 300, "onnx-structure": 150, "plan-bytes": 300, "plan-structure": 200,
             "hdf5-structure": 30}


@pytest.mark.parametrize("target", TARGETS)
def test_short_fuzz_run_finds_nothing(target):
    report = fuzz(target, seed=7, iterations=SHORT_RUN[target], case_limit=10.0)
    assert report.iterations == SHORT_RUN[target]
    assert report.failures == 0, report.summary()
    # the mutants reach the pipeline: some are refused with a DebugkitError, some still load
    assert report.outcomes["rejected"] > 0, report.summary()
    if target != "plan-bytes":  # most byte flips of a checksummed plan stop at the checksum, as they should
        assert report.outcomes["ok"] + report.outcomes["not-run"] > 0, report.summary()


def test_cases_are_a_function_of_target_seed_and_index():
    """ONNX cases are reproducible anywhere; plan cases given the seed plans (built here, so tactic timings may
    differ between machines: --save keeps the exact bytes of every finding)."""
    for target in TARGETS:
        a = CaseMaker(target, 3)
        b = CaseMaker(target, 3) if target.startswith("onnx") else a
        assert a.make(17) == b.make(17)
        assert a.make(17) != a.make(18)


def test_a_crashing_case_is_counted_not_fatal():
    w = Worker("selftest-crash", memory_mb=2048, max_tensor_mb=16)
    try:
        outcome, detail, *_ = w.run(b"", hard_limit=HANG_GUARD_S)
        assert outcome == "crash" and "signal 11" in detail
        outcome, *_ = w.run(b"", hard_limit=HANG_GUARD_S)  # the worker was replaced and answers again
        assert outcome == "crash"
    finally:
        w.close()


def test_a_runaway_allocation_is_contained():
    """RLIMIT_AS turns an allocation far beyond the limit into a MemoryError inside the worker, not a dead machine."""
    w = Worker("onnx-structure", memory_mb=1024, max_tensor_mb=4096)
    try:
        import onnx
        from onnx import TensorProto as T
        from onnx import helper as h
        g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [1024, 1024, 1024])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
        data = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
        outcome, detail, *_ = w.run(data, hard_limit=HANG_GUARD_S)
        assert outcome in ("rejected", "not-run", "bug"), (outcome, detail)   # not 'crash', not 'hang'
        assert onnx  # the 4 GiB input never materialised in this process
    finally:
        w.close()


def test_a_blocked_case_is_a_hang_at_the_wall_limit():
    """A case that sleeps uses no CPU: the wall limit ends it, on time (it is polled, not waited out)."""
    w = Worker("selftest-sleep", memory_mb=2048, max_tensor_mb=16, cpu_limit=30)
    try:
        r = w.run(b"3600", hard_limit=2)
        assert r.outcome == "hang" and "no answer after" in r.detail, r
        assert 2 <= r.wall < 5, r   # the poll fires on time; restarting the worker (imports) is not timed here
        assert r.cpu < 1, r   # it slept: its CPU time is read from /proc before the kill
        assert w.run(b"0", hard_limit=HANG_GUARD_S).outcome == "ok"   # replaced, answers again
    finally:
        w.close()


def test_a_spinning_case_is_stopped_by_the_cpu_backstop():
    """RLIMIT_CPU, set per case relative to the worker's CPU time so far, kills a runaway case (SIGXCPU). The
    proof is in CPU seconds (the dead worker's, from the rusage of reaped children): a loaded machine stretches the
    wall time of 1-2 CPU seconds without limit, so the wall limit here is only a hang guard."""
    import resource
    w = Worker("selftest-spin", memory_mb=2048, max_tensor_mb=16, cpu_limit=1)
    try:
        first = w.run(b"0.1", hard_limit=HANG_GUARD_S)  # under the limit, and it counts toward the worker's total
        assert first.outcome == "ok" and 0.05 < first.cpu < 1, first
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = w.run(b"3600", hard_limit=HANG_GUARD_S)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert r.outcome == "hang" and "SIGXCPU" in r.detail, r
        spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        assert 1 <= spent < 10, spent   # the whole worker: its start, 0.1 s, then about 1-2 s of spinning
    finally:
        w.close()


def test_the_case_limit_is_checked_against_cpu_time_not_wall_time():
    from tests.fuzz.fuzzer import CaseResult, Report
    report = Report("onnx-bytes", case_limit=10.0)
    report.add(1, CaseResult("rejected", "ParseError", cpu=0.4, wall=12.5))  # waited for a core: not slow
    report.add(2, CaseResult("ok", "", cpu=10.5, wall=11.0))                  # computed too long: slow
    assert report.slow == [(2, 10.5, 11.0)] and report.failures == 1
    line = report.summary().splitlines()[0]
    assert "slowest case 10.50 s CPU (case 2), 12.50 s wall (case 1)" in line, line
    assert "over the case limit (10 s CPU) 1" in line, line
