"""Searches on Ray (skipped without Ray): one local Ray instance (2 CPUs, no dashboard) per module, whose workers run
in another working directory with another TMPDIR than this driver, as on a node that shares no filesystem with it.
The driver's model is given by a path relative to the driver's own working directory: a worker that used it would
fail. Answers must equal the serial ones and every artifact must land on the driver."""
import json
import os
import signal
import threading
import time

import pytest

from tests.debugkit.debug.test_precision import _search, planted  # noqa: F401  (the fixture)

ray = pytest.importorskip("ray")

# The callables below are defined in this test module, which a Ray worker cannot import: the workers run in another
# working directory and the repository's tests/ is not an installed package (a fresh clone installs debugkit, not
# its tests). Pickle this module's objects by value, as a user's own script's would be.
from ray import cloudpickle  # noqa: E402
import sys  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _one():
    return 1


def test_ray_auto_after_a_crashed_cluster_starts_a_local_one_quickly(monkeypatch, capsys):
    """RAY_ADDRESS (or the last `ray start`'s address file) names a head that is gone: auto starts a local
    instance instead of waiting minutes for it. Runs first: the module's cluster is not up yet."""
    import socket

    from debugkit.debug.ray_cluster import connect
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    t0 = time.monotonic()
    try:
        assert connect("auto", num_cpus=1).is_initialized()
        took = time.monotonic() - t0
        # the instance outlives the call that started it (its head processes die with the thread that started them)
        time.sleep(1)
        assert ray.get(ray.remote(_one).remote(), timeout=60) == 1
    finally:
        ray.shutdown()
    assert f"the cluster at 127.0.0.1:{port} (RAY_ADDRESS) does not answer" in capsys.readouterr().err
    assert took < 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("worker_cwd")
    worker_tmp = tmp_path_factory.mktemp("worker_tmp")
    (elsewhere / "README").write_text("a Ray worker's working directory, not the driver's\n")
    from native import config
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"working_dir": str(elsewhere),
                          "env_vars": {**config.single_core_env(), "TMPDIR": str(worker_tmp)}})
    try:
        yield {"cwd": str(elsewhere), "tmp": str(worker_tmp)}
    finally:
        ray.shutdown()


class WhereAmI:
    def __call__(self, _):
        import tempfile
        return os.getcwd(), tempfile.gettempdir(), os.getpid()


def test_ray_workers_run_elsewhere(cluster):
    from debugkit.debug.executor import RayExecutor
    ex = RayExecutor("auto")
    rows = ex.map(WhereAmI(), range(4))
    assert all(cwd != os.getcwd() and tmp == cluster["tmp"] for cwd, tmp, _ in rows), rows
    assert all(pid != os.getpid() for _, _, pid in rows)


def test_cuda_probes_on_a_cluster_without_gpus_are_refused(cluster):
    from debugkit.debug.executor import RayExecutor
    from native.errors import UsageError
    with pytest.raises(UsageError, match="the Ray cluster has no GPUs"):
        RayExecutor("auto", device="cuda")


def test_precision_on_ray_without_the_drivers_files_gives_the_serial_answer(cluster, tmp_path, planted,  # noqa
                                                                               monkeypatch):
    model, must = planted
    monkeypatch.chdir(os.path.dirname(model))
    rel = os.path.basename(model)            # exists only relative to the driver's working directory
    rc, res = _search(tmp_path, rel, "--ray", "auto")
    assert rc == 0 and sorted(res["layer_precisions"]) == must
    for suffix in (".json", "_sensitivity.json", ".html", "_probes.jsonl"):
        assert (tmp_path / f"prec{suffix}").exists()                     # on the driver
    assert not [n for n in os.listdir(cluster["tmp"]) if n.startswith("debugkit_")]


def _ray_task_pids():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::ProbeActor"):
                        out.append(int(p))
            except OSError:
                pass
    return out


def test_a_ray_worker_killed_mid_search_is_retried_and_the_answer_holds(cluster, tmp_path, planted):  # noqa
    model, must = planted
    killed = []

    def killer():
        end = time.monotonic() + 120
        while time.monotonic() < end and not killed:
            pids = _ray_task_pids()
            log = tmp_path / "prec_probes.jsonl"
            if pids and log.exists() and len(log.read_text().splitlines()) >= 3:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.05)
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    rc, res = _search(tmp_path, model, "--ray", "auto")
    t.join(5)
    assert killed, "no Ray worker was killed (the search ended first)"
    assert rc == 0 and sorted(res["layer_precisions"]) == must


