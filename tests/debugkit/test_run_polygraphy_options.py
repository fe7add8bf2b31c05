"""run's options Polygraphy users reach for: --gen-script (a Python script with our API that does what the command
does), --exclude-outputs (Polygraphy's --onnx-exclude-outputs / --trt-exclude-outputs) and --fail-fast."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")   # overflows FP16 in its ReduceSum (docs/PRECISION.md)


def _script(path):
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PYTHONPATH"] = ROOT   # a clean environment: what earlier tests left in os.environ does not leak in
    p = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env)
    assert p.stdout.strip(), f"the script printed nothing; stderr:\n{p.stderr}\n--- script:\n{open(path).read()}"
    return p.returncode, p.stdout.strip().splitlines()[-1]


def test_gen_script_reproduces_the_run(cli, tmp_path, chain):
    for model, extra, want in ((chain, ["--input-shapes", "x:[3,4]"], 0), (EXAMPLE, ["--fp16"], 1)):
        gen = tmp_path / "gen.py"
        argv = ["run", model, "--engine", "--onnxrt", "--mark-all", "--atol", "1e-3", "y:1e-2", "--iterations", "2",
                "--seed", "3", *extra]
        code, out, _ = cli(*argv, "--gen-script", gen)
        assert code == 0 and "wrote" in out and os.access(gen, os.X_OK)
        assert "from debugkit.compare.comparator import Comparator" in gen.read_text()
        code, out, _ = cli(*argv)
        verdict = out.strip().splitlines()[-1]
        assert code == want
        assert _script(gen) == (want, verdict)   # the same exit code and the same verdict line


def test_gen_script_keeps_the_reduced_precision_check(cli, tmp_path):
    """--fp16 without tolerances: the script judges by the same relative L2 + cosine check and says so."""
    for extra, want in ((["--layer-precisions", "reduce:fp32"], 0), ([], 1)):
        gen = tmp_path / "gen.py"
        argv = ["run", EXAMPLE, "--engine", "--onnxrt", "--fp16", *extra]
        code, out, _ = cli(*argv, "--gen-script", gen)
        assert code == 0 and "funcs.compare_reduced" in gen.read_text()
        code, out, _ = cli(*argv)
        verdict = out.strip().splitlines()[-1]
        assert code == want and "check: --fp16 default" in verdict
        assert _script(gen) == (want, verdict)


def test_gen_script_refuses_what_it_cannot_express(cli, tmp_path, chain):
    code, _, err = cli("run", chain, "--engine", "--profile", "--gen-script", tmp_path / "g.py")
    assert code == 2 and "--gen-script cannot express --profile" in err and not (tmp_path / "g.py").exists()


def test_exclude_outputs_leaves_tensors_out(cli, tmp_path):
    j = tmp_path / "v.json"
    code, _, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--mark-all", "--json", j)
    doc = json.loads(j.read_text())
    assert code == 1 and doc["layerwise"]["first_divergence"]["tensor"] == "y" and doc["layerwise"]["compared"] == 3
    code, _, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--mark-all", "--exclude-outputs", "y",
                     "--json", j)
    doc = json.loads(j.read_text())
    assert doc["outputs"] == [] and (doc["layerwise"]["compared"], doc["layerwise"]["differ"]) == (2, 0)
    assert code == 1   # with the only output left out nothing is compared: not a pass


def test_exclude_outputs_unknown_name_is_exit_2(cli, chain):
    code, _, err = cli("run", chain, "--engine", "--onnxrt", "--exclude-outputs", "nope")
    assert code == 2 and "--exclude-outputs nope matches no output" in err


def test_fail_fast_stops_at_the_first_failed_iteration(cli, tmp_path):
    j = tmp_path / "v.json"
    code, _, _ = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--iterations", "3", "--json", j)
    assert code == 1 and json.loads(j.read_text())["iterations"] == 3
    code, _, err = cli("run", EXAMPLE, "--engine", "--onnxrt", "--fp16", "--iterations", "3", "--fail-fast",
                       "--json", j)
    doc = json.loads(j.read_text())
    assert code == 1 and doc["iterations"] == 1 and "--fail-fast" in err
