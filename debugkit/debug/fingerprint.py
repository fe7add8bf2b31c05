"""The fingerprint of a search: every option that can change its answers, one entry per option, so a resumed probe
log is checked against the question it answered and a mismatch names the option and both full values.

`search_fingerprint(args, model, feeds)` records the model's sha256, every parsed option (build, data, comparison,
check command, search mode; not the ones that only say where to write or how fast to go), the content hash of every
input file an option names (loader script, saved inputs, tactics module, replay and precision files), and the hash of
the feeds the search runs on (which also covers a loader script whose own inputs changed). Keys are the options'
spellings ("--atol", "--fp16/--int8/--fp8/--bf16", "--data-loader-script (content sha256)"), so the refusal reads
as the command line does.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

# options that never change a probe's answer: where things are written, logging, parallelism, resuming itself
NOT_ANSWERS = {"workers", "ray", "log", "resume", "verbose", "quiet", "log_file", "no_color", "output", "report",
               "json", "func", "art_dir", "artifacts", "artifacts_dir", "save_tactics", "save_inputs", "save_outputs",
               "ignore_fingerprint", "tool", "subtool", "debug_tool", "command"}
# files a search itself writes as it goes: their path is part of the question, their changing content is not
WRITTEN_BY_SEARCH = {"timing_cache", "calibration_cache"}


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def feeds_sha256(feeds) -> str:
    """sha256 over the feeds (one dict or a list of them): names, dtypes, shapes and bytes, in order."""
    h = hashlib.sha256()
    for it, f in enumerate(feeds if isinstance(feeds, (list, tuple)) else [feeds]):
        for name in sorted(f):
            a = np.ascontiguousarray(np.asarray(f[name]))
            h.update(f"{it}|{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
    return h.hexdigest()


def _spellings(args) -> dict:
    """dest -> the option's spelling(s) on the command line, from the parser that parsed `args` (if it says)."""
    parser = getattr(args, "_dk_parser", None)
    out: dict = {}
    for action in getattr(parser, "_actions", []):
        if action.option_strings:
            longest = max(action.option_strings, key=len)
            out.setdefault(action.dest, [])
            if longest not in out[action.dest]:
                out[action.dest].append(longest)
        elif action.dest not in ("help",):
            out.setdefault(action.dest, [action.dest])
    return {k: "/".join(v) for k, v in out.items()}


def _jsonable(value):
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return str(value)   # a Device (--device) is its name


def _files_named(value) -> list:
    """Existing files an option value names ('FILE', 'FILE.py:FUNC', or lists of them)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in items:
        if not isinstance(v, str) or not v:
            continue
        for cand in (v, v.rsplit(":", 1)[0]):
            if os.path.isfile(cand):
                out.append(cand)
                break
    return out


def options_record(options, *, exclude=()) -> dict:
    """{option spelling: value} for every answer-changing option of a parsed command line (an argparse Namespace or
    any object whose attributes are the options), plus '<option> (content sha256)' for files they name."""
    names = _spellings(options)
    skip = NOT_ANSWERS | set(exclude)
    record = {}
    for dest, value in sorted(vars(options).items()):
        if dest.startswith("_") or dest in skip or callable(value):
            continue
        key = names.get(dest, f"--{dest.replace('_', '-')}")
        record[key] = _jsonable(value)
        if dest in WRITTEN_BY_SEARCH:
            continue
        files = _files_named(value)
        if files:
            record[f"{key} (content sha256)"] = [file_sha256(p) for p in files]
    return record


def search_fingerprint(search: str, args, model_path=None, feeds=None, *, exclude=(), **extra) -> dict:
    """The probe log's meta for a search: its name, the model hash, every option (less `exclude`: options that only
    say how long to go on), the feeds' hash, and `extra`."""
    from backends.runners import model_sha256
    meta = {"search": search}
    if model_path is not None:
        meta["model (sha256)"] = model_sha256(model_path)
    meta.update(options_record(args, exclude=(*exclude, "model") if model_path is not None else exclude))
    if feeds is not None:
        meta["feeds (sha256 of the input arrays)"] = feeds_sha256(feeds)
    meta.update({k: _jsonable(v) for k, v in extra.items()})
    return meta
