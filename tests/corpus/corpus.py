"""The public real-model corpus: manifest, model paths, feeds, and the engine-vs-ONNX-Runtime check."""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def corpus_dir():
    env = os.environ.get("DEBUGKIT_CORPUS")
    if env:
        return env
    return os.path.join(os.path.dirname(REPO), "shared", "corpus")


def manifest():
    with open(os.path.join(corpus_dir(), "public_models.json")) as f:
        return json.load(f)["models"]


def cache_dir():
    return os.environ.get("DEBUGKIT_MODEL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "debugkit", "models"))


def fetch_shipped():
    """Fetch the shipped models with the corpus script into the cache dir (once); returns the dir."""
    dest = cache_dir()
    marker = os.path.join(dest, ".fetched")
    if not os.path.exists(marker):
        os.makedirs(dest, exist_ok=True)
        subprocess.run(["bash", os.path.join(corpus_dir(), "get_public_models.sh"), dest], check=True,
                       stdout=subprocess.DEVNULL)
        open(marker, "w").close()
    return dest


def model_path(entry):
    if entry["source"] == "exported":
        return os.path.join(corpus_dir(), entry["path"])
    return os.path.join(fetch_shipped(), entry["path"])


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
