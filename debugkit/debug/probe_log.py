"""ProbeLog: every probe of a search as one JSON line (artifact, result, cost), so `--resume` continues a search.

The first line holds the search's meta: its fingerprint (`debugkit.debug.fingerprint`: model hash, every option
that changes answers, the feeds' hash). Resuming a log whose meta differs in any entry is refused, naming each
differing option with both full values: its probes answered another question. Probes are looked up by their
artifact (a JSON value: a sorted list of node names, a prefix count, ...), so a resumed search replays answered
probes for free and only builds what is new. A torn last line (the search was killed while writing it) is dropped
with a warning; a damaged line before it is an error.
"""
from __future__ import annotations

import json
import os

from native.errors import UsageError
from native.files import append_text, read_side_text, write_text
from native.logger import G_LOGGER


class ProbeLogError(UsageError):
    """A probe log is unreadable or belongs to another model / search / set of options."""


def _key(artifact) -> str:
    return json.dumps(artifact, sort_keys=True, separators=(",", ":"), default=str)


def _show(value) -> str:
    return "(not recorded)" if value is _MISSING else json.dumps(value, sort_keys=True, default=str)


_MISSING = object()


def meta_differences(theirs: dict, ours: dict, keys=None) -> list:
    """[(key, their value, our value)] for every key of either side (or of `keys`) whose values differ."""
    keys = list(keys) if keys is not None else list(dict.fromkeys([*ours, *theirs]))
    return [(k, theirs.get(k, _MISSING), ours.get(k, _MISSING)) for k in keys
            if theirs.get(k, _MISSING) != ours.get(k, _MISSING)]


class ProbeLog:
    """Append-only JSON-lines log of probes.

    path: the file (None keeps the log in memory only). meta: a JSON dict naming what is searched (the search's
    fingerprint); `resume=True` loads an existing file's probes after checking its meta: every key of either side
    must agree, or only `meta_keys` when given.
    """

    def __init__(self, path, meta: dict, *, resume: bool = False, meta_keys=None):
        self.path = os.fspath(path) if path is not None else None
        self.meta = json.loads(json.dumps(meta, sort_keys=True, default=str))
        self.records: list[dict] = []
        self._index: dict[str, dict] = {}
        self.resumed = 0
        if resume and self.path and os.path.exists(self.path):
            self._load(meta_keys)
        elif resume and self.path:
            raise ProbeLogError(f"--resume: probe log {self.path} does not exist (run without --resume to start one)")
        elif self.path:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            write_text(self.path, json.dumps({"meta": self.meta}, sort_keys=True) + "\n", "probe log")

    def _read_lines(self) -> list:
        try:
            raw = read_side_text(self.path, "probe log")
        except UnicodeDecodeError as e:
            raise ProbeLogError(f"probe log {self.path} is not a debugkit probe log ({e})") from None
        lines = raw.splitlines()
        out = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except (ValueError, RecursionError) as e:
                last = all(not rest.strip() for rest in lines[i + 1:])
                if not last or i == 0:
                    raise ProbeLogError(f"probe log {self.path} line {i + 1} is not JSON ({e}); it is damaged or "
                                        f"not a debugkit probe log") from None
                G_LOGGER.warning(f"probe log {self.path}: its last line (line {i + 1}) is torn (the search was "
                                 f"stopped while writing it); dropping that probe, it will run again")
                # appends must not continue the torn line
                write_text(self.path, "".join(x + "\n" for x in lines[:i]), "probe log")
        return out

    def _load(self, keys):
        lines = self._read_lines()
        if not lines or not isinstance(lines[0], dict) or "meta" not in lines[0]:
            raise ProbeLogError(f"probe log {self.path} has no meta line; it is not a debugkit probe log")
        theirs = lines[0]["meta"]
        diff = meta_differences(theirs, self.meta, keys)
        if diff:
            what = "; ".join(f"{k}: the log has {_show(a)}, this search has {_show(b)}" for k, a, b in diff)
            raise ProbeLogError(f"--resume: probe log {self.path} belongs to another search ({what}); "
                                f"run with the log's options, or use another --log path, or drop --resume")
        for rec in lines[1:]:
            if isinstance(rec, dict) and "artifact" in rec:
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
