"""ir-direct-shares (native/cpu/kernels/inverted_residual.py, jit_ir_share.py): the inverted-residual block's two
stages cut in two and run as kernel shares (threads.kernel_shares), on the caller and a pool worker at once or both
halves on the caller. Its floats are within float32 rounding of the unfused layers and of ir-direct, and bit for bit
the same whichever thread ran a half: a worker polling for shares, one thread, a worker that never claims its half
(take-over), a busy thread beside it."""
import threading
import time

import numpy as np
import pytest

from native import config
from native.cpu import threads
from native.tactics import LayerContext, Op, tactics_for
from tests.backends.fusion_helpers import kinds, run
from tests.backends.test_fusion_ir import _build, _ir_model

pytestmark = pytest.mark.jit
RNG = np.random.default_rng(75)
CASES = [dict(k=5, se=True, residual=True, e=96, c=24, hw=(14, 14)),
         dict(k=3, se=True, residual=False, c=16, hw=(16, 16), stride=(2, 2), expand=False),
         dict(k=3, se=False, residual=False, e=64, c=16, hw=(15, 13), stride=(2, 2)),
         dict(k=5, se=True, residual=False, e=40, c=8, hw=(9, 11), batch=2, act_e="Relu", act_d="Relu"),
         dict(k=3, se=True, residual=True, e=72, c=24, hw=(7, 7))]


@pytest.fixture
def kit():
    pytest.importorskip("numba")
    if not threads.sgemm_address():
        pytest.skip("needs numpy's 64-bit-integer OpenBLAS cblas_sgemm")


def _input(kw):
    return RNG.standard_normal((kw.get("batch", 1), kw["c"], *kw["hw"])).astype(np.float32)


def _alone(graph, x):
    """The layer with both halves of each stage on the caller (the pool treated as contended)."""
    saved = threads._SPIN["quiet_after"]
    threads._SPIN["quiet_after"] = float("inf")
    try:
        return run(graph, {"x": x})[0]
    finally:
        threads._SPIN["quiet_after"] = saved


TACTICS = ["ir-direct-shares", "ir-rows-shares", "ir-planes-shares"]


PAIRS = [(i, t) for i, kw in enumerate(CASES) for t in TACTICS if kw.get("expand", True) or t == "ir-planes-shares"]


@pytest.mark.parametrize("case,tactic", PAIRS)
def test_shares_compute_the_unfused_result_and_the_inline_tactics_within_rounding(kit, case, tactic):
    kw = CASES[case]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, tactic)
    assert kinds(graph) == ["InvertedResidual"] and graph.nodes[-1].tactic_name == tactic
    y = _alone(graph, x)
    want = run(_build(m, fusion=False)[0], {"x": x})[0]
    direct = run(_build(m, "ir-planes" if tactic == "ir-planes-shares" else "ir-direct")[0], {"x": x})[0]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * scale)
    np.testing.assert_allclose(y, direct, rtol=1e-6, atol=1e-6 * scale)


def _polling_worker(monkeypatch):
    """A pool of one worker of its own that, once woken, polls for shares until told to stop (so a share posted to
    it is claimed by it whenever it has a CPU)."""
    monkeypatch.setattr(threads, "GEMM_KICK_POLLS", 1 << 40)
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    config.reload()
    threads.tune()
    w = threads._Worker(75)
    monkeypatch.setitem(threads._STATE, "pool", [w])
    return w


def _stop(w, monkeypatch):
    threads.GEMM_KICK_POLLS = 1 << 17
    end = time.perf_counter() + 10
    while (w.flags[3] or w.flags[7]) and time.perf_counter() < end:   # a Python job: the poll / doze returns
        threads._SPIN["quiet_after"] = 0.0
        threads.parallel_for(lambda i: time.sleep(0.001), range(2))
    monkeypatch.delenv("DEBUGKIT_THREADS")
    config.reload()


@pytest.mark.parametrize("tactic", TACTICS)
@pytest.mark.parametrize("case", [0, 3])
def test_a_polling_worker_runs_halves_with_the_same_floats(kit, monkeypatch, case, tactic):
    kw = CASES[case]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, tactic)
    alone = _alone(graph, x)
    w = _polling_worker(monkeypatch)
    try:
        before = int(w.flags[6])
        deadline = time.perf_counter() + 20
        while int(w.flags[6]) == before and time.perf_counter() < deadline:
            threads._SPIN["quiet_after"] = 0.0      # a busy machine may make the pool back off: ask again
            y = run(graph, {"x": x})[0]
            assert np.array_equal(y.view(np.int32), alone.view(np.int32))
            time.sleep(0.001)
        assert int(w.flags[6]) > before             # the worker ran (or the caller took over) posted halves
        for _ in range(20):
            assert np.array_equal(run(graph, {"x": x})[0].view(np.int32), alone.view(np.int32))
    finally:
        _stop(w, monkeypatch)


def test_with_kernel_shares_switched_off_the_worker_gets_no_half(kit, monkeypatch):
    kw = CASES[0]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, "ir-direct-shares")
    alone = _alone(graph, x)
    w = _polling_worker(monkeypatch)
    monkeypatch.setattr(threads, "KERNEL_SHARES", False)
    try:
        posted = w.gemm_posted
        for _ in range(20):
            assert np.array_equal(run(graph, {"x": x})[0].view(np.int32), alone.view(np.int32))
        assert w.gemm_posted == posted
    finally:
        _stop(w, monkeypatch)


