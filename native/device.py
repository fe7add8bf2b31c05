"""The device interface every backend device implements (CPU now; CUDA and DLA slot in beside it)."""
from __future__ import annotations

import platform


class Device:
    """allocate / copy / run / synchronize, plus a fingerprint recorded in plans."""

    name = "abstract"

    def allocate(self, nbytes: int):
        raise NotImplementedError

    def copy_to_device(self, host_array):
        raise NotImplementedError

    def copy_to_host(self, buffer):
        raise NotImplementedError

    def run(self, tactic, op, inputs):
        raise NotImplementedError

    def synchronize(self):
        pass

    def fingerprint(self) -> dict:
        return {"device": self.name, "machine": platform.machine()}


def get_device(name: str) -> Device:
    if name == "cpu":
        from native.cpu.device import CpuDevice
        return CpuDevice()
    if name == "dla":
        from native.dla.device import DlaDevice
        return DlaDevice()
    if name == "cuda":
        from native.cuda.device import CudaDevice
        return CudaDevice()
    from native.errors import UsageError
    raise UsageError(f"unknown device '{name}'; choose one of: cpu, cuda, dla")
