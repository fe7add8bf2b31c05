"""ProbeLog: every probe of a search as one JSON line (artifact, result, cost), so `--resume` continues a search.

The first line holds the search's meta (model hash, search name, options that change answers). Resuming a log
whose meta differs is refused: its probes answered another question. Probes are looked up by their artifact
(a JSON value: a sorted list of node names, a prefix count, ...), so a resumed search replays answered probes for
free and only builds what is new.
"""
from __future__ import annotations

import json
import os

from native.errors import UsageError
from native.files import append_text, read_side_text, write_text


class ProbeLogError(UsageError):
    """A probe log is unreadable or belongs to another model / search."""


def _key(artifact) -> str:
    return json.dumps(artifact, sort_keys=True, separators=(",", ":"), default=str)


class ProbeLog:
    """Append-only JSON-lines log of probes.

    path: the file (None keeps the log in memory only). meta: a JSON dict naming what is searched; `resume=True`
    loads an existing file's probes after checking its meta on the keys both sides name (`meta_keys`, default all
    of this meta's keys).
    """

    def __init__(self, path, meta: dict, *, resume: bool = False, meta_keys=None):
        self.path = os.fspath(path) if path is not None else None
        self.meta = dict(meta)
        self.records: list[dict] = []
        self._index: dict[str, dict] = {}
        self.resumed = 0
        if resume and self.path and os.path.exists(self.path):
            self._load(meta_keys or list(self.meta))
        elif resume and self.path:
            raise ProbeLogError(f"--resume: probe log {self.path} does not exist (run without --resume to start one)")
        elif self.path:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            write_text(self.path, json.dumps({"meta": self.meta}, sort_keys=True) + "\n", "probe log")

    def _load(self, keys):
        raw = read_side_text(self.path, "probe log").splitlines()
        if raw and not raw[-1].endswith("}"):
            raw = raw[:-1]   # a line cut short by a crash or a full disk: that probe is simply run again
        try:
            lines = [json.loads(line) for line in raw if line.strip()]
        except (ValueError, RecursionError) as e:
            raise ProbeLogError(f"probe log {self.path} is not a debugkit probe log ({e})") from None
        if not lines or "meta" not in lines[0]:
            raise ProbeLogError(f"probe log {self.path} has no meta line; it is not a debugkit probe log")
        theirs = lines[0]["meta"]
        diff = [k for k in keys if k in self.meta and theirs.get(k) != self.meta[k]]
        if diff:
            what = ", ".join(f"{k}: log has {str(theirs.get(k))[:24]!r}, this search {str(self.meta[k])[:24]!r}"
                             for k in diff)
            raise ProbeLogError(f"--resume: probe log {self.path} belongs to another search ({what}); "
                                f"use another -o/--log path or drop --resume")
        for rec in lines[1:]:
            if "artifact" in rec:
                self.records.append(rec)
                self._index[_key(rec["artifact"])] = rec
        self.resumed = len(self.records)

    def lookup(self, artifact):
        """The logged record for this artifact, or None."""
        return self._index.get(_key(artifact))

    def record(self, artifact, result, cost: float = 0.0, **extra) -> dict:
        rec = {"artifact": artifact, "result": result, "cost": round(float(cost), 6), **extra}
        self.records.append(rec)
        self._index[_key(artifact)] = rec
        if self.path:
            append_text(self.path, json.dumps(rec, sort_keys=True, default=str) + "\n", "probe log")
        return rec

    def __len__(self):
        return len(self.records)
