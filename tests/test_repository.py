"""The repository stands alone: no absolute machine paths in any tracked file, and the corpus manifest is its own."""
import json
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Spelled in pieces so that this file does not match itself.
_ROOTS = ["wo" + "rk", "tm" + "p", "ro" + "ot", "ho" + "me", "Us" + "ers", "mn" + "t"]
ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:" + "|".join(_ROOTS) + r")/[\w.-]")


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
    if not names:  # not a git checkout (an sdist): every file under the repository
        for root, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "v", "venv")]
            names += [os.path.relpath(os.path.join(root, f), REPO) for f in files]
    return names


def test_no_absolute_machine_paths():
    hits = []
    for name in tracked_files():
        path = os.path.join(REPO, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:4096]:  # binary (models, plans)
            continue
        for no, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if ABSOLUTE.search(line):
                hits.append(f"{name}:{no}: {line.strip()[:120]}")
    assert not hits, "absolute machine paths (use an argument or an env var):\n" + "\n".join(hits)


def test_the_pattern_catches_machine_paths():
    for bad in ["/" + "work/shared/corpus", "x = '/" + "tmp/dk_models'", "cd /" + "root/.cache", "/" + "home/u/x"]:
        assert ABSOLUTE.search(bad), bad
    for fine in ["../shared/corpus", "~/.cache/debugkit/models", "tests/corpus/models.json", "a/tmp/b"]:
        assert not ABSOLUTE.search(fine), fine


def test_manifest_is_complete():
    models = json.load(open(os.path.join(REPO, "tests", "corpus", "models.json")))["models"]
    assert len({m["name"] for m in models}) == len(models)
    for m in models:
        assert m["source"] in ("pypi", "exported"), m["name"]
        assert m["feeds"], m["name"]
        if m["source"] == "pypi":
            assert re.fullmatch(r"[\w.-]+==[\w.]+", m["package"]), m
            assert re.fullmatch(r"[0-9a-f]{64}", m["sha256"]), m
            assert m["member"].endswith(".onnx")
        else:
            assert m["file"].endswith(".onnx")


def test_exported_models_skip_with_a_reason_without_a_corpus(monkeypatch):
    from tests.corpus.corpus import CorpusUnavailable, entry, find_path
    monkeypatch.delenv("DEBUGKIT_CORPUS", raising=False)
    with pytest.raises(CorpusUnavailable, match="bert_mini is an exported model.*DEBUGKIT_CORPUS.*models/bert_mini.onnx"):
        find_path(entry("bert_mini"))


def test_fetch_checks_the_hash(tmp_path, monkeypatch):
    """A cached file whose bytes differ from the manifest's hash is not used."""
    from tests.corpus import fetch_models
    e = next(m for m in fetch_models.load_manifest() if m["source"] == "pypi")
    path = tmp_path / fetch_models.relpath(e)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not the model")
    assert fetch_models.cached(e, str(tmp_path)) is None
