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


class BigDiesOnce(DiesOnce):
    """DiesOnce carrying a payload large enough to go to the workers through a hand-off file."""

    def __init__(self, victim, marker):
        super().__init__(victim, marker)
        self.blob = b"z" * 300_000

    def __call__(self, x):
        return super().__call__(x), len(self.blob)


def test_a_large_probe_reaches_the_workers_through_a_file_removed_after_the_map(tmp_path, pool, monkeypatch):
    import debugkit.debug.pool as pool_module
    from debugkit.debug.scratch import process_scratch_dir
    monkeypatch.setattr(pool_module, "FILE_HANDOFF_BYTES", 100_000)
    pool.close()     # fresh workers: none holds a probe
    scratch = process_scratch_dir()
    fn = Payload(b"x" * 200_000)
    rows = pool.map(fn, range(6)) + pool.map(fn, range(6))
    assert {seen for _, seen in rows} == {1} and len({pid for pid, _ in rows}) == 2   # once per worker, as a pipe
    assert not [f for f in os.listdir(scratch) if f.startswith("probe_")]   # the hand-off file is gone
    # a worker killed mid-probe: its replacement reads the probe from the file again and the map completes
    restarts = pool.restarts
    assert pool.map(BigDiesOnce(3, str(tmp_path / "m")), range(6)) == [(x * x, 300_000) for x in range(6)]
    assert pool.restarts == restarts + 1
    assert not [f for f in os.listdir(scratch) if f.startswith("probe_")]


def test_a_hand_off_file_that_cannot_be_written_goes_through_the_pipes(pool, monkeypatch, capsys):
    """A full or read-only scratch disk: the probe reaches the workers through their pipes, with a warning that
    says why and what to do, instead of the search failing with the raw OSError."""
    import debugkit.debug.pool as pool_module
    import debugkit.debug.scratch as scratch_module
    monkeypatch.setattr(pool_module, "FILE_HANDOFF_BYTES", 100_000)

    def full_disk():
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(scratch_module, "process_scratch_dir", full_disk)
    pool.close()
    fn = Payload(b"w" * 200_000)
    rows = pool.map(fn, range(4)) + pool.map(fn, range(4))
    assert [r[1] for r in rows] == [1] * 8 and len({pid for pid, _ in rows}) == 2
    err = capsys.readouterr().err
    assert err.count("could not write the probe's hand-off file") == 1 and "No space left on device" in err


def test_a_hand_off_file_a_worker_cannot_read_fails_the_map_naming_it(pool, monkeypatch):
    import debugkit.debug.pool as pool_module
    monkeypatch.setattr(pool_module, "FILE_HANDOFF_BYTES", 100_000)
    real = pool_module.WorkerPool._handoff

    def lost_file(self, digest, blob):
        msg = real(self, digest, blob)
        os.remove(msg[2])       # gone before the worker reads it (another user's cleanup, a full tmpfs)
        return msg
    monkeypatch.setattr(pool_module.WorkerPool, "_handoff", lost_file)
    pool.close()
    with pytest.raises(WorkerLostError, match=r"could not read the probe's hand-off file .*probe_.*\.pkl"):
        pool.map(Payload(b"v" * 200_000), range(4))


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


def test_joining_shuts_ray_down_only_when_init_was_tried():
    """--ray HOST:PORT: a port that does not answer never reaches Ray (no init, no shutdown); a port that answers but
    where ray.init fails is shut down again, and the error names the address (exit 2)."""
    import socket

    from debugkit.debug import ray_cluster

    class FakeRay:
        def __init__(self, fail):
            self.fail, self.calls = fail, []

        def is_initialized(self):
            return False

        def init(self, **kw):
            self.calls.append(("init", kw["address"]))
            if self.fail:
                raise ConnectionError("the GCS did not answer")

        def shutdown(self):
            self.calls.append(("shutdown",))
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        ray = FakeRay(fail=True)
        why = ray_cluster._join(ray, f"127.0.0.1:{port}")
        assert why == "ConnectionError: the GCS did not answer"
        assert ray.calls == [("init", f"127.0.0.1:{port}"), ("shutdown",)]
        ok = FakeRay(fail=False)
        assert ray_cluster._join(ok, f"127.0.0.1:{port}") is None and ok.calls == [("init", f"127.0.0.1:{port}")]
    ray = FakeRay(fail=False)
    assert ray_cluster._join(ray, f"127.0.0.1:{port}") is not None and ray.calls == []   # closed port: no Ray call


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


