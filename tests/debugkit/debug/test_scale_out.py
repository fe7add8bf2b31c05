"""Searches that scale out: lost local workers are replaced and their probes rerun, an unreachable --ray address is
a fast usage error, GPU workers get one GPU each, probe objects cross to workers once per search."""
import json
import os
import signal
import threading
import time

import pytest

from debugkit.debug.executor import LocalExecutor, auto_workers, make_executor, parse_workers, worker_envs
from debugkit.debug.pool import WorkerLostError
from native.errors import UsageError
from tests.debugkit.debug.test_precision import planted  # noqa: F401  (the fixture)


class DiesOnce:
    """Squares x; the first time it meets `victim` (per marker file) it kills its own process (kill -9)."""

    def __init__(self, victim, marker, always=False):
        self.victim, self.marker, self.always = victim, marker, always

    def __call__(self, x):
        if x == self.victim and (self.always or not os.path.exists(self.marker)):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return x * x if isinstance(x, int) else x


@pytest.fixture(scope="module")
def pool():
    """Two local workers shared by the tests of this module (starting one costs seconds of imports)."""
    with LocalExecutor(2) as ex:
        yield ex


def test_a_worker_killed_mid_probe_is_replaced_and_its_probe_rerun(tmp_path, pool):
    first, restarts = set(pool.pids()), pool.restarts
    done = []
    out = pool.map(DiesOnce(3, str(tmp_path / "m")), range(8), on_done=done.append)
    assert out == [x * x for x in range(8)] and done == out   # in order, once each
    assert pool.restarts == restarts + 1 and len(set(pool.pids()) - first) == 1
    assert pool.map(DiesOnce(-1, ""), [5]) == [25]             # the pool goes on serving


def test_a_probe_that_always_kills_its_worker_is_a_clear_error_naming_it(tmp_path, pool, monkeypatch):
    monkeypatch.setattr(pool._pool, "retries", 1)
    with pytest.raises(WorkerLostError, match=r"each of the 2 times it ran the probe \[4, 5\] \(2 items\)"):
        pool.map(DiesOnce([4, 5], str(tmp_path / "m"), always=True), [[1], [4, 5], [6]])


class Fails:
    def __call__(self, x):
        raise ValueError(f"bad {x}")


def test_a_probe_error_is_raised_in_the_driver(pool):
    with pytest.raises(ValueError, match="bad 1"):      # the first in order, as a serial search would raise
        pool.map(Fails(), [1, 2])


class Payload:
    """Reports whether this process has unpickled its payload before (a probe crosses to a worker once)."""

    seen = 0

    def __init__(self, blob):
        self.blob = blob

    def __setstate__(self, state):
        self.__dict__.update(state)
        type(self).seen += 1

    def __call__(self, x):
        return os.getpid(), type(self).seen


def test_a_probe_object_crosses_to_each_worker_once_per_search(pool):
    pool.close()     # fresh workers: none has seen a Payload
    fn = Payload(b"x" * 100_000)
    rows = pool.map(fn, range(6)) + pool.map(fn, range(6))      # two batches of one search
    assert {seen for _, seen in rows} == {1} and len({pid for pid, _ in rows}) == 2
    assert {seen for _, seen in pool.map(Payload(b"y"), range(4))} == {2}   # a new search: sent again


