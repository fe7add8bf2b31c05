"""Tactic replay files: record which implementation every layer got, and build again with exactly those.

A replay file is JSON, versioned, keyed by engine layer name, each entry carrying the layer's signature (see
`algorithm_selector.layer_signature`), its ONNX nodes and the tactic (name and id):

    {"format": "debugkit-tactic-replay", "version": 1, "model": {"fingerprint": ..., "layers": N},
     "device": "cpu", "layers": {NAME: {"kind", "precision", "signature", "onnx_nodes", "tactic", "tactic_id",
                                        "timing_ms"}}}

The kind and precision let a device that chooses layout and precision by timing replay those choices too
(builder/timed_choice.py); files without "precision" replay tactics only.

`TacticRecorder` writes one from a build's report; `TacticReplayer` restricts every layer to its recorded
tactic. A file recorded for another model or format version is refused at load time; a stale file (layers
renamed, reshaped, or a tactic no longer registered) is refused at the end of the build with the layers named.
"""
from __future__ import annotations

import hashlib
import json
import os

from backends.engine.builder.config import AlgorithmSelector
from native.errors import BuildError
from native.files import read_side_json, write_json

FORMAT = "debugkit-tactic-replay"
VERSION = 1


class ReplayError(BuildError):
    """A tactic replay file cannot be used for this build (another model or version, stale layers)."""


def model_fingerprint(contexts) -> str:
    """Hash of the ONNX node names the engine's layers cover: the same model gives the same value whatever
    tactics were picked."""
    names = sorted(n for c in contexts for n in c.onnx_nodes)
    return hashlib.sha1(json.dumps(names).encode()).hexdigest()[:16]


def replay_document(contexts, choices, device="cpu") -> dict:
    layers = {}
    for c, a in zip(contexts, choices):
        layers[c.name] = {"kind": c.kind, "precision": c.precision, "signature": c.signature,
                          "onnx_nodes": list(c.onnx_nodes),
                          "tactic": a.implementation, "tactic_id": int(a.tactic_id),
                          "timing_ms": None if a.timing_ms is None else round(float(a.timing_ms), 4)}
    return {"format": FORMAT, "version": VERSION, "device": device,
            "model": {"fingerprint": model_fingerprint(contexts), "layers": len(layers)}, "layers": layers}


def save_replay(doc: dict, path):
    write_json(path, doc, "tactic replay file", indent=1, sort_keys=True)


def load_replay(path) -> dict:
    """Read and validate a replay file; ReplayError / InputFileError (native.files) naming what is wrong."""
    doc = read_side_json(path, "tactic replay file", error=ReplayError)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("layers"), dict):
        raise ReplayError(f"{path} is not a tactic replay file (no '{FORMAT}' format tag); write one with "
                          f"--save-tactics")
    if doc.get("version") != VERSION:
        raise ReplayError(f"{path} is a version {doc.get('version')} tactic replay file; this debugkit reads "
                          f"version {VERSION}: record it again with --save-tactics")
    return doc


class TacticRecorder(AlgorithmSelector):
    """Leaves every choice to the builder and records the final pick per layer; `save(path)` writes the file
    (done at the end of the build when constructed with a path)."""

    def __init__(self, path=None, device="cpu"):
        self.path, self.device = path, str(device)   # a Device or its name: the document records the name
        self.document: dict | None = None

    def report_algorithms(self, contexts, choices):
        self.document = replay_document(contexts, choices, self.device)
        if self.path:
            self.save(self.path)

    def save(self, path):
        if self.document is None:
            raise BuildError("TacticRecorder has nothing to save: no build has reported its choices yet")
        save_replay(self.document, path)


class TacticReplayer(AlgorithmSelector):
    """Restricts every layer to the tactic a replay file recorded for it (matched by layer name and signature).

    `strict`: a layer that is missing from the file, whose signature changed, or whose tactic is not among its
    choices makes the build fail at the end, naming all such layers; otherwise those layers are left to timing."""

    def __init__(self, replay, strict=True, source="replay"):
        self.doc = load_replay(replay) if isinstance(replay, (str, os.PathLike)) else replay
        self.source = str(replay) if isinstance(replay, (str, os.PathLike)) else source
        self.strict = strict
        self.stale: dict[str, str] = {}
        self.seen: set[str] = set()

    def select_algorithms(self, context, choices):
        self.seen.add(context.name)
        entry = self.doc["layers"].get(context.name)
        if entry is None:
            self.stale[context.name] = "not in the file"
            return []
        if entry.get("signature") != context.signature:
            self.stale[context.name] = (f"signature changed (file {entry.get('signature')}, build "
                                        f"{context.signature}: other shapes, params or precision)")
            return []
        for i, c in enumerate(choices):
            if int(c.tactic_id) == int(entry["tactic_id"]):
                return [i]
        self.stale[context.name] = (f"tactic '{entry.get('tactic')}' (id {entry['tactic_id']}) is not available "
                                    f"here (choices {[c.implementation for c in choices]}; a user tactic needs its "
                                    f"--tactics-module)")
        return []

    def report_algorithms(self, contexts, choices):
        names = {c.name for c in contexts}
        fp = self.doc.get("model", {}).get("fingerprint")
        matching = sum(1 for c in contexts if self.doc["layers"].get(c.name, {}).get("signature") == c.signature)
        if fp != model_fingerprint(contexts) and self.doc["layers"] and matching * 2 < len(self.doc["layers"]):
            raise ReplayError(f"tactic replay file {self.source} was recorded for another model (fingerprint {fp}, "
                              f"this one {model_fingerprint(contexts)}): only {matching} of its "
                              f"{len(self.doc['layers'])} layers match a layer of this engine")
        for name in self.doc["layers"]:
            if name not in names:
                self.stale.setdefault(name, "no longer in the engine")
        if self.stale and self.strict:
            lines = "; ".join(f"'{k}': {v}" for k, v in sorted(self.stale.items())[:12])
            more = f" (and {len(self.stale) - 12} more)" if len(self.stale) > 12 else ""
            raise ReplayError(f"tactic replay file {self.source} is stale for this build: {len(self.stale)} "
                              f"layer(s) no longer match: {lines}{more}. Record it again with --save-tactics")


def tactic_choices(doc: dict) -> dict:
    """{layer name: tactic name} of a replay document."""
    return {k: v["tactic"] for k, v in doc["layers"].items()}