def test_kill_9_of_a_local_worker_mid_search_gives_the_same_answer(tmp_path, planted, capsys, monkeypatch):
    """A worker killed (kill -9) while the search runs: restarted, its probe rerun, the planted layers found; the
    search leaves nothing in the temporary directory."""
    import tempfile

    from tests.debugkit.debug.test_precision import _search
    model, must = planted
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    log, killed = tmp_path / "prec_probes.jsonl", []
    others = set(_workers())     # other tests' pools: not this search's

    def killer():
        end = time.monotonic() + 120
        while time.monotonic() < end and not killed:
            # the first two probes logged: the ranking's 30 layer-alone runs start now (a kill just before them finds
            # the worker idle: replaced all the same, with its own warning)
            if log.exists() and len(log.read_text().splitlines()) >= 3:
                kids = [p for p in _workers() if p not in others]
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
    assert [n for n in os.listdir(scratch) if not n.startswith("debugkit-locks")] == []


def test_resume_does_not_rank_the_layers_again(tmp_path, planted, monkeypatch):
    from debugkit.debug import precision as P
    from tests.debugkit.debug.test_precision import _search
    model, must = planted
    rc, first = _search(tmp_path, model)
    assert rc == 0

    def no_ranking(self, label):
        raise AssertionError("a resumed search ran a layer alone again")
    monkeypatch.setattr(P.LayerAloneProbe, "__call__", no_ranking)
    rc, again = _search(tmp_path, model, "--resume")
    assert rc == 0 and again["probes"] == 0 and again["layer_precisions"] == first["layer_precisions"]
    ranking = json.loads((tmp_path / "prec_sensitivity.json").read_text())
    assert sorted(r["layer"] for r in ranking[:len(must)]) == must


def test_shipped_probes_name_no_file_of_the_driver(tmp_path, planted):
    """What goes to workers holds the model's bytes and values, not a path: a worker elsewhere needs no file."""
    import pickle

    import onnx

    from debugkit.debug import precision as P
    from debugkit.debug.checks import ReducedPrecisionCheck
    from debugkit.debug.reduce import Subgraphs, capture_values
    model_path, must = planted
    model = onnx.load(model_path)
    import numpy as np
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    values = capture_values(model, feeds)
    probe = P.PrecisionProbe(model_path, feeds, {"y": values["y"]}, ReducedPrecisionCheck.for_precision("fp16"))
    alone = P.LayerAloneProbe("search-1", "fp16", subgraphs=Subgraphs(model, feeds, values))
    alone.ship(Subgraphs(model, feeds, values))
    blobs = pickle.dumps(probe.ship(model)) + pickle.dumps(alone)
    assert str(tmp_path).encode() not in blobs
    os.rename(model_path, model_path + ".moved")         # the driver's file is gone: the probes still answer
    from debugkit.debug.executor import WorkerCache
    WorkerCache._store.clear()
    shipped = pickle.loads(pickle.dumps(probe))
    assert shipped(must)["hit"] is True and shipped([])["hit"] is False, shipped(must)
    shipped = pickle.loads(pickle.dumps(alone))
    assert shipped(must[0]) > 10 * shipped("mm3")


