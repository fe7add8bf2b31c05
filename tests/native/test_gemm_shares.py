"""GEMM shares the CPU pool's worker runs without the GIL (native/cpu/jit_gemm_share.py, numba extra): a posted share
is claimed once, by the worker polling in `serve` or by the caller after its polls (take-over); both run numpy's
own cblas_sgemm call, so packed-gemm-cols's floats do not depend on which path ran (bitwise)."""
import threading
import time

import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels import matmul


def _share(a, b, y, c0, c1):
    m, k = a.shape
    n = b.shape[1]
    return np.array([m, c1 - c0, k, a.ctypes.data, k, b.ctypes.data + 4 * c0, n, y.ctypes.data + 4 * c0, n],
                    np.int64)


def _parts(a, b, edges):
    """numpy's matmul per column part: the floats packed-gemm-cols had before shares."""
    y = np.empty((a.shape[0], b.shape[1]), np.float32)
    for c0, c1 in zip(edges[:-1], edges[1:]):
        np.matmul(a, b[:, c0:c1], out=y[:, c0:c1])
    return y


def _operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)


@pytest.fixture
def share_kit():
    threads.tune()
    gs, addr = threads._gemm_share()
    if gs is None:
        pytest.skip("needs numba and numpy's 64-bit-integer OpenBLAS")
    return gs, addr


def test_a_serving_thread_runs_each_posted_share_once_with_numpys_floats(share_kit):
    gs, addr = share_kit
    flags, job = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    job[0] = addr
    got = {}
    server = threading.Thread(target=lambda: got.setdefault("r", gs.serve(flags, job, 1, 0, 0, 0, 1 << 40, 3, 2,
                                                                           1 << 40)))
    server.start()
    try:
        for n, (m, k, cols) in enumerate([(32, 256, 1024), (16, 1024, 256), (3, 40, 48)], start=1):
            a, b = _operands(m, k, cols, n)
            y = np.full((m, cols), np.nan, np.float32)
            gs.post(flags, job, _share(a, b, y, 0, cols), n)
            while not flags[3] and flags[gs.GEMM_CLAIMED] != n:   # the server may not be polling yet: then
                pass                                              # the caller's take-over would run it
            assert gs.finish(flags, job, n, 1 << 40) == 0         # the server claimed it and ran it
            assert flags[gs.GEMM_CLAIMED] == flags[gs.GEMM_DONE] == n
            assert np.array_equal(y.view(np.int32), (a @ b).view(np.int32))
    finally:
        flags[0] = 1            # a job for the Python side: serve returns
        server.join(10)
    assert got["r"] is True and not flags[3]


def test_a_dozing_server_is_woken_by_a_store_and_then_serves(share_kit):
    """serve with dozes: once its polls run out it naps outside the GIL (flags[DOZING] 1, not "polling"); a store of
    2 there makes it poll again, and it claims the next share; a store of 3 ends its polls (it dozes again); a job
    for the Python side ends the doze."""
    gs, addr = share_kit
    flags, job = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    job[0] = addr
    got = {}
    server = threading.Thread(target=lambda: got.setdefault("r", gs.serve(flags, job, 1, 0, 0, 0, 0, 3, 2, 1 << 40,
                                                                           1 << 40, 50)))
    server.start()
    try:
        deadline = time.perf_counter() + 10
        while flags[gs.DOZING] != 1 and time.perf_counter() < deadline:
            time.sleep(0.001)
        assert flags[gs.DOZING] == 1 and not flags[3]
        flags[gs.DOZING] = 2
        while not flags[3] and time.perf_counter() < deadline:
            time.sleep(0.001)
        assert flags[3] and flags[gs.DOZING] == 0
        a, b = _operands(16, 64, 96)
        y = np.zeros((16, 96), np.float32)
        gs.post(flags, job, _share(a, b, y, 0, 96), 1)
        assert gs.finish(flags, job, 1, 1 << 40) == 0
        assert np.array_equal(y.view(np.int32), (a @ b).view(np.int32))
        flags[gs.DOZING] = 3                       # a caller backing off: the polls (unbounded here) stop
        while flags[gs.DOZING] != 1 and time.perf_counter() < deadline:
            time.sleep(0.001)
        assert flags[gs.DOZING] == 1 and not flags[3]
    finally:
        flags[0] = 1
        server.join(10)
    assert got["r"] is True and not flags[3] and not flags[gs.DOZING]


