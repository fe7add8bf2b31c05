"""The CPU device: numpy kernels (vectorised, no per-element Python loops)."""
from native.cpu.device import CpuDevice
from native.device import register_device

register_device("cpu", CpuDevice)