def test_a_killed_run_leaves_no_temporary_directory_for_long(tmp_path, monkeypatch):
    """debug reduce's directory carries its pid: a run killed outright (kill -9) leaves it, the next removes it;
    a normal run or an error leaves nothing."""
    import subprocess
    import sys
    import tempfile

    from debugkit.debug.scratch import search_dir
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KeyError):
        with search_dir("debugkit_reduce_") as d:
            assert os.path.isdir(d) and f"_pid{os.getpid()}_" in d
            raise KeyError("boom")
    assert not os.listdir(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"debugkit_reduce_pid{int(dead.stdout)}_abcd"
    stale.mkdir()
    (stale / "model.onnx").write_bytes(b"x")
    mine = tmp_path / f"debugkit_reduce_pid{os.getpid()}_live"   # a running search's: kept
    mine.mkdir()
    with search_dir("debugkit_reduce_"):
        assert not stale.exists() and mine.exists()
    assert sorted(os.listdir(tmp_path)) == [mine.name]


def test_workers_auto_on_the_command_line(monkeypatch):
    """--workers auto: one per visible GPU with --device cuda, one per core otherwise; a bad value is exit 2."""
    import argparse

    from debugkit.cli import _search_args
    from debugkit.cli.main import build_parser
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    args = argparse.Namespace(workers="auto", device="cuda", ray=None)
    assert _search_args.resolve_workers(args) == 3 and args.workers == 3
    args = argparse.Namespace(workers="auto", device="cpu", ray=None)
    assert _search_args.resolve_workers(args) == len(os.sched_getaffinity(0))
    parsed = build_parser().parse_args(["debug", "precision", "m.onnx", "--fp16", "--workers", "auto"])
    assert parsed.workers == "auto"
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["debug", "precision", "m.onnx", "--fp16", "--workers", "0"])
    assert e.value.code == 2


def test_parallel_writers_of_one_timing_cache_file_keep_each_others_timings(tmp_path):
    """Two workers' caches saved to one --timing-cache file: the second save keeps the first one's entries."""
    from backends.engine.builder import BuilderConfig, TimingCache
    from backends.engine.builder.timing_cache_file import load_timing_cache, merge_timing_cache
    path, config = str(tmp_path / "tc.json"), BuilderConfig()
    merge_timing_cache(TimingCache({"layer-a": {"t1": 1.0}}), path, config)
    mine = TimingCache({"layer-b": {"t2": 2.0}})
    merge_timing_cache(mine, path, config)
    assert load_timing_cache(path, config).entries == {"layer-a": {"t1": 1.0}, "layer-b": {"t2": 2.0}}
    assert set(mine.entries) == {"layer-a", "layer-b"}          # the writer also learns the other's timings


def test_two_precision_searches_in_one_directory_lock_their_own_probe_logs(tmp_path, monkeypatch):
    """The default probe log is '<output>_probes.jsonl': its lock is taken on the name with -o's stem put in (a.json
    -> a_probes.jsonl), resolved against the working directory, so two searches with their own -o run side by side,
    while another naming the same log (by any spelling of its path) is refused."""
    from debugkit.cli.file_claims import claim, claimed_files
    from debugkit.cli.main import build_parser
    from native.errors import OutputFileError
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    parser = build_parser()

    def args(*extra):
        return parser.parse_args(["debug", "precision", "m.onnx", "--fp16", *extra])
    assert claimed_files(args("-o", "a.json"))["updates"] == [("--log", "a_probes.jsonl")]
    with claim(args("-o", "a.json")):
        with claim(args("-o", "b.json")) as files:          # its own log: no conflict
            assert ("--log", "b_probes.jsonl") in files["updates"]
        with pytest.raises(OutputFileError, match=r"--log sub/\.\./a_probes\.jsonl is being written by another"):
            with claim(args("-o", "c.json", "--log", "sub/../a_probes.jsonl")):
                pass
        with pytest.raises(OutputFileError, match="being written by another"):
            with claim(args("-o", str(tmp_path / "a.json"))):   # the same files by an absolute path
                pass


