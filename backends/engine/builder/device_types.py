"""Per-layer device placement on the builder config (TensorRT's IBuilderConfig device-type API, seed 000 L31–70).

`DeviceType.GPU` means "the host device" here (the CPU stands in for the GPU); `DeviceType.DLA` asks for the emulated
DLA. Layers are keyed by name, so a setting made on a network layer also finds the engine layer that fused it.
"""
from __future__ import annotations

import enum

from native.dla.profiles import get_profile
from native.dla.rules import LayerFacts, RuleContext, check
from native.errors import UsageError
from native.logger import G_LOGGER


class DeviceType(enum.Enum):
    GPU = "gpu"
    DLA = "dla"


class EngineCapability(enum.Enum):
    STANDARD = "standard"
    SAFETY = "safety"
    DLA_STANDALONE = "dla_standalone"


class TensorFormat(enum.IntEnum):
    """TensorRT's tensor formats; `tensor.allowed_formats` is a bit mask of 1 << format."""
    LINEAR = 0
    CHW2 = 1
    HWC8 = 2
    CHW4 = 3
    CHW16 = 4
    CHW32 = 5
    DHWC8 = 6
    CDHW32 = 7
    HWC = 8
    DLA_LINEAR = 9
    DLA_HWC4 = 10
    HWC16 = 11


def _layer_name(layer) -> str:
    name = layer if isinstance(layer, str) else getattr(layer, "name", None)
    if not name:
        raise UsageError(f"expected a layer or a layer name, got {layer!r}")
    return name


class DeviceTypeMixin:
    """The device-type half of BuilderConfig: explicit per-layer types, the default, DLA core and profile."""

    @property
    def _device_types(self) -> dict:
        return self.__dict__.setdefault("_device_types_map", {})

    @property
    def default_device_type(self) -> DeviceType:
        return self.__dict__.get("_default_device_type", DeviceType.GPU)

    @default_device_type.setter
    def default_device_type(self, value):
        self.__dict__["_default_device_type"] = DeviceType(value) if not isinstance(value, str) or value in (
            "gpu", "dla") else DeviceType.GPU

    @property
    def dla_core(self) -> int:
        return self.__dict__.get("_dla_core", 0)

    @dla_core.setter
    def dla_core(self, core: int):
        n = get_profile(self.dla_profile).num_cores
        if not 0 <= int(core) < n:
            raise UsageError(f"DLA core {core} does not exist; the {self.dla_profile} profile has cores 0..{n - 1}")
        self.__dict__["_dla_core"] = int(core)

    @property
    def dla_profile(self) -> str:
        return self.__dict__.get("_dla_profile", "orin")

    @dla_profile.setter
    def dla_profile(self, name: str):
        self.__dict__["_dla_profile"] = get_profile(name).name

    @property
    def engine_capability(self) -> EngineCapability:
        return self.__dict__.get("_engine_capability", EngineCapability.STANDARD)

    @engine_capability.setter
    def engine_capability(self, cap):
        self.__dict__["_engine_capability"] = EngineCapability(cap)

    def set_device_type(self, layer, device_type: DeviceType):
        self._device_types[_layer_name(layer)] = DeviceType(device_type)

    def get_device_type(self, layer) -> DeviceType:
        return self._device_types.get(_layer_name(layer), self.default_device_type)

    def is_device_type_set(self, layer) -> bool:
        return _layer_name(layer) in self._device_types

    def reset_device_type(self, layer):
        self._device_types.pop(_layer_name(layer), None)

    def can_run_on_dla(self, layer) -> bool:
        """Whether the DLA runs this network layer under this config; `dla_reason(layer)` says why not."""
        return self.dla_verdict(layer).ok

    def dla_reason(self, layer) -> str:
        return self.dla_verdict(layer).reason

    def dla_verdict(self, layer):
        return check(network_layer_facts(layer, self), rule_context(self))

    def uses_dla(self) -> bool:
        return self.default_device_type is DeviceType.DLA or DeviceType.DLA in self._device_types.values() or \
            self.engine_capability is EngineCapability.DLA_STANDALONE

    def device_types_json(self) -> dict:
        return {"default_device_type": self.default_device_type.value, "dla_core": self.dla_core,
                "dla_profile": self.dla_profile, "engine_capability": self.engine_capability.value,
                "device_types": {k: v.value for k, v in sorted(self._device_types.items())}}


