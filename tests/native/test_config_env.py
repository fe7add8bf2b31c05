"""native/config.py is the one place the package touches DEBUGKIT_* environment variables (issue 14): every read
goes through settings() or one of its live readers, and the variables handed to child processes are made by its
helpers, so the knobs are listed and documented in one module."""
import ast
import os

import pytest

from native import config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("debugkit", "backends", "native")
ALLOWED = {os.path.join("native", "config.py")}


def _environment_uses(tree):
    """Lines where the code touches the process environment: os.environ, os.getenv, os.putenv, a bare `environ`
    or `getenv` imported from os."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(a.name in ("environ", "getenv", "putenv") for a in node.names):
            lines.append(node.lineno)
    return lines


def _debugkit_names(tree):
    """Lines where code (not a docstring) names a DEBUGKIT_* variable: a string constant or a keyword argument."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and node.value.startswith("DEBUGKIT_"):
            lines.append(node.lineno)
        elif isinstance(node, ast.keyword) and (node.arg or "").startswith("DEBUGKIT_"):
            lines.append(node.value.lineno)
    return lines


def offenders(root=REPO):
    """Modules outside native/config.py that both touch the environment and name a DEBUGKIT_* variable in code:
    a read (or a write for a child) that bypasses the config module."""
    found = []
    for package in PACKAGES:
        for dirpath, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                if not f.endswith(".py") or rel in ALLOWED:
                    continue
                with open(os.path.join(root, rel), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read(), rel)
                env, names = _environment_uses(tree), _debugkit_names(tree)
                if env and names:
                    found.append(f"{rel}: environment at line(s) {env}, DEBUGKIT_* named at line(s) {names}")
    return found


def test_only_the_config_module_reads_debugkit_variables():
    bad = offenders()
    assert not bad, "read DEBUGKIT_* settings through native/config.py (settings() or its helpers):\n" + \
        "\n".join(bad)


@pytest.mark.parametrize("source, caught", [
    ('import os\nx = os.environ.get("DEBUGKIT_THREADS")\n', True),
    ('import os\nx = os.getenv("DEBUGKIT_LINT", "0")\n', True),
    ('from os import environ\nx = environ["DEBUGKIT_CORPUS"]\n', True),
    ('import os\nenv = dict(os.environ, DEBUGKIT_PLAN="p")\n', True),
    ('import os\nW = {"DEBUGKIT_THREADS": "1"}\nos.environ.update(W)\n', True),
    ('import os\nx = os.environ.get("NO_COLOR")\n', False),
    ('"""Set DEBUGKIT_THREADS to ..."""\nimport os\nx = os.environ.get("NO_COLOR")\n', False),
    ('raise ValueError("too large (DEBUGKIT_MAX_TENSOR_BYTES)")\n', False),
])
def test_the_check_catches_direct_reads(tmp_path, source, caught):
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / "mod.py").write_text(source)
    assert bool(offenders(str(tmp_path))) is caught


def test_live_readers_and_child_environments(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_CORPUS", "/some/where")
    monkeypatch.setenv("DEBUGKIT_MODEL_CACHE", "cache-dir")
    monkeypatch.delenv("DEBUGKIT_NO_FETCH", raising=False)
    assert config.corpus_dir() == "/some/where" and config.model_cache_dir() == "cache-dir"
    assert config.no_fetch() is False
    monkeypatch.setenv("DEBUGKIT_NO_FETCH", "1")
    assert config.no_fetch() is True
    env = config.child_env(plan="a.plan", tactics="t.json")
    assert env["DEBUGKIT_PLAN"] == "a.plan" and env["DEBUGKIT_TACTICS"] == "t.json"
    assert env["DEBUGKIT_CORPUS"] == "/some/where"   # the rest of the environment is inherited
    with pytest.raises(TypeError, match="unknown child setting 'bogus'"):
        config.child_env(bogus=1)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with config.environment(config.single_core_env()):
        assert os.environ["DEBUGKIT_THREADS"] == "1" and os.environ["OMP_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "8" and "MKL_NUM_THREADS" not in os.environ  # restored
