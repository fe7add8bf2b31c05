"""The real-model corpus: the repository's manifest, model paths (fetched or from DEBUGKIT_CORPUS), feeds, and the
engine-vs-ONNX-Runtime check."""
from __future__ import annotations

import os

import numpy as np

from native import config
from tests.corpus import fetch_models

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CorpusUnavailable(Exception):
    """A corpus model is not available here; the message is the one-line reason a test skips with."""


def corpus_dir():
    """The directory of exported models (holding models/<file>), from DEBUGKIT_CORPUS; None when not set."""
    return config.corpus_dir()


def manifest():
    """The repository's own model manifest (tests/corpus/models.json): name, source, feeds, traits."""
    return fetch_models.load_manifest()


def cache_dir():
    return fetch_models.cache_dir()


def find_path(entry):
    """The model file of a manifest entry: exported ones from DEBUGKIT_CORPUS, pypi ones fetched into the cache
    (once; sha256-checked). Raises CorpusUnavailable with the reason when it cannot be had."""
    if entry["source"] == "exported":
        base = corpus_dir()
        if not base:
            raise CorpusUnavailable(f"{entry['name']} is an exported model (not fetchable): set DEBUGKIT_CORPUS to a "
                                    f"directory holding models/{entry['file']}")
        path = os.path.join(base, "models", entry["file"])
        if not os.path.isfile(path):
            raise CorpusUnavailable(f"{entry['name']}: {path} not found (DEBUGKIT_CORPUS={base})")
        return path
    hit = fetch_models.cached(entry)
    if hit:
        return hit
    if config.no_fetch():
        raise CorpusUnavailable(f"{entry['name']} is not cached and DEBUGKIT_NO_FETCH is set: run "
                                f"python tests/corpus/fetch_models.py")
    try:
        return fetch_models.fetch([entry], log=lambda line: None)[entry["name"]]
    except fetch_models.FetchError as e:
        raise CorpusUnavailable(str(e)) from None


def model_path(entry):
    """`find_path` for tests: a model that cannot be had skips the test with a one-line reason."""
    try:
        return find_path(entry)
    except CorpusUnavailable as e:
        import pytest
        pytest.skip(str(e))


def entry(name):
    return next(m for m in manifest() if m["name"] == name)


def make_feeds(entry, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in entry["feeds"].items():
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if "value" in spec:
            feeds[name] = np.full(shape, spec["value"], dtype=dtype)
        else:
            lo, hi = spec["range"]
            if dtype.kind in "iu":
                feeds[name] = rng.integers(lo, hi + 1, size=shape).astype(dtype)
            else:
                feeds[name] = rng.uniform(lo, hi, size=shape).astype(dtype)
    return feeds


def run_onnxrt(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def compare(ref: dict, ours: dict, rtol=1e-3, atol=1e-4):
    """Returns a list of mismatch descriptions (empty = match). Tiny outputs are compared relatively."""
    problems = []
    for name, r in ref.items():
        if name not in ours:
            problems.append(f"{name}: missing from engine outputs")
            continue
        o = np.asarray(ours[name])
        r = np.asarray(r)
        if o.shape != r.shape:
            problems.append(f"{name}: shape {o.shape} != ONNX Runtime {r.shape}")
            continue
        if r.dtype.kind not in "fc":
            if not np.array_equal(o, r):
                problems.append(f"{name}: {int(np.sum(o != r))} of {r.size} elements differ")
            continue
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        eff_atol = atol * min(1.0, max(scale, 1e-6) / 1e-2)  # below 1e-2 in magnitude, compare relatively
        diff = np.abs(o.astype(np.float64) - r.astype(np.float64))
        bad = diff > eff_atol + rtol * np.abs(r.astype(np.float64))
        if np.any(bad & ~(np.isnan(o) & np.isnan(r))):
            problems.append(f"{name}: max abs diff {float(np.nanmax(diff)):.3g} (atol {eff_atol:.3g}, rtol {rtol}), "
                            f"{int(bad.sum())} of {r.size} elements out of tolerance")
    return problems