def _widening_mlp(path):
    """x[4, 16] through MatMuls of eight different shapes (each its own timing key) with activations between."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    dims, nodes, inits, prev = [16, 24, 32, 40, 48, 56, 64, 72, 8], [], [], "x"
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        inits.append(numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        prev = f"m{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Tanh" if i % 2 else "Relu", [prev], [f"a{i}"], name=f"act{i}"))
            prev = f"a{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    g = helper.make_graph(nodes, "widening", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return m


def test_the_base_builds_timing_spread_over_workers_times_each_variant_once(tmp_path, pool):
    """With one GPU per worker the search's base build is timed by N workers, 1/N of the layer variants each
    (TimingShare): the shares are disjoint, together they are every variant one process would time, and the
    search's own base build with them merged times nothing. (Here on CPU workers: the logic is the device's.)"""
    import numpy as np

    from backends.engine.builder.tactic_selection import in_share
    from debugkit.debug import precision as P
    from debugkit.debug.checks import ReducedPrecisionCheck
    from debugkit.debug.executor import WorkerCache
    path = str(tmp_path / "w.onnx")
    model = _widening_mlp(path)
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    check = ReducedPrecisionCheck.for_precision("fp16")
    whole = P.PrecisionProbe(path, feeds, {}, check).time_share((0, 1))   # one process, every variant
    assert len(whole["entries"]) >= 8 and whole["seconds"] > 0
    WorkerCache._store.clear()
    probe = P.PrecisionProbe(path, feeds, {}, check).ship(model)
    got = pool.map(P.TimingShare(probe), [(0, 2), (1, 2)])
    shares = [set(g["entries"]) for g in got]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(whole["entries"])
    assert all(in_share(k, (i, 2)) and not in_share(k, (1 - i, 2)) for i, keys in enumerate(shares) for k in keys)
    assert all(shares)    # both workers had variants to time (the split is by key hash)
    # the driver side: merged into the search's cache, its base build then times nothing
    driver = P.PrecisionProbe(path, feeds, {}, check)
    cache = driver.timing_cache()
    for g in got:
        cache.entries.update(g["entries"])
    n, misses = len(cache.entries), cache.misses
    out = driver.engine_outputs([], taps="all")
    assert set(out) >= {"y"} and np.all(np.isfinite(out["y"]))
    assert len(cache.entries) == n and cache.misses == misses


def test_base_timing_is_shared_only_with_a_gpu_per_worker(monkeypatch):
    from debugkit.debug import precision as P
    from debugkit.debug.executor import InlineExecutor
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cpu, one_each, two_on_one = LocalExecutor(2), LocalExecutor(2, device="cuda"), LocalExecutor(3, device="cuda")
    try:
        assert not P.shares_timing(cpu) and not P.shares_timing(InlineExecutor())
        assert P.shares_timing(one_each) and not P.shares_timing(one_each, calib={"algorithm": "entropy2"})
        assert not P.shares_timing(two_on_one)   # three workers on two GPUs: two would time on one GPU
    finally:
        for ex in (cpu, one_each, two_on_one):
            ex.close()


def test_a_search_with_shared_base_timing_gives_the_same_answer(tmp_path, planted, monkeypatch, capsys):
    """The search's path when the workers time the base build (forced here on CPU workers): same answer as
    the serial search, and the summary says how the timing was shared."""
    from debugkit.cli.main import main
    from debugkit.debug import precision as P
    model, must = planted
    monkeypatch.setattr(P, "shares_timing", lambda ex, calib=None: ex.workers > 1)
    out = tmp_path / "p.json"
    rc = main(["debug", "precision", model, "--fp16", "--atol", "1e-2", "--workers", "2", "--share-base-timing",
               "-o", str(out)])
    res = json.loads(out.read_text())
    assert rc == 0 and sorted(res["layer_precisions"]) == must
    shared = res["base_timing_shared"]
    assert shared["variants"] >= 1 and len(shared["shares"]) == 2 and shared["seconds"] > 0


def test_a_warm_search_does_not_share_the_base_timing(tmp_path, planted, monkeypatch):
    """With a --timing-cache file that already holds the timings, the workers' share builds would only delay the
    base build: the search skips them (and the file's timings are in the search's cache before any build)."""
    from debugkit.cli.main import main
    from debugkit.debug import precision as P
    model, must = planted
    monkeypatch.setattr(P, "shares_timing", lambda ex, calib=None: ex.workers > 1)
    cache = tmp_path / "t.cache"
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    args = ["debug", "precision", model, "--fp16", "--atol", "1e-2", "--workers", "2", "--timing-cache", str(cache),
            "--share-base-timing"]
    assert main(args + ["-o", str(first)]) == 0 and cache.exists()
    assert json.loads(first.read_text())["base_timing_shared"]["variants"] >= 1   # cold: shared
    assert main(args + ["-o", str(second)]) == 0
    res = json.loads(second.read_text())
    assert res["base_timing_shared"] is None and sorted(res["layer_precisions"]) == must


def test_workers_rank_beside_the_base_build_only_where_they_cannot_skew_its_timing(monkeypatch):
    """The ranking and the all-higher probe run on GPU workers during the base build: on any of them when the base
    build times nothing (its timings came from the workers' shares or a --timing-cache file), else only on those
    whose GPU is not the one the search process times on; never on CPU workers or inline."""
    from debugkit.debug import precision as P
    from debugkit.debug.executor import InlineExecutor
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cpu, gpus, four = LocalExecutor(2), LocalExecutor(2, device="cuda"), LocalExecutor(4, device="cuda")
    try:
        shared = {"variants": 3}
        assert P.beside_base(gpus, shared, 0) == [0, 1] and P.beside_base(gpus, None, 12) == [0, 1]
        assert P.beside_base(gpus, None, 0) == [1]           # cold: worker 0 shares GPU 0 with the base build
        assert P.beside_base(cpu, shared, 12) is None         # CPU workers share this machine's cores
        assert P.beside_base(InlineExecutor(), shared, 12) is None
        assert P.beside_base(four, None, 0) is None           # two workers per GPU: not their own GPUs
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
        assert LocalExecutor(2, device="cuda").off_caller_gpu() == [1]   # this process builds on GPU 3
    finally:
        for ex in (cpu, gpus, four):
            ex.close()


class WhichWorker:
    def __call__(self, x):
        return os.environ.get("DK_TEST_SLOT")


def test_a_map_can_be_kept_to_some_workers():
    with LocalExecutor(2) as ex:
        ex.envs = [{**e, "DK_TEST_SLOT": str(i)} for i, e in enumerate(ex.envs)]
        ex._pool.envs = ex.envs
        assert ex.map(WhichWorker(), range(4), slots=[1]) == ["1"] * 4
        assert ex.map(WhichWorker(), range(4), slots=[0]) == ["0"] * 4


@pytest.mark.timing   # the base build and the ranking exchange their tactic timings: real timings, in two processes
def test_the_ranking_beside_the_base_build_gives_the_serial_answer(tmp_path, planted, monkeypatch):
    """The GPU workers' path, forced on CPU workers: the workers rank every layer and run the all-higher probe
    while the search process makes its base build, and the search process takes one probe of each batch; the
    answer, the ranking's order and the all-higher probe are those of the serial search, and the answer file says
    what ran beside the base build and how many probes ran at once."""
    from debugkit.cli.main import main
    from debugkit.debug import executor as E
    from debugkit.debug import precision as P
    model, must = planted
    serial, beside = tmp_path / "s.json", tmp_path / "b.json"
    common = ["debug", "precision", model, "--fp16", "--atol", "1e-2"]
    assert main(common + ["-o", str(serial)]) == 0
    monkeypatch.setattr(P, "beside_base", lambda ex, shared, seeded: [1] if ex.workers > 1 else None)
    init = E.LocalExecutor.__init__

    def with_driver(self, *a, **k):
        init(self, *a, **k)
        self.driver_slot = True
    monkeypatch.setattr(E.LocalExecutor, "__init__", with_driver)
    judged = P.PrecisionProbe.judged    # records made in this process say so (the workers import the original)
    monkeypatch.setattr(P.PrecisionProbe, "judged", lambda self, out: {**judged(self, out), "here": os.getpid()})
    from debugkit.cli import debug_precision as D
    monkeypatch.setattr(D._Alongside, "finished", lambda self, within_s=0.0: False)   # a ranking still going on
    assert main(common + ["--workers", "2", "-o", str(beside)]) == 0
    s, b = json.loads(serial.read_text()), json.loads(beside.read_text())
    assert b["probe_slots"] == 3 and s["probe_slots"] == 1
    assert sorted(b["layer_precisions"]) == sorted(s["layer_precisions"]) == must
    assert b["beside_base_build"]["all_higher_probe"] is False   # one worker beside the base build: ranking only
    assert b["beside_base_build"]["layers_ranked"] == s["layers"] == b["layers"]
    assert b["beside_base_build"]["workers"] == [1]
    # the base build and the ranking's build timed together (a timing exchange between the two processes): the
    # base build handed its measurements over, and each side timed only what the other had not yet
    assert b["beside_base_build"]["timings_exchanged"]["base_build_gave"] >= 1
    assert s["beside_base_build"] is None
    rank = [json.loads((tmp_path / f"{n}_sensitivity.json").read_text()) for n in ("s", "b")]
    assert [r["layer"] for r in rank[0]] == [r["layer"] for r in rank[1]]
    log = [json.loads(line) for line in open(tmp_path / "b_probes.jsonl")][1:]
    every = sorted(r["layer"] for r in rank[1])
    assert [rec["result"]["hit"] for rec in log if rec["artifact"] == every] == [True]   # the all-higher probe
    # not beside the base build: in this process (the workers are cold), the first of the one batch that also
    # holds the empty set and the overflow guess's confirmation (the ranking, made beside the base build, gave it)
    assert [rec["result"].get("here") for rec in log if rec["artifact"] == every] == [os.getpid()]
    assert [rec["result"]["hit"] for rec in log if rec["artifact"] == []] == [False]
    assert b["overflow_guess"] == s["overflow_guess"] == {"layers": len(must), "confirmed": True}
    # the all-higher probe here while the workers finish the ranking, then one batch: the guess's confirmation
    assert b["critical_path"]["rounds"] == 2 and b["probes"] == 2 + len(must)   # the empty set: the base build
    assert [rec["result"]["hit"] for rec in log if isinstance(rec["artifact"], list) and len(rec["artifact"]) ==
            len(must) - 1 and set(rec["artifact"]) < set(must)] == [False] * len(must)
    # a ranking done by the end of the base build: no probe here before it, one batch from the start with the
    # all-higher probe in this process and the rest on the worker
    monkeypatch.setattr(D._Alongside, "finished", lambda self, within_s=0.0: True)
    done = tmp_path / "d.json"
    assert main(common + ["--workers", "2", "-o", str(done)]) == 0
    d = json.loads(done.read_text())
    assert sorted(d["layer_precisions"]) == must and d["critical_path"]["rounds"] == 1
    log = [json.loads(line) for line in open(tmp_path / "d_probes.jsonl")][1:]
    assert [rec["result"].get("here") for rec in log if rec["artifact"] == every] == [os.getpid()]
    # with every worker free (the base build times nothing: a --timing-cache file holds its timings) the
    # all-higher probe runs beside it too
    monkeypatch.setattr(P, "beside_base", lambda ex, shared, seeded: [0, 1] if ex.workers > 1 else None)
    both = tmp_path / "c.json"
    assert main(common + ["--workers", "2", "-o", str(both)]) == 0
    c = json.loads(both.read_text())
    assert c["beside_base_build"]["all_higher_probe"] is True and c["beside_base_build"]["workers"] == [0, 1]
    assert sorted(c["layer_precisions"]) == must
    log = [json.loads(line) for line in open(tmp_path / "c_probes.jsonl")][1:]
    assert [rec["result"]["hit"] for rec in log if rec["artifact"] == every] == [True]


def test_the_reference_beside_the_base_build_gives_the_serial_answer(tmp_path, planted, monkeypatch):
    """On a GPU the FP32 reference (ONNX Runtime, every tensor) runs on a thread while the search process makes its
    base build, and the workers' ranking starts once it is known; forced here on the CPU, alone and with the GPU
    workers' path: the answer, the ranking, the probes and their verdicts are the serial search's."""
    import threading

    from debugkit.cli import debug_precision as D
    from debugkit.cli.main import main
    from debugkit.debug import executor as E
    from debugkit.debug import precision as P
    from debugkit.debug import reduce as R
    model, must = planted
    # untimed tactics: the two searches' builds must pick the same ones for their probes to compare equal
    common = ["debug", "precision", model, "--fp16", "--atol", "1e-2", "--tactic-heuristic"]
    serial = tmp_path / "s.json"
    assert main(common + ["-o", str(serial)]) == 0
    where = []
    capture = R.capture_values
    monkeypatch.setattr(R, "capture_values", lambda *a: where.append(threading.current_thread().name) or capture(*a))
    monkeypatch.setattr(D, "REFERENCE_BESIDE_BASE", True)
    inline = tmp_path / "i.json"
    assert main(common + ["-o", str(inline)]) == 0
    assert where == ["debug precision: the FP32 reference"]
    s, i = json.loads(serial.read_text()), json.loads(inline.read_text())
    assert sorted(i["layer_precisions"]) == sorted(s["layer_precisions"]) == must
    assert i["probes"] == s["probes"] and i["layers"] == s["layers"] and i["builds_bound"] == s["builds_bound"]
    assert i["work"]["first_bound"] == s["work"]["first_bound"]
    logs = [[(r["artifact"], r["result"].get("hit") if isinstance(r["result"], dict) else r["result"])
             for r in map(json.loads, list(open(tmp_path / f"{n}_probes.jsonl"))[1:])] for n in ("s", "i")]
    assert logs[0] == logs[1]
    # with GPU workers ranking and running the all-higher probe beside the base build (started once the
    # reference is known, on its thread)
    monkeypatch.setattr(P, "beside_base", lambda ex, shared, seeded: [0, 1] if ex.workers > 1 else None)
    init = E.LocalExecutor.__init__

    def with_driver(self, *a, **k):
        init(self, *a, **k)
        self.driver_slot = True
    monkeypatch.setattr(E.LocalExecutor, "__init__", with_driver)
    both = tmp_path / "b.json"
    assert main(common + ["--workers", "2", "-o", str(both)]) == 0
    b = json.loads(both.read_text())
    assert sorted(b["layer_precisions"]) == must and b["beside_base_build"]["all_higher_probe"] is True
    assert b["beside_base_build"]["layers_ranked"] == s["layers"]
    rank = [json.loads((tmp_path / f"{n}_sensitivity.json").read_text()) for n in ("s", "b")]
    assert [r["layer"] for r in rank[0]] == [r["layer"] for r in rank[1]]
    every = sorted(r["layer"] for r in rank[1])
    log = [json.loads(line) for line in open(tmp_path / "b_probes.jsonl")][1:]
    assert [rec["result"]["hit"] for rec in log if rec["artifact"] == every] == [True]
    assert [rec["result"]["hit"] for rec in log if rec["artifact"] == []] == [False]


class WhereAndWhether:
    """(pid, x >= 5): a monotone property, and which process evaluated it."""

    def __call__(self, x):
        return {"hit": x >= 5, "pid": os.getpid()}


def test_the_search_process_probes_beside_gpu_workers(pool, monkeypatch):
    """With a GPU per worker (forced here on the CPU pool) the search's own process evaluates the first probe of
    each batch, and takes more while the workers are busy: batches are one wider, each probe runs once, the
    answers and their order are those of a serial search, and the first error in order is the one raised."""
    from debugkit.debug.strategies import Prober, bisect_prefix, probe_slots
    monkeypatch.setattr(pool, "driver_slot", True, raising=False)
    assert probe_slots(pool) == 3
    prober = Prober(WhereAndWhether(), executor=pool)
    assert prober.many([7, 1, 9]) == [True, False, True]
    pids = [prober.known(x)[1]["pid"] for x in (7, 1, 9)]
    assert pids[0] == os.getpid() and prober.probes == 3
    assert bisect_prefix(20, prober, candidate=lambda k: k) == 5   # 3 points per round: a 4-fold shrink
    assert prober.rounds == 1 + 2
    with pytest.raises(ValueError, match="bad 1"):   # this process's error is the first in order
        Prober(Fails(), executor=pool).many([1, 2, 3])
    with pytest.raises(ValueError, match="bad 2"):   # the first (here) passes, the workers' first error is raised
        Prober(FailsFrom2(), executor=pool).many([0, 2, 3])


class _ClaimingExecutor:
    """A stand-in for the worker pool whose one "worker" (a thread) takes item 1, holds it until this process has
    run items 2 and 3, then asks for the rest."""

    def __init__(self, events):
        self.events = events

    def map(self, fn, items, on_done=None, slots=None, claim=None):
        out = [None] * len(items)
        assert claim(0) is False          # the search's process took the first before the workers started
        assert claim(1) is True
        self.events["claimed 1"].set()
        out[1] = fn(items[1])
        for i in range(2, len(items)):    # this process took them while item 1 ran here
            assert claim(i) is False
        return out


def test_the_search_process_takes_the_next_probe_while_the_workers_are_busy():
    """_map_with_driver: this process and the workers each take the lowest probe no one has taken, so one slow
    probe on a worker does not hold the batch's other probes back; results come back in order."""
    import threading

    from debugkit.debug.strategies import _map_with_driver
    events = {"claimed 1": threading.Event(), "3 done": threading.Event()}
    where = {}

    def probe(x):
        if x == 0:
            assert events["claimed 1"].wait(10)
        if x == 1:
            assert events["3 done"].wait(10)
        where[x] = threading.current_thread().name
        if x == 3:
            events["3 done"].set()
        return x * 10
    assert _map_with_driver(_ClaimingExecutor(events), probe, [0, 1, 2, 3]) == [0, 10, 20, 30]
    here = threading.current_thread().name
    assert [where[i] == here for i in range(4)] == [True, False, True, True]


class FailsFrom2:
    def __call__(self, x):
        if x >= 2:
            raise ValueError(f"bad {x}")
        return False


def test_a_gpu_worker_on_the_search_process_gpu_takes_no_probe(tmp_path, planted, monkeypatch):
    """GPU workers, forced on the CPU pool with worker 1 "off this process's GPU": worker 1 ranks the layers beside
    the base build and takes probes; worker 0 (on this process's GPU) takes none, so probes run two at a time (this
    process and worker 1); the answer and the ranking's order are the serial search's."""
    from debugkit.cli.main import main
    from debugkit.debug import executor as E
    from debugkit.debug.strategies import probe_slots, probe_workers
    model, must = planted
    common = ["debug", "precision", model, "--fp16", "--atol", "1e-2", "--tactic-heuristic"]   # untimed: the same picks
    serial, gpus = tmp_path / "s.json", tmp_path / "g.json"
    assert main(common + ["-o", str(serial)]) == 0
    init = E.LocalExecutor.__init__

    def gpu_like(self, *a, **k):
        init(self, *a, **k)
        self.own_gpus = self.driver_slot = True
    monkeypatch.setattr(E.LocalExecutor, "__init__", gpu_like)
    monkeypatch.setattr(E.LocalExecutor, "off_caller_gpu", lambda self: [1])
    with E.LocalExecutor(2) as ex:
        assert probe_workers(ex) == [1] and probe_slots(ex) == 2
        monkeypatch.setattr(E.LocalExecutor, "off_caller_gpu", lambda self: [0, 1])   # all off this GPU: all probe
        assert probe_workers(ex) is None and probe_slots(ex) == 3
    monkeypatch.setattr(E.LocalExecutor, "off_caller_gpu", lambda self: [1])
    assert main(common + ["--workers", "2", "-o", str(gpus)]) == 0
    s, g = json.loads(serial.read_text()), json.loads(gpus.read_text())
    assert sorted(g["layer_precisions"]) == sorted(s["layer_precisions"]) == must
    assert g["probe_slots"] == 2 and g["beside_base_build"]["workers"] == [1]
    rank = [json.loads((tmp_path / f"{n}_sensitivity.json").read_text()) for n in ("s", "g")]
    assert [r["layer"] for r in rank[0]] == [r["layer"] for r in rank[1]]
    assert g["overflow_guess"] == {"layers": len(must), "confirmed": True}


def test_a_reference_that_fails_beside_the_base_build_fails_the_search_as_before(tmp_path, monkeypatch, capsys):
    """The reference's error, raised on its thread, reaches the user as it did when it ran first: same message,
    same exit code."""
    import onnx
    from onnx import TensorProto, helper

    from debugkit.cli import debug_precision as D
    from debugkit.cli.main import main
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "ints",
                          [helper.make_tensor_value_info(n, TensorProto.INT32, [2]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "ints.onnx")
    onnx.save(m, path)
    codes, errors = [], []
    for beside in (False, True):
        monkeypatch.setattr(D, "REFERENCE_BESIDE_BASE", beside)
        codes.append(main(["debug", "precision", path, "--fp16", "-o", str(tmp_path / f"{beside}.json")]))
        errors.append([ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln])
    assert codes[0] == codes[1] != 0 and errors[0] == errors[1]
    assert "has no layers that compute float values" in errors[0][0]
