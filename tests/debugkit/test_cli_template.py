"""`debugkit template data-loader|check` write scripts that run as they are."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "example.onnx")   # overflows FP16 (docs/PRECISION.md)


def _python(*argv, cwd):
    p = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=300, cwd=cwd,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    return p.returncode, p.stdout + p.stderr


def test_data_loader_template_feeds_the_model(cli, tmp_path, chain):
    script = tmp_path / "dl.py"
    code, out, err = cli("template", "data-loader", chain, "-o", script, "--input-shapes", "x:[3,4]")
    assert code == 0, err
    assert "'x': ([3, 4], np.float32)" in script.read_text()
    code, out, err = cli("run", chain, "--engine", "--onnxrt", "--data-loader-script", script)
    assert code == 0 and "over 2 iteration(s)" in out   # the template's two feeds
    code, out, err = cli("template", "data-loader", chain, "-o", script)
    assert code == 2 and "exists; pass --force" in err


def test_check_template_is_a_working_check(cli, tmp_path, chain):
    script = tmp_path / "check.py"
    code, _, err = cli("template", "check", "-o", script)
    assert code == 0, err
    assert _python(script, EXAMPLE, cwd=tmp_path)[0] == 1          # FP16 overflows: the check fails
    rc, out = _python(script, chain, cwd=tmp_path)
    assert rc == 0 and "PASSED | y" in out, out


def test_template_bad_input_exits_2(cli, tmp_path):
    code, _, err = cli("template", "data-loader", tmp_path / "missing.onnx")
    assert code == 2 and "model file not found" in err
    code, _, err = cli("template", "check", "-o", tmp_path / "no" / "check.py")
    assert code == 2 and "does not exist" in err