def test_gpu_workers_own_one_gpu_each():
    envs = worker_envs(4, "cuda", gpus=["0", "1", "2", "3"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "3"]
    assert all(e["DEBUGKIT_THREADS"] == "1" for e in envs)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in worker_envs(3, "cuda", gpus=["2", "5"])] == ["2", "5", "2"]
    assert all("CUDA_VISIBLE_DEVICES" not in e for e in worker_envs(2, "cpu", gpus=["0", "1"]))
    assert auto_workers("cuda", gpus=["4", "6"]) == 2
    assert auto_workers("cpu") == len(os.sched_getaffinity(0))


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    from debugkit.debug.executor import visible_gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert visible_gpus() == ["3", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


class WhereAmI:
    def __call__(self, _):
        time.sleep(0.3)
        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


def test_each_local_worker_runs_with_its_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with LocalExecutor(2, device="cuda") as ex:
        rows = ex.map(WhereAmI(), range(4))
    assert {pid: gpu for gpu, pid in rows} and sorted({gpu for gpu, _ in rows}) == ["0", "1"]
    assert len({pid for _, pid in rows}) == 2
    assert all(len({g for g, p in rows if p == pid}) == 1 for _, pid in rows)   # a worker keeps its GPU


def test_workers_option_parsing():
    assert parse_workers("auto") == "auto" and parse_workers("3") == 3
    for bad in ("0", "-2", "many"):
        with pytest.raises(UsageError):
            parse_workers(bad)
    assert make_executor("auto", device="cpu").workers == auto_workers("cpu") or auto_workers("cpu") == 1


def test_unreachable_ray_address_is_exit_2_within_30_s(tmp_path, capsys):
    """192.0.2.2 (TEST-NET-1) answers nobody: the search refuses in seconds, before Ray is asked (no Ray needed)."""
    from debugkit.cli.main import main
    from tests.debugkit.conftest import chain_model
    import onnx
    model = tmp_path / "m.onnx"
    onnx.save(chain_model(), model)
    t0 = time.monotonic()
    rc = main(["debug", "precision", str(model), "--fp16", "--input-shapes", "x:[2,4]", "-o", str(tmp_path / "p.json"),
               "--ray", "192.0.2.2:9999"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    if rc == 2 and "needs Ray" in err:
        pass                                     # no Ray installed: also exit 2, one line
    else:
        assert rc == 2 and "--ray 192.0.2.2:9999: no Ray cluster answers there" in err, err
    assert took < 30 and len([x for x in err.splitlines() if x.startswith("debugkit")]) == 1, err


def test_ray_address_checks_without_ray():
    from debugkit.debug.ray_cluster import answers, split_address
    assert split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert split_address("ray://head:10001") == ("head", 10001) and split_address("ray://head") == ("head", 10001)
    assert split_address("[::1]:6379") == ("::1", 6379)
    with pytest.raises(UsageError, match="HOST:PORT"):
        split_address("headnode")
    t0 = time.monotonic()
    assert answers("192.0.2.2", 9999, timeout_s=1.0) is not None and time.monotonic() - t0 < 5
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert answers("127.0.0.1", port) is not None          # nothing listens: refused at once


def _workers():
    """This process's local search workers (not multiprocessing's resource tracker)."""
    pids = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            for p in f.read().split():
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as c:
                        cmd = c.read()
                except OSError:
                    continue
                if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                    pids.append(int(p))
    return pids


def test_kill_9_of_a_local_worker_mid_search_gives_the_same_answer(tmp_path, planted, capsys):
    """A worker killed (kill -9) while the search runs: restarted, its probe rerun, the planted layers found."""
    from tests.debugkit.debug.test_precision import _search
    model, must = planted
    log, killed = tmp_path / "prec_probes.jsonl", []

    def killer():
        end = time.monotonic() + 120
        while time.monotonic() < end and not killed:
            if log.exists() and len(log.read_text().splitlines()) >= 3:   # the first probes done: ranking runs
                time.sleep(1.0)
                kids = _workers()
                if kids:
                    os.kill(kids[0], signal.SIGKILL)
                    killed.append(kids[0])
            time.sleep(0.05)
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    rc, res = _search(tmp_path, model, "--workers", "2")
    t.join(5)
    assert killed, "no worker was killed (the search ended first)"
    assert rc == 0 and sorted(res["layer_precisions"]) == must and res["workers"] == 2
    err = capsys.readouterr().err
    assert f"(pid {killed[0]}) died (signal 9)" in err and "restarting it" in err, err