@pytest.mark.parametrize("dozing", [False, True])
def test_a_server_told_to_rest_returns_at_once(share_kit, dozing):
    """A 4 in flags[DOZING] (threads.rest) ends serve's polls and its doze: it returns (no job seen) and clears the
    word, where without it the server would poll and doze on (here: for hours)."""
    gs, _ = share_kit
    flags, job = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    polls = 0 if dozing else 1 << 40
    got = {}
    server = threading.Thread(target=lambda: got.setdefault("r", gs.serve(flags, job, 1, 0, 0, 0, polls, 3, 2,
                                                                           1 << 40, 1 << 40, 50)))
    server.start()
    try:
        deadline = time.perf_counter() + 10
        while flags[gs.DOZING] != 1 and not flags[3] and time.perf_counter() < deadline:
            time.sleep(0.001)
        assert flags[gs.DOZING] == 1 if dozing else flags[3] == 1
        flags[gs.DOZING] = 4
        server.join(5)
        assert not server.is_alive(), "serve did not return when told to rest"
    finally:
        if server.is_alive():
            flags[0] = 1
            server.join(10)
    assert got["r"] is False and not flags[3] and not flags[gs.DOZING]


def test_rest_tells_only_a_worker_that_polls_or_dozes(monkeypatch):
    """threads.rest stores 4 for a worker polling (flags[3]) or dozing (flags[DOZING]), and leaves one asleep on
    its lock alone (a stale 4 would cut its next polls short)."""
    class W:
        def __init__(self, polling, dozing):
            self.flags = np.zeros(8, np.int64)
            self.flags[3], self.flags[7] = polling, dozing
    pool = [W(1, 0), W(0, 1), W(0, 0)]
    monkeypatch.setitem(threads._STATE, "pool", pool)
    threads.rest()
    assert [int(w.flags[7]) for w in pool] == [4, 4, 0]


def test_an_unclaimed_share_is_run_by_the_caller(share_kit):
    gs, addr = share_kit
    flags, job = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    job[0] = addr
    a, b = _operands(8, 64, 96)
    y = np.zeros((8, 96), np.float32)
    gs.post(flags, job, _share(a, b, y, 32, 96), 1)     # nobody serves
    assert gs.finish(flags, job, 1, 100) == 1
    assert flags[gs.GEMM_CLAIMED] == flags[gs.GEMM_DONE] == 1
    assert np.array_equal(y[:, 32:], _parts(a, b, [32, 96])[:, 32:]) and not y[:, :32].any()


