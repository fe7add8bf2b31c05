"""Tactic preparations reused across builds: packed GEMM weights, Winograd-transformed kernels, weights rounded to
a layer's precision. With a warm timing cache a rebuild times nothing, and without this it would still redo every
chosen tactic's `prepare` (a third of a warm ResNet-18 rebuild).

Entries are keyed by content: the tactic (device, kind, name, class), the layer's params, precision, format and
math, every weight's name, dtype, shape and bytes, and a stamp of the code that prepares them (the `native`
package's files and a user tactic's own module: size and mtime), so an edited kernel or tactics module never gets
a stale preparation. A cache lives with a timing cache (`TimingCache.prepared`); with a timing cache file F it is
stored beside it as F.prep (JSON index and 64-byte aligned arrays, each with its CRC32, mapped read-only on load
and checked on first use). Only the preparations the last build used, and older ones up to MAX_BYTES, are kept.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import zlib

import numpy as np

from native.errors import PlanError
from native.files import check_side_file, write_bytes
from native.logger import G_LOGGER
from native.tactics import Tactic

MAGIC = b"DKPREP\r\n"
VERSION = 1
_HEAD = struct.Struct("<8sIQ")   # magic, version, index length
ALIGN = 64
MAX_BYTES = 1 << 30   # older entries beyond this are dropped when the file is rewritten


class PrepCacheError(PlanError):
    """A tactic-preparation cache file (F.prep beside a timing cache) is corrupt."""


def _stat_stamp(paths) -> list:
    out = []
    for p in sorted(paths):
        try:
            st = os.stat(p)
            out.append([p, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([p, None, None])
    return out


_NATIVE_STAMP: list = []


def _native_stamp() -> str:
    """Size and mtime of every file of the `native` package (the built-in kernels and their prepare code)."""
    if not _NATIVE_STAMP:
        import native
        root = os.path.dirname(os.path.abspath(native.__file__))
        files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")]
        _NATIVE_STAMP.append(hashlib.sha1(json.dumps(_stat_stamp(files)).encode()).hexdigest())
    return _NATIVE_STAMP[0]


def code_stamp(tactic) -> str:
    """What the preparation's code is: the native package, plus the tactic's own module when it lives elsewhere."""
    import sys
    mod = sys.modules.get(type(tactic).__module__)
    path = getattr(mod, "__file__", None)
    extra = _stat_stamp([path]) if path and not type(tactic).__module__.startswith("native.") else []
    return _native_stamp() + (json.dumps(extra) if extra else "")


def worth_caching(tactic, op) -> bool:
    """Whether `prepare` does real work: the tactic packs/transforms, or the weights are rounded to a precision."""
    return bool(op.weights) and (type(tactic).prepare is not Tactic.prepare or op.precision != "float32"
                                 or bool(op.math))


def prep_key(device_name, tactic, op) -> str:
    h = hashlib.sha1()
    cls = type(tactic)
    h.update(json.dumps([VERSION, device_name, tactic.kind, tactic.name, f"{cls.__module__}.{cls.__qualname__}",
                         code_stamp(tactic), op.params, op.precision, op.format, op.math, list(op.output_types)],
                        sort_keys=True, default=str).encode())
    for name in sorted(op.weights):
        a = op.weights[name]
        if not isinstance(a, np.ndarray) or a.dtype.kind in "OUSV":
            return ""   # not plain array data: not cached
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
    return h.hexdigest()


class PrepCache:
    """key -> {"names": [[weight name, "new"|"keep"]...], "arrays": {name: ndarray}} (see the module docstring)."""

    def __init__(self):
        self.entries: dict[str, dict] = {}
        self.used: set[str] = set()      # keys the current build's final choices used
        self.added: set[str] = set()     # keys not yet in the file
        self.hits = 0
        self.misses = 0
        self.path = None
        self.last_key = None

    def prepare(self, device, tactic, op, *, final=True) -> dict:
        """device.prepare(tactic, op), from the cache when this exact preparation was made before. `last_key` is
        the entry's key (None: not cached), for a caller that replays this preparation (selection_memo.py)."""
        self.last_key = None
        if not worth_caching(tactic, op):
            return device.prepare(tactic, op)
        key = prep_key(device.name, tactic, op)
        if not key:
            return device.prepare(tactic, op)
        self.last_key = key
        entry = self.entries.get(key)
        if entry is not None and self._verified(key, entry):
            self.hits += 1
            if final:
                self.used.add(key)
            return {name: (entry["arrays"][name] if how == "new" else op.weights[name])
                    for name, how in entry["names"]}
        self.misses += 1
        prepared = device.prepare(tactic, op)
        names, arrays = [], {}
        for name, v in prepared.items():
            if v is op.weights.get(name):
                names.append([name, "keep"])
            elif isinstance(v, np.ndarray) and v.dtype.kind not in "OUSV":
                names.append([name, "new"])
                arrays[name] = v
            else:
                self.last_key = None
                return prepared   # a device buffer or object data: not cached
        self.entries[key] = {"names": names, "arrays": arrays, "verified": True}
        self.added.add(key)
        if final:
            self.used.add(key)
        return prepared

    def _verified(self, key, entry) -> bool:
        """Check a loaded entry's CRC32s once; a mismatch is a corrupt file (named), not a silent wrong weight."""
        if entry.get("verified"):
            return True
        for name, a in entry["arrays"].items():
            if zlib.crc32(memoryview(a.reshape(-1).view(np.uint8))) != entry["crc"][name]:
                raise PrepCacheError(f"tactic-preparation cache {self.path} is corrupt (weight '{name}' of entry "
                                     f"{key[:12]} fails its CRC32); delete it, it is rebuilt on the next build")
        entry["verified"] = True
        return True

    def start_build(self):
        self.used = set()

    # --- the file ---------------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path) -> "PrepCache":
        """The cache stored at `path` (empty when there is none). Arrays are read-only views of the mapped file."""
        cache = cls()
        cache.path = path
        if not os.path.lexists(path):
            return cache
        if check_side_file(path, "timing cache preparations") == 0:
            return cache
        try:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            magic, version, index_len = _HEAD.unpack_from(mm, 0)
            if magic != MAGIC:
                raise ValueError("not a tactic-preparation cache (bad magic bytes)")
            if version != VERSION:
                G_LOGGER.verbose(f"tactic-preparation cache {path} has version {version}, this debugkit writes "
                                 f"{VERSION}; starting a new one")
                return cache
            index = json.loads(bytes(mm[_HEAD.size:_HEAD.size + index_len]).decode())
            start = _HEAD.size + index_len
            start += (-start) % ALIGN
            for key, e in index.items():
                arrays, crc = {}, {}
                for name, ref in e["arrays"].items():
                    offset, nbytes = start + int(ref["offset"]), int(ref["nbytes"])
                    if offset + nbytes > len(mm):
                        raise ValueError(f"entry {key[:12]} runs past the end of the file (truncated)")
                    dtype = np.dtype(ref["dtype"]) if ref["dtype"] != "bfloat16" else \
                        np.dtype(__import__("ml_dtypes").bfloat16)
                    arrays[name] = np.frombuffer(mm, dtype, nbytes // dtype.itemsize, offset).reshape(ref["shape"])
                    crc[name] = int(ref["crc"])
                cache.entries[key] = {"names": [list(x) for x in e["names"]], "arrays": arrays, "crc": crc}
        except (OSError, ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as e:
            raise PrepCacheError(f"tactic-preparation cache {path} is corrupt ({type(e).__name__}: "
                                 f"{str(e)[:160]}); delete it, it is rebuilt on the next build") from None
        return cache

    def save(self, path):
        """Write the entries the last build used, then older ones up to MAX_BYTES (only when something is new)."""
        if not self.added and os.path.exists(path):
            return
        keys = [k for k in self.entries if k in self.used]
        size = sum(a.nbytes for k in keys for a in self.entries[k]["arrays"].values())
        for k in self.entries:
            if k not in self.used and k not in self.added:   # older entries from the file, while they fit
                n = sum(a.nbytes for a in self.entries[k]["arrays"].values())
                if size + n <= MAX_BYTES:
                    keys.append(k)
                    size += n
        index, parts, offset = {}, [], 0
        for k in keys:
            e = self.entries[k]
            refs = {}
            for name, a in e["arrays"].items():
                pad = (-offset) % ALIGN
                if pad:
                    parts.append(b"\0" * pad)
                    offset += pad
                buf = memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
                refs[name] = {"offset": offset, "nbytes": buf.nbytes, "dtype": a.dtype.name, "shape": list(a.shape),
                              "crc": zlib.crc32(buf)}
                parts.append(buf)
                offset += buf.nbytes
            index[k] = {"names": e["names"], "arrays": refs}
        head = json.dumps(index, sort_keys=True).encode()
        pre = _HEAD.pack(MAGIC, VERSION, len(head))
        write_bytes(path, [pre, head, b"\0" * ((-(len(pre) + len(head))) % ALIGN), *parts],
                    "timing cache preparations", streamable=False)
        self.added = set()
        self.path = path
