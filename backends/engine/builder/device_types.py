"""Per-layer device placement on the builder config (TensorRT's IBuilderConfig device-type API, seed 000 L31–70).

`DeviceType.GPU` means "the host device" here (the CPU stands in for the GPU); `DeviceType.DLA` asks for the emulated
DLA. Layers are keyed by name, so a setting made on a network layer also finds the engine layer that fused it.
"""
from __future__ import annotations

import enum

from native.errors import UsageError


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
        from native.dla.profiles import get_profile
        n = get_profile(self.dla_profile).num_cores
        if not 0 <= int(core) < n:
            raise UsageError(f"DLA core {core} does not exist; the {self.dla_profile} profile has cores 0..{n - 1}")
        self.__dict__["_dla_core"] = int(core)

    @property
    def dla_profile(self) -> str:
        return self.__dict__.get("_dla_profile", "orin")

    @dla_profile.setter
    def dla_profile(self, name: str):
        from native.dla.profiles import get_profile
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
        from backends.engine.builder.passes.dla import network_layer_facts, rule_context
        from native.dla.rules import check
        return check(network_layer_facts(layer, self), rule_context(self))

    def uses_dla(self) -> bool:
        return self.default_device_type is DeviceType.DLA or DeviceType.DLA in self._device_types.values() or \
            self.engine_capability is EngineCapability.DLA_STANDALONE

    def device_types_json(self) -> dict:
        return {"default_device_type": self.default_device_type.value, "dla_core": self.dla_core,
                "dla_profile": self.dla_profile, "engine_capability": self.engine_capability.value,
                "device_types": {k: v.value for k, v in sorted(self._device_types.items())}}