@pytest.mark.parametrize("m,k,n", [(32, 256, 1024), (16, 1024, 256), (32, 256, 768), (2, 64, 48), (5, 33, 80)])
def test_packed_gemm_cols_floats_do_not_depend_on_the_path(share_kit, m, k, n):
    """gemm_columns through shares (whether the worker or the caller runs the second part) gives numpy's floats for
    the same column parts, bit for bit, and so does its path without numba."""
    a, b = _operands(m, k, n, m)
    edges = [0, matmul._COLUMN_ALIGN * ((n // matmul._COLUMN_ALIGN) // 2), n]
    want = _parts(a, b, edges)
    worker = threads._pool()[0]
    before = int(worker.flags[6])
    for _ in range(50):
        got = matmul.gemm_columns(a, b)
        assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert worker.flags[6] >= before    # (how many the worker ran is the machine's business)


def test_without_the_jit_gemm_columns_keeps_its_python_parts(monkeypatch):
    threads.tune()
    monkeypatch.setitem(threads._STATE, "gemm_share", (None, 0))
    assert threads.gemm_shares([np.zeros(9, np.int64)] * 2) is False
    a, b = _operands(32, 256, 1024)
    assert np.array_equal(matmul.gemm_columns(a, b).view(np.int32), _parts(a, b, [0, 512, 1024]).view(np.int32))


def test_one_row_is_left_to_numpy(share_kit):
    """numpy's matmul takes gemv for a single row: shares (gemm) would change the floats, so one row never uses them."""
    a, b = _operands(1, 256, 1024)
    y = np.empty((1, 1024), np.float32)
    assert matmul._native_shares(a, b, y, [0, 512, 1024]) is False


@pytest.mark.jit     # its worker's GEMM server is numba's (tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says)
def test_a_gemm_that_finds_the_worker_asleep_leaves_it_polling_for_the_next(share_kit, monkeypatch):
    """The first GEMM of a run finds the worker asleep: it runs as Python parts, after which the worker polls for GEMM
    shares (GEMM_KICK_POLLS; unbounded here), and the next GEMM is handed over as a share."""
    monkeypatch.setattr(threads, "GEMM_KICK_POLLS", 1 << 40)
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    monkeypatch.setattr(threads, "WORKER_SPIN_POLLS", 0)     # no poll after a plain job: it sleeps on its lock
    w = threads._Worker(0)      # a worker of its own (the process's pool may predate numba: an earlier test's setting)
    monkeypatch.setitem(threads._STATE, "pool", [w])
    assert w.serve is not None
    deadline = time.perf_counter() + 10
    took = []
    real = threads.gemm_shares
    monkeypatch.setattr(threads, "gemm_shares", lambda shares: took.append(real(shares)) or took[-1])
    a, b = _operands(32, 256, 1024, 7)
    want = _parts(a, b, [0, 512, 1024]).view(np.int32)
    try:
        assert np.array_equal(matmul.gemm_columns(a, b).view(np.int32), want)
        assert took == [False]
        # the worker polls once it has had the GIL and a CPU; a busy machine may first make the pool back off
        # (a Python part taken over): each later GEMM that still finds it asleep asks again
        while not took[-1] and time.perf_counter() < deadline:
            threads._SPIN["quiet_after"] = 0.0
            time.sleep(0.001)
            assert np.array_equal(matmul.gemm_columns(a, b).view(np.int32), want)
        assert took[-1] is True
    finally:
        monkeypatch.setattr(threads, "GEMM_KICK_POLLS", 1 << 17)
        end = time.perf_counter() + 10
        while w.flags[3] and time.perf_counter() < end:          # a Python job: the unbounded poll returns
            threads._SPIN["quiet_after"] = 0.0
            threads.parallel_for(lambda i: time.sleep(0.001), range(2))


def test_the_compiled_descriptor_is_gemm_shares(share_kit):
    """jit_gemm_share.sgemm_descriptor writes threads.gemm_share's nine words (views with row strides included)."""
    gs, _ = share_kit
    a, b = _operands(32, 256, 1024)
    y = np.empty((32, 1024), np.float32)
    for args in ((a, b, y), (a[:, 16:], b[16:, 512:], y[:, 512:]), (a[3:9], b, y[3:9])):
        out = np.zeros(9, np.int64)
        gs.sgemm_descriptor(*args, out)
        assert out.tolist() == threads.gemm_share(*args).tolist()


def test_a_kernel_share_the_worker_runs_late_is_reported(share_kit):
    """kernel_stages: a half the worker claims at once but finishes far later than the caller's (its CPU shared)
    comes back as status 3 (or 2, held up past the caller's polls): either way the pool then backs off."""
    numba = pytest.importorskip("numba")
    gs, _ = share_kit

    @numba.cfunc("void(CPointer(int64), int64)")
    def mark(ptr, code):
        a = numba.carray(ptr, (8,))
        a[2 + (code & 1)] += 1
    flags, job, args = np.zeros(gs.FLAG_WORDS, np.int64), np.zeros(gs.JOB_WORDS, np.int64), np.zeros(8, np.int64)
    x = np.zeros((1, 4), np.float32)

    def late_worker():
        deadline = time.perf_counter() + 10
        while flags[gs.GEMM_POSTED] == 0 and time.perf_counter() < deadline:
            pass
        flags[gs.GEMM_CLAIMED] = 1
        time.sleep(0.002)
        gs.run_share(job)
        flags[gs.GEMM_DONE] = 1
    helper = threading.Thread(target=late_worker, daemon=True)
    helper.start()
    st, status, n = gs.kernel_stages(flags, job, 0, mark.address, args, x, x, 0, 0, 1, False, 1 << 40)
    helper.join(10)
    while status == 2 and flags[gs.GEMM_DONE] != 1:
        time.sleep(0.001)
    assert status in (2, 3) and n == 1 and st == 1
    assert args[2] == 1 and args[3] == 1          # each half once: the caller's here, the second by the worker


def test_a_server_that_saw_a_python_job_waits_its_grace_until_the_caller_waits(share_kit):
    """serve with `grace` and `waiting_at` (threads.GIL_GRACE_POLLS): having seen a Python job (flags[0] bumped) it
    publishes it (flags[2]), stops "polling" (flags[3] 0) and returns only once the caller waits for that job
    (flags[waiting_at] = the job) or its grace polls run out, so it asks for the GIL when the caller has left it."""
    gs, _ = share_kit
    flags, job = np.zeros(9, np.int64), np.zeros(gs.JOB_WORDS, np.int64)
    got = {}
    server = threading.Thread(target=lambda: got.setdefault("r", gs.serve(flags, job, 1, 0, 0, 0, 1 << 40, 3, 2,
                                                                           1 << 40, 0, 0, 1 << 40, 8)))
    server.start()
    try:
        deadline = time.perf_counter() + 10
        while not flags[3] and time.perf_counter() < deadline:
            time.sleep(0.001)
        assert flags[3] == 1
        flags[0] = 1                                  # a Python job: seen, but the grace (unbounded here) holds it
        while flags[2] != 1 and time.perf_counter() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)
        assert flags[2] == 1 and not flags[3] and server.is_alive()
        flags[8] = 1                                  # the caller waits for job 1: the grace ends
        server.join(5)
        assert not server.is_alive()
    finally:
        if server.is_alive():
            flags[8] = flags[0] = 5
            server.join(10)
    assert got["r"] is True and not flags[3]
    flags[:] = 0                                      # a bounded grace ends by itself
    assert gs.serve(flags, job, 1, 0, 0, 0, 0, 3, 2, 0, 0, 0, 1 << 10, 8) is False   # (no job: no grace)
    flags[0] = 1
    assert gs.serve(flags, job, 1, 0, 0, 1, 0, 3, 2, 0, 0, 0, 1 << 10, 8) is False   # (seen == posted: none new)
    assert gs.serve(flags, job, 1, 0, 0, 0, 1 << 10, 3, 2, 0, 0, 0, 1 << 10, 8) is True and flags[2] == 1


def test_parallel_for_ends_the_workers_grace_when_it_waits(share_kit, monkeypatch):
    """With an unbounded GIL grace, parallel_for still completes: its wait tells the worker (flags[8]); the items'
    results come back in order, the worker's included."""
    pool = threads._pool()
    if not pool or threads.num_threads() < 2:
        pytest.skip("one CPU: no pool")
    usual = threads.GIL_GRACE_POLLS
    monkeypatch.setattr(threads, "GIL_GRACE_POLLS", 1 << 40)
    names = []
    for _ in range(20):
        out = threads.parallel_for(lambda i: (names.append(threading.current_thread().name), i * i)[1], range(6))
        assert out == [0, 1, 4, 9, 16, 25]
    monkeypatch.setattr(threads, "GIL_GRACE_POLLS", usual)
    threads.parallel_for(lambda i: i, range(2))      # the worker's next job runs with the usual grace
    assert pool[0].flags[8] == pool[0].posted
