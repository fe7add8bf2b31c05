"""Shared test setup: the `cuda` marker skips without a GPU; conformance prints pass counts per op; child processes
the tests left running are killed when the session ends; DEBUGKIT_TEST_RANDOM_TACTIC_TIMES=SEED makes every tactic
timing random (a test that depends on which tactic wins fails then)."""
import collections
import os

import pytest

# Graph.lint() after every builder pass in every build the suite makes (docs/architecture.md, "Pass manager")
os.environ.setdefault("DEBUGKIT_LINT", "1")
# compiled CUDA kernels kept for this run only (the suite neither reads nor fills the user's kernel cache); its
# workers and child processes inherit it
if "DEBUGKIT_KERNEL_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["DEBUGKIT_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="debugkit_test_kernels_")
    atexit.register(shutil.rmtree, os.environ["DEBUGKIT_KERNEL_CACHE"], True)


def pytest_configure(config):
    """Models made with onnx.helper.make_model get the IR version their opsets need and an opset the installed
    onnxruntime reads, whatever the installed releases (tests/onnx_compat.py); undone at the end of the run."""
    from tests import onnx_compat
    onnx_compat.install()
    _random_tactic_times(os.environ.get("DEBUGKIT_TEST_RANDOM_TACTIC_TIMES"))


def pytest_unconfigure(config):
    from tests import onnx_compat
    onnx_compat.uninstall()
    _random_tactic_times(None)


@pytest.fixture(autouse=True)
def _jit_as_installed(request):
    """A `jit`-marked test (its subject is the numba kernels) runs with the JIT as installed: a DEBUGKIT_JIT=0 the
    suite was started with (to test the numpy path everywhere else) is set aside for it, and back afterwards."""
    if request.node.get_closest_marker("jit") is None or os.environ.get("DEBUGKIT_JIT") is None:
        yield
        return
    from native import config
    saved = os.environ.pop("DEBUGKIT_JIT")
    config.reload()
    try:
        yield
    finally:
        os.environ["DEBUGKIT_JIT"] = saved
        config.reload()


_REAL_TIME = []


def _random_tactic_times(seed):
    """DEBUGKIT_TEST_RANDOM_TACTIC_TIMES=SEED: every host-clock tactic timing in this process (Device.time: CPU,
    emulated DLA; the CUDA device times with events and keeps them) runs the tactic and reports a seeded random time
    instead of the measured one: the worst a loaded machine can do to a build. A test
    that passes only when a particular tactic wins the timing fails in this mode; build what you inspect with a
    fixed tactic choice (heuristic, --tactic-sources, a replay file). Tests whose subject is timing itself carry
    the `timing` marker and are skipped. Child processes time as usual. None: the real clock again."""
    import random

    from native.device import Device
    if seed is None:
        if _REAL_TIME:
            Device.time = _REAL_TIME.pop()
        return
    rng = random.Random(int(seed))

    def random_time(self, fn, stream=None):
        fn()
        self.synchronize(stream)
        return rng.uniform(0.001, 10.0)
    _REAL_TIME.append(Device.time)
    Device.time = random_time


def _cuda_available():
    try:
        from native.cuda import available
        return available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if os.environ.get("DEBUGKIT_TEST_RANDOM_TACTIC_TIMES"):
        skip = pytest.mark.skip(reason="its subject is tactic timing; timings are random in this run")
        for item in items:
            if "timing" in item.keywords:
                item.add_marker(skip)
    if not any("cuda" in item.keywords for item in items):
        return
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with cuda-python")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


_OP_RESULTS = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report):
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    op = dict(report.user_properties).get("onnx_op")
    if op is None:
        return
    outcome = "xfailed" if hasattr(report, "wasxfail") and report.outcome == "skipped" else report.outcome
    if hasattr(report, "wasxfail") and report.outcome == "passed":
        outcome = "passed"
    _OP_RESULTS[op][outcome] += 1


def _conformance_summary(terminalreporter):
    if not _OP_RESULTS:
        return
    tr = terminalreporter
    tr.section("ONNX node conformance: pass count per op")
    total = collections.Counter()
    for op in sorted(_OP_RESULTS):
        c = _OP_RESULTS[op]
        total.update(c)
        tr.write_line(f"{op:32s} passed {c['passed']:4d}  failed {c['failed']:4d}  xfailed {c['xfailed']:4d}")
    tr.write_line(f"conformance total: {total['passed']} passed, {total['failed']} failed, "
                  f"{total['xfailed']} expected failures (of {sum(total.values())} cases)")


_LEFT_RUNNING = []


@pytest.hookimpl(trylast=True)   # after the session's fixtures are torn down (they may own children)
def pytest_sessionfinish(session):
    """No test's child outlives the run: processes this one started (directly or below) that are still alive now
    are killed, with their process groups, and listed in the summary (a test that left one has a bug)."""
    from tests import children
    _LEFT_RUNNING.extend(children.kill_descendants(os.getpid()))


def pytest_terminal_summary(terminalreporter):
    _conformance_summary(terminalreporter)
    if _LEFT_RUNNING:
        tr = terminalreporter
        tr.section("child processes left running by tests (killed)", yellow=True)
        for pid, command in _LEFT_RUNNING:
            tr.write_line(f"pid {pid}: {command}")
