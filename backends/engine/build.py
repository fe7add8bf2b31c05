"""One-call helpers: ONNX model → network, and ONNX model → plan bytes with profiles from shapes."""
from __future__ import annotations

import copy

from backends.engine.builder import Builder, BuilderConfig, BuilderFlag, OptimizationProfile
from backends.engine.network import NetworkDefinition
from backends.engine.onnx_parser import OnnxParser
from backends.engine.plan import serialize_plan
from native.device import get_device
from native.logger import G_LOGGER


def parse_onnx(model, logger=None) -> tuple[NetworkDefinition, OnnxParser]:
    """Parse or raise ParseError/UnsupportedOpError listing every failing node."""
    network = NetworkDefinition()
    parser = OnnxParser(network, logger or G_LOGGER)
    parser.parse(model)
    parser.raise_if_failed(model if isinstance(model, str) else "model")
    return network, parser


def profile_from_shapes(network, shapes: dict, ranges: dict | None = None) -> OptimizationProfile | None:
    """A profile with min=opt=max=the given shape for every dynamic input (or explicit (min, opt, max))."""
    profile = OptimizationProfile()
    ranges = ranges or {}
    for t in network.inputs:
        if t.name in ranges:
            profile.set_shape(t.name, *ranges[t.name])
        elif t.shape is not None and any(d < 0 for d in t.shape) and t.name in shapes:
            s = tuple(shapes[t.name])
            profile.set_shape(t.name, s, s, s)
    return profile if profile.shapes else None


def source_model_record(model) -> dict:
    """What a plan records about the ONNX model it was built from, so a plan can be checked against a model later:
    sha256 of the model's canonical serialisation (the same whether it came from a path or a loaded ModelProto),
    its graph name, inputs and outputs."""
    import hashlib

    import onnx
    proto = model if isinstance(model, onnx.ModelProto) else (
        onnx.load_from_string(bytes(model)) if isinstance(model, (bytes, bytearray, memoryview)) else onnx.load(model))
    digest = hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()
    inits = {i.name for i in proto.graph.initializer}
    return {"sha256": digest, "graph_name": proto.graph.name,
            "inputs": [i.name for i in proto.graph.input if i.name not in inits],
            "outputs": [o.name for o in proto.graph.output]}


def build_plan_from_onnx(model, shapes: dict | None = None, flags=(), ranges=None, device=None, timing_feeds=None,
                         config: BuilderConfig | None = None, logger=None, parts: bool = False):
    """Plan bytes for an ONNX model (path, bytes or ModelProto); the header records the source model. `parts`:
    the plan as a list of buffers (plan.serialize_plan), for writing it to a file without a joined copy.
    `device` (a name or a Device; default: the config's, else the CPU): a device other than the config's builds
    with a copy of the config, so the caller's config keeps its own device. `flags` are set on the config."""
    network, _ = parse_onnx(model, logger)
    config = config or BuilderConfig()
    for f in flags:
        config.set_flag(BuilderFlag(f))
    if device is not None and get_device(device) is not config.device:
        config = copy.copy(config)
        config.device = device
    profile = profile_from_shapes(network, shapes or {}, ranges)
    if profile is not None and not config.profiles:
        config.add_optimization_profile(profile)
    network.source_model = source_model_record(model)   # the builder carries it into the plan header
    if not parts:
        return Builder(logger or G_LOGGER).build_serialized_network(network, config, timing_feeds=timing_feeds)
    graph = Builder(logger or G_LOGGER).build_graph(network, config, timing_feeds)
    return serialize_plan(graph, config, parts=True)
