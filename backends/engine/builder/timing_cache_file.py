"""The timing cache as a file (`--timing-cache F`): tactic timings reused across builds.

Entries are keyed by layer signature (kind, params, weight and input shapes/dtypes, precision, device); the file's
header records the device fingerprint, the debugkit version and the config bits that change what implementations
compute (precision flags). Timings measured under another header
are not evidence for this build: such a cache is refused unless `ignore_mismatch` (then its entries are used as
they are, like TensorRT's ignore-mismatch flag). A file that is not a timing cache, or is truncated, is refused
with the reason.
"""
from __future__ import annotations

import json
import math
import os

from backends.engine.builder.config import TimingCache
from backends.engine.plan import producer_version
from native.errors import PlanError
from native.files import read_side_file, write_json

FORMAT = "debugkit-timing-cache-file"
VERSION = 1


class TimingCacheError(PlanError):
    """A timing cache file is corrupt, of another version, or was measured for another device or config."""


def cache_header(config) -> dict:
    """What the timings depend on besides the layer: the device and the flags that change what kernels compute.
    (Tactic sources and user tactics modules only change which tactics are candidates: an entry lacking a
    candidate's timing is measured again.)"""
    fp = config.device.fingerprint()
    flags = sorted(f.value for f in config.flags if f.value in ("fp16", "int8", "tf32", "bf16", "fp8"))
    return {"device": fp, "flags": flags, "producer": producer_version()}


def load_timing_cache(path, config, ignore_mismatch=False) -> TimingCache:
    """The cache stored at `path` (an empty one if the file does not exist yet)."""
    if not os.path.lexists(path):
        return TimingCache()
    text = read_side_file(path, "timing cache")
    try:
        doc = json.loads(text.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise TimingCacheError(f"timing cache {path} is corrupt ({type(e).__name__}: {str(e)[:120]}); delete it "
                               f"or pass another --timing-cache file") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("entries"), dict):
        raise TimingCacheError(f"{path} is not a debugkit timing cache file (no '{FORMAT}' tag); delete it or "
                               f"pass another --timing-cache file")
    if doc.get("version") != VERSION:
        raise TimingCacheError(f"timing cache {path} has version {doc.get('version')}, this debugkit reads "
                               f"version {VERSION}; delete it to measure again")
    mine = cache_header(config)
    theirs = doc.get("header") or {}
    diff = [k for k in mine if theirs.get(k) != mine[k]]
    if diff and not ignore_mismatch:
        what = "; ".join(f"{k}: file {theirs.get(k)}, this build {mine[k]}" for k in diff)
        raise TimingCacheError(f"timing cache {path} was measured for another device or config ({what}); its "
                               f"timings would pick tactics for the wrong machine. Delete it, use another file, "
                               f"or pass --ignore-timing-cache-mismatch")
    for key, timings in doc["entries"].items():
        if not isinstance(timings, dict):
            raise TimingCacheError(f"timing cache {path} is corrupt: entry {key[:16]} is not a timing table")
        for tactic, v in timings.items():
            # -1: the tactic failed or refused when it was timed (tactic_selection.measure remembers that)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (v < 0 and v != -1):
                raise TimingCacheError(f"timing cache {path} is corrupt: entry {key[:16]}, tactic {tactic}: "
                                       f"timing {v!r} is neither a finite number >= 0 nor -1 (failed when timed); "
                                       f"delete the file to measure again")
    cache = TimingCache(doc["entries"])
    if not diff:   # preparations (packed / transformed weights) made under this header: F.prep beside F
        from backends.engine.builder.prep_cache import PrepCache
        cache.prepared = PrepCache.load(prep_path(path))

    notes = doc.get("device_notes", {})
    if not isinstance(notes, dict):
        raise TimingCacheError(f"timing cache {path} is corrupt: 'device_notes' is not an object; delete the file "
                               f"to measure again")
    if not diff:   # what builds learnt about this device (Device.build_notes), under the same header only
        cache.device_notes = notes
    return cache


def prep_path(path) -> str:
    """Where the tactic preparations of the timing cache file `path` are kept."""
    return f"{path}.prep"


def save_timing_cache(cache: TimingCache, path, config):
    doc = {"format": FORMAT, "version": VERSION, "header": cache_header(config), "entries": cache.entries}
    notes = dict(getattr(cache, "device_notes", None) or {})
    notes.update(config.device.build_notes())   # (a device's notes include what it took from the file)
    if notes:
        doc["device_notes"] = notes
    write_json(path, doc, "timing cache", streamable=False, sort_keys=True)
    if getattr(cache, "prepared", None) is not None:
        cache.prepared.save(prep_path(path))


def merge_timing_cache(cache: TimingCache, path, config):
    """Save `cache` to `path` keeping the entries other processes wrote there since it was loaded (parallel search
    workers share one --timing-cache file): under an exclusive lock the file is read again, its entries (same
    header) join `cache`, and the union is written atomically. A file that cannot be read is replaced."""
    import fcntl
    import hashlib

    from native.files.claims import lock_dir
    key = hashlib.sha256((os.path.realpath(path) + "#merge").encode()).hexdigest()[:32]
    fd = os.open(os.path.join(lock_dir(), key + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            theirs = load_timing_cache(path, config)
        except Exception:   # corrupt or another header: ours replaces it, as a plain save would
            theirs = None
        if theirs is not None:
            for k, v in theirs.entries.items():
                cache.entries.setdefault(k, v)
        save_timing_cache(cache, path, config)
    finally:
        os.close(fd)