def test_sweep_on_ray_resolves_paths_on_the_driver_and_brings_results_back(cluster, tmp_path, monkeypatch):
    from debugkit.cli.main import main
    from tests.debugkit.debug.test_sweep import _zoo
    manifest = _zoo(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--models-file", os.path.basename(manifest), "--task-args", "--engine --onnxrt --fp16 --atol 1e-3"]
    rc1 = main([*argv, "-o", "serial"])
    rc2 = main([*argv, "-o", "onray", "--ray", "auto"])
    rows = {d: [(r["model"], r["status"], r["rc"]) for r in json.loads((tmp_path / d / "sweep.json").read_text())
                ["results"]] for d in ("serial", "onray")}
    assert rc1 == rc2 == 1 and rows["serial"] == rows["onray"]
    for m, _, _ in rows["onray"]:          # every model's outputs came back to the driver
        assert sorted(os.listdir(tmp_path / "onray" / m)) == sorted(os.listdir(tmp_path / "serial" / m))
    doc = json.loads((tmp_path / "onray" / "good" / "run.json").read_text())
    assert cluster["tmp"] not in json.dumps(doc)
    assert not [n for n in os.listdir(cluster["tmp"]) if n.startswith(("debugkit_", "sweep_"))]   # jobs cleaned up


def test_repeat_on_ray_without_the_drivers_files(cluster, tmp_path, monkeypatch):
    """debug repeat --ray: the iterations get the model's bytes (its path is relative to the driver's working
    directory), and their plans come back into --art-dir on the driver; no plan is left on the workers."""
    import onnx

    from debugkit.cli.main import main
    from tests.debugkit.conftest import chain_model
    onnx.save(chain_model(), tmp_path / "chain.onnx")
    monkeypatch.chdir(tmp_path)
    rc = main(["debug", "repeat", "chain.onnx", "--until", "2", "--ray", "auto", "--art-dir", "arts",
               "--log", "p.jsonl", "--input-shapes", "x:[2,4]"])
    assert rc == 0
    assert sorted(os.listdir(tmp_path / "arts" / "good")) == ["engine_0.plan", "engine_1.plan"]
    assert (tmp_path / "arts" / "good" / "engine_0.plan").read_bytes()[:6] == b"DKPLAN"
    left = [f for _, _, files in os.walk(cluster["tmp"]) for f in files if f.endswith(".plan")]
    assert left == [] and not os.path.exists(os.path.join(cluster["cwd"], "arts"))


def test_debug_build_on_ray_without_the_drivers_files(cluster, tmp_path, monkeypatch):
    """debug build --ray: each build gets the model's bytes, builds and checks on its actor, and its replay file and
    plan come back into --artifacts-dir on the driver; no plan is left on the workers."""
    import onnx

    from debugkit.cli.main import main
    from tests.debugkit.conftest import chain_model
    onnx.save(chain_model(), tmp_path / "chain.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["debug", "build", "chain.onnx", "--until", "2", "--ray", "auto", "--artifacts-dir", "arts",
                 "--save-plans", "--input-shapes", "x:[2,4]", "-q"]) == 0
    assert sorted(os.listdir(tmp_path / "arts" / "good")) == ["iter000.plan", "iter000_tactics.json",
                                                                "iter001.plan", "iter001_tactics.json"]
    assert (tmp_path / "arts" / "good" / "iter001.plan").read_bytes()[:6] == b"DKPLAN"
    left = [f for _, _, files in os.walk(cluster["tmp"]) for f in files if f.endswith(".plan")]
    assert left == [] and not os.path.exists(os.path.join(cluster["cwd"], "arts"))


class _Square:
    """A probe object whose items 3 raise: the first error in item order surfaces, as in a serial run."""

    def __call__(self, x):
        time.sleep(0.2 if x == 0 else 0.0)     # the first item finishes last
        if x == 3:
            raise ValueError("probe 3 failed")
        return x * x


def test_ray_executor_keeps_order_caps_workers_and_reuses_its_actors(cluster, capsys):
    """One long-lived actor per worker (never more than the cluster's CPUs), results in item order, a probe's own
    error raised in order; the same processes serve the next map (GPU tasks would get a fresh process each)."""
    from debugkit.debug.executor import RayExecutor
    ex = RayExecutor("auto", workers=5)
    try:
        assert ex.workers == 2 and "the Ray cluster has 2 CPU(s); using 2 workers" in capsys.readouterr().err
        seen = []
        assert ex.map(_Square(), [0, 1, 2], on_done=seen.append) == [0, 1, 4] and seen == [0, 1, 4]
        pids = sorted(ray.get([a.run.remote(_Pid(), None) for a in ex._actors]))
        with pytest.raises(ValueError, match="probe 3 failed"):
            ex.map(_Square(), [1, 3, 4])
        assert ex._actors == []            # an abandoned map's actors are gone
        assert ex.map(_Square(), [5]) == [25] and len(ex._actors) == 2
        assert len(set(pids)) == 2
    finally:
        ex.close()


class _Pid:
    def __call__(self, _):
        return os.getpid()