@pytest.mark.parametrize("tactic", TACTICS)
def test_one_thread_runs_both_halves_with_the_same_floats(kit, monkeypatch, tactic):
    kw = CASES[0]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, tactic)
    alone = _alone(graph, x)
    monkeypatch.setenv("DEBUGKIT_THREADS", "1")
    config.reload()
    try:
        assert threads.num_threads() == 1
        assert np.array_equal(run(graph, {"x": x})[0].view(np.int32), alone.view(np.int32))
    finally:
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()


def test_a_half_the_worker_never_claims_is_run_by_the_caller(kit, monkeypatch):
    """A worker that says it polls but never claims (as one whose CPU is taken): the caller runs its half after
    START_POLLS, every later stage on its own, and the pool backs off."""
    kw = CASES[0]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, "ir-direct-shares")
    alone = _alone(graph, x)
    gs, _ = threads._gemm_share()

    class Stuck:
        flags, gemm, gemm_posted, serve, owes = np.zeros(8, np.int64), np.zeros(10, np.int64), 0, True, False

        def ready(self):
            return True
    stuck = Stuck()
    stuck.flags[3] = 1
    monkeypatch.setattr(threads, "BACKOFF_S", 60.0)
    monkeypatch.setitem(threads._STATE, "pool", [stuck])
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    config.reload()
    threads.tune()
    try:
        y = run(graph, {"x": x})[0]
    finally:
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()
    assert np.array_equal(y.view(np.int32), alone.view(np.int32))
    assert stuck.gemm_posted == 1 and stuck.flags[gs.GEMM_DONE] == 1    # one half posted, run by the caller
    assert threads._contended()


def test_a_half_claimed_then_held_up_is_waited_for_asleep_and_the_rest_runs_on_the_caller(kit, monkeypatch):
    """A worker that claims its half and then stalls (as one preempted mid-share): the caller stops polling after
    ~1 ms, sleeps until the half is done, and runs the later stage's halves itself; the floats stay the same."""
    kw = CASES[0]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, "ir-direct-shares")
    alone = _alone(graph, x)
    gs, _ = threads._gemm_share()

    class Slow:
        flags, gemm, gemm_posted, serve, owes = np.zeros(8, np.int64), np.zeros(10, np.int64), 0, True, False

        def ready(self):
            return True
    slow = Slow()
    slow.flags[3] = 1
    ran = []

    def worker():
        deadline = time.perf_counter() + 10
        while slow.flags[gs.GEMM_POSTED] == 0 and time.perf_counter() < deadline:
            pass
        slow.flags[gs.GEMM_CLAIMED] = 1     # claimed (the caller polls for the claim: no take-over) ...
        time.sleep(0.05)                     # ... then held up far longer than the caller polls
        gs.run_share(slow.gemm)
        ran.append(int(slow.gemm[3]))
        slow.flags[gs.GEMM_DONE] = 1
    helper = threading.Thread(target=worker, daemon=True)
    monkeypatch.setattr(threads, "BACKOFF_S", 60.0)
    monkeypatch.setitem(threads._STATE, "pool", [slow])
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    config.reload()
    threads.tune()
    helper.start()
    try:
        y = run(graph, {"x": x})[0]
    finally:
        helper.join(10)
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()
    assert ran == [1]                       # stage 0's second half, by the held-up worker only
    assert slow.gemm_posted == 1 and threads._contended()
    assert np.array_equal(y.view(np.int32), alone.view(np.int32))


@pytest.mark.parametrize("tactic", TACTICS)
def test_a_busy_thread_beside_it_changes_nothing(kit, monkeypatch, tactic):
    """Two busy threads (the other core taken, and then some) while the layer runs with the pool on: every run
    completes with the same floats (the take-over and back-off keep it from waiting on a worker without a CPU)."""
    kw = CASES[-1]
    m = _ir_model(**kw)
    x = _input(kw)
    graph, _ = _build(m, tactic)
    alone = _alone(graph, x)
    w = _polling_worker(monkeypatch)
    stop = threading.Event()
    spin = pytest.importorskip("native.cpu.jit_spin")
    flag = np.zeros(1, np.int64)

    def busy():
        while not stop.is_set():
            spin.wait_change(flag, 0, 0, 1 << 16)   # ~2 ms of polling without the GIL, again and again
    hogs = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
    for h in hogs:
        h.start()
    try:
        for _ in range(100):
            assert np.array_equal(run(graph, {"x": x})[0].view(np.int32), alone.view(np.int32))
    finally:
        stop.set()
        for h in hogs:
            h.join(10)
        _stop(w, monkeypatch)


def test_small_blocks_and_builds_without_numba_do_not_offer_it(kit, monkeypatch):
    m = _ir_model(e=24, c=8)     # 24 expanded channels: one 16-channel part and a remainder
    graph, _ = _build(m)
    node = graph.nodes[-1]
    op = Op(kind=node.kind, name=node.name, params=node.params, weights=node.weights)
    ctx = LayerContext([[1, 8, 9, 11]], ["float32"])
    why = {t.name: t.supports(op, ctx) for t in tactics_for("InvertedResidual", "cpu")}
    assert "fewer than 32" in why["ir-direct-shares"] and why["ir-direct"] is None and why["ir-rows-shares"] is None
    one_row = LayerContext([[1, 8, 2, 11]], ["float32"])     # k=3, stride 2: one output row
    op.params = dict(op.params, strides=[2, 2])
    rows = [t for t in tactics_for("InvertedResidual", "cpu") if t.name == "ir-rows-shares"][0]
    assert "fewer than 2 output rows" in rows.supports(op, one_row)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        why = {t.name: t.supports(op, ctx) for t in tactics_for("InvertedResidual", "cpu")}
        assert "numba" in why["ir-direct-shares"] and why["ir-numpy"] is None
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
