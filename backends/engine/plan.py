"""The plan file: a versioned binary format with a JSON header and 64-byte-aligned raw weight buffers.

Layout (little endian):
    magic b"DKPLAN\\r\\n" | u32 format_version | u32 reserved | u64 header_len | u64 blob_len |
    u32 header_crc32 | u32 blob_crc32 | header (UTF-8 JSON) | zero padding to 64 | blob
The header records the producer version, device fingerprint, build config and every layer with its tactic id
and source ONNX nodes; weights are referenced by offset. Loading never runs code (no pickle).
"""
from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib

import numpy as np

from backends.engine.engine_graph import Graph, Node, TensorInfo
from backends.engine.plan_schema import check_header
from native.device import get_device
from native.errors import PlanError
from native.files import write_bytes

MAGIC = b"DKPLAN\r\n"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sIIQQII")
ALIGN = 64


@functools.lru_cache(maxsize=1)
def producer_version():
    """The installed debugkit's version (read once: the metadata lookup costs milliseconds per plan)."""
    try:
        from importlib.metadata import version
        return version("debugkit")
    except Exception:
        return "0.1.0"


class _BlobWriter:
    """The plan's array bytes. An array several layers share is stored once: the same object (a constant two
    bodies were given), or equal bytes of the same dtype and shape (the same initializer parsed into two arrays;
    which happens depends on the onnx/numpy releases)."""

    def __init__(self):
        self.parts, self.size = [], 0
        self.written = {}   # id(array) -> (array, ref)
        self.by_content = {}   # (dtype, shape, digest) -> ref

    def add(self, arr) -> dict:
        seen = self.written.get(id(arr))
        if seen is not None and seen[0] is arr:
            return dict(seen[1])
        key = None
        if isinstance(arr, np.ndarray) and arr.dtype.kind not in "OUS" and arr.nbytes >= 64:
            data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            key = (arr.dtype.str, arr.shape, hashlib.blake2b(memoryview(data), digest_size=20).digest())
            if key in self.by_content:
                return dict(self.by_content[key])
        ref = self._add(arr)
        if isinstance(arr, np.ndarray):
            self.written[id(arr)] = (arr, ref)
        if key is not None:
            self.by_content[key] = ref
        return ref

    def _add(self, arr) -> dict:
        arr = np.asarray(arr)
        if arr.dtype.kind in "OUS":
            return {"encoding": "json", "dtype": "object", "shape": list(arr.shape), "values": [str(x) for x in arr.ravel()]}
        pad = (-self.size) % ALIGN
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        # a view of the array's bytes, not a copy: the plan's bytes are assembled once, in pack_plan
        data = memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        ref = {"offset": self.size, "nbytes": data.nbytes, "dtype": arr.dtype.name, "shape": list(arr.shape)}
        self.parts.append(data)
        self.size += data.nbytes
        return ref


def _graph_to_json(graph: Graph, blob: _BlobWriter) -> dict:
    nodes = []
    for n in graph.nodes:
        try:
            json.dumps(n.params)
        except TypeError as e:
            raise PlanError(f"layer '{n.name}' ({n.kind}) has params that cannot be stored in a plan: {e}") from None
        nodes.append({"name": n.name, "kind": n.kind, "inputs": n.inputs, "outputs": n.outputs, "params": n.params,
                      "weights": {k: blob.add(v) for k, v in n.weights.items()},
                      "subgraphs": {k: _graph_to_json(g, blob) for k, g in n.subgraphs.items()},
                      "source_nodes": n.source_nodes, "precision": n.precision, "tactic_id": n.tactic_id,
                      "tactic_name": n.tactic_name,
                      "meta": {k: v for k, v in n.meta.items() if k in ("input_shapes", "output_shapes", "output_dtypes", "timings_ms",
                                                                      "fused_patterns", "layout", "folded_from",
                                                                      "output_types", "math", "precision_ms",
                                                                      "int8_note",
                                                                      "layout_ms", "tactic_config")}})
    return {"name": graph.name, "inputs": [t.to_json() for t in graph.inputs],
            "outputs": [t.to_json() for t in graph.outputs], "aliases": graph.aliases, "nodes": nodes,
            "meta": getattr(graph, "meta", {})}


def serialize_plan(graph: Graph, config, parts: bool = False):
    """The plan's bytes; `parts`: the list of buffers that make them up, in order (no joined copy: what a caller
    writing the plan to a file wants, see `write_plan_parts`)."""
    blob = _BlobWriter()
    header = plan_header(config)
    extras = header.pop("device_extras", None)
    header["graph"] = _graph_to_json(graph, blob)
    if extras:
        header["device_extras"] = extras
    pieces = plan_parts(header, blob.parts)
    return pieces if parts else b"".join(pieces)