# what the DLA rules (native/dla/rules.py) are told about a network layer, before fusion: here, beside the
# placement API that asks (`can_run_on_dla`), so the DLA pass and the config share it without an import cycle

def rule_context(config) -> RuleContext:
    return RuleContext(get_profile(config.dla_profile), fp16=config.get_flag("fp16"),
                       int8=config.get_flag("int8"), calibrator=config.int8_calibrator)


def dla_precision(config, constraint=None) -> str:
    if constraint in ("float16", "int8", "float32"):
        return constraint
    if config.get_flag("int8"):
        return "int8"
    return "float16" if config.get_flag("fp16") else "float32"


def _const_of(t):
    p = getattr(t, "producer", None)
    return p.weights.get("value") if p is not None and p.kind == "Constant" else None


def network_layer_facts(layer, config) -> LayerFacts:
    """Facts about a NetworkDefinition layer (before fusion) for `config.can_run_on_dla(layer)`."""
    net = layer.network
    consumers = [c for c in net.layers if any(t is not None and t in c.inputs for t in layer.outputs)]
    explicit = config.is_device_type_set(layer) and config.get_device_type(layer) is DeviceType.DLA
    params = dict(layer.params)
    if layer.kind in ("Cast", "Identity") and layer.inputs and layer.inputs[0] is not None:
        prod = layer.inputs[0].producer
        params["from_comparison"] = prod is not None and prod.kind == "ElementWise" and \
            prod.params.get("op") in ("EQUAL", "GREATER", "LESS")
    if layer.kind == "Cast":
        to = params.get("to")
        params["to"] = getattr(to, "value", to)
    prec = layer.precision.value if layer.precision is not None else None

    known = _network_shapes(net, config)

    def shape(t):
        if t is None:
            return None
        if t.shape is not None and all(int(d) >= 0 for d in t.shape) or t.name not in known:
            return list(t.shape) if t.shape is not None else None
        return known[t.name]

    facts = LayerFacts(layer.name, layer.kind, params, dict(layer.weights), [shape(t) for t in layer.inputs],
                       [shape(t) for t in layer.outputs], [_const_of(t) for t in layer.inputs],
                       dla_precision(config, prec), [getattr(t, "dynamic_range", None) for t in layer.inputs],
                       [t.dynamic_range for t in layer.outputs], [], any(t.is_network_output for t in layer.outputs),
                       explicit, prec is not None)
    facts.consumers = [network_layer_facts_shallow(c, config) for c in consumers]
    return facts


def _network_shapes(net, config) -> dict:
    """Every tensor's shape, from one run of the network at the profile's opt shapes (cached per network)."""
    key = (len(net.layers), tuple(tuple(t.shape or ()) for t in net.inputs))
    cache = net.__dict__.setdefault("_dla_shapes", {})
    if key not in cache:
        import numpy as np
        from backends.engine.builder.feeds import opt_feeds   # the network's one run for its shapes
        from backends.engine.builder.lower import lower
        from backends.engine.runtime.executor import GraphExecutor
        g = lower(net)
        try:
            env = GraphExecutor(g, "cpu", keep_all=True).run(
                opt_feeds(g, config.profiles[0] if config.profiles else None))
            cache[key] = {k: list(np.shape(v)) for k, v in env.items() if isinstance(v, np.ndarray)}
        except Exception as e:   # shapes stay unknown; the rules then say which shape they needed
            G_LOGGER.verbose(f"DLA checks: could not run the network for shapes ({e})")
            cache[key] = {}
    return cache[key]


def network_layer_facts_shallow(layer, config) -> LayerFacts:
    prec = layer.precision.value if layer.precision is not None else None
    explicit = config.is_device_type_set(layer) and config.get_device_type(layer) is DeviceType.DLA
    params = dict(layer.params)
    if "to" in params:
        params["to"] = getattr(params["to"], "value", params["to"])
    return LayerFacts(layer.name, layer.kind, params, precision=dla_precision(config, prec), explicit_dla=explicit,
                      precision_set=prec is not None)