def plan_header(config) -> dict:
    """What an engine reads of a plan's header, for an engine made from a built graph in memory
    (Runtime.engine_from_graph): the producer, the device fingerprint, the build config and the device's extras
    (the layer table and the weights are the graph itself)."""
    header = {"producer": {"name": "debugkit", "version": producer_version()},
              "device": get_device(config.device).fingerprint(), "build_config": config.to_json()}
    extras = get_device(config.device).plan_extras()
    if extras:
        header["device_extras"] = extras
    return header


def pack_plan(header: dict, body) -> bytes:
    """Header and weight blob → plan bytes (preamble with lengths and CRC32s, header, padding, blob). `body` is the
    blob's bytes or the list of its parts (buffers)."""
    return b"".join(plan_parts(header, body))


def plan_parts(header: dict, body) -> list:
    """pack_plan's bytes as a list of buffers (the weights are most of a plan: each copy of a ResNet's costs tens
    of ms, so they are joined once, or written to a file part by part)."""
    parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
    head = json.dumps(header, default=_json_default).encode()
    crc, size = 0, 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        size += memoryview(part).nbytes
    pre = _HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(head), size, zlib.crc32(head), crc)
    pad = (-(len(pre) + len(head))) % ALIGN
    return [pre, head, b"\0" * pad, *parts]


def write_plan_parts(parts, path) -> int:
    """Write a plan given as parts to `path` (whole or not at all: a temporary file renamed); returns its size."""
    return write_bytes(path, parts, "plan")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _array(ref, blob: memoryview):
    if ref.get("encoding") == "json":
        return np.array(ref["values"], dtype=object).reshape(ref["shape"])
    dtype = np.dtype(ref["dtype"]) if ref["dtype"] != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
    end = ref["offset"] + ref["nbytes"]
    if end > len(blob):
        raise PlanError("plan is truncated: a weight buffer runs past the end of the file")
    arr = np.frombuffer(blob[ref["offset"]:end], dtype=dtype).reshape(ref["shape"])
    return arr


def _graph_from_json(d, blob) -> Graph:
    g = Graph(name=d["name"], inputs=[TensorInfo.from_json(t) for t in d["inputs"]],
              outputs=[TensorInfo.from_json(t) for t in d["outputs"]], aliases=d.get("aliases", {}))
    g.meta = d.get("meta", {})
    nodes = []
    for n in d["nodes"]:
        nodes.append(Node(name=n["name"], kind=n["kind"], inputs=n["inputs"], outputs=n["outputs"],
                            params=n["params"], weights={k: _array(r, blob) for k, r in n["weights"].items()},
                            subgraphs={k: _graph_from_json(s, blob) for k, s in n["subgraphs"].items()},
                            source_nodes=n["source_nodes"], precision=n.get("precision", "float32"),
                            tactic_id=n.get("tactic_id"), tactic_name=n.get("tactic_name"), meta=n.get("meta", {})))
    g.set_nodes(nodes)
    return g


def read_plan_header(data) -> tuple[dict, memoryview]:
    """Validate and split a plan; raises PlanError saying whether it is not a plan, another version, truncated
    or corrupted."""
    mv = memoryview(data)
    if len(mv) < len(MAGIC) or bytes(mv[:len(MAGIC)]) != MAGIC:
        raise PlanError("not a debugkit plan file (bad magic bytes); build one with `debugkit convert` or "
                        "Builder.build_serialized_network")
    if len(mv) < _HEAD.size:
        raise PlanError(f"plan is truncated: {len(mv)} bytes, shorter than the {_HEAD.size}-byte preamble")
    magic, version, _, head_len, blob_len, head_crc, blob_crc = _HEAD.unpack(bytes(mv[:_HEAD.size]))
    if version != FORMAT_VERSION:
        raise PlanError(f"plan format version {version} cannot be read by this debugkit (reads version "
                        f"{FORMAT_VERSION}); rebuild the engine from the ONNX model")
    head_end = _HEAD.size + head_len
    blob_start = head_end + (-head_end) % ALIGN
    if len(mv) < blob_start + blob_len:
        raise PlanError(f"plan is truncated: {len(mv)} bytes, expected {blob_start + blob_len}")
    head = bytes(mv[_HEAD.size:head_end])
    if zlib.crc32(head) != head_crc:
        raise PlanError("plan is corrupted: header checksum mismatch")
    blob = mv[blob_start:blob_start + blob_len]
    if zlib.crc32(blob) != blob_crc:
        raise PlanError("plan is corrupted: weight checksum mismatch")
    try:
        header = json.loads(head.decode())
    except Exception as e:
        raise PlanError(f"plan is corrupted: header is not valid JSON ({e})") from None
    return header, blob


def deserialize_plan(data) -> tuple[dict, Graph]:
    header, blob = read_plan_header(data)
    check_header(header, len(blob))  # a crafted header with valid checksums stops here, named by its field path
    try:
        graph = _graph_from_json(header["graph"], blob)
    except PlanError:
        raise
    except Exception as e:
        raise PlanError(f"plan is corrupted: layer table unreadable ({type(e).__name__}: {e})") from None
    return header, graph
