"""CPU device: buffers are numpy arrays, execution is synchronous."""
import numpy as np

from native.device import Device


class CpuDevice(Device):
    name = "cpu"

    def allocate(self, nbytes: int):
        return np.empty(nbytes, dtype=np.uint8)

    def copy_to_device(self, host_array):
        return np.ascontiguousarray(host_array)

    def copy_to_host(self, buffer):
        return buffer

    def run(self, tactic, op, inputs):
        return tactic.run(op, inputs)

    def fingerprint(self) -> dict:
        fp = super().fingerprint()
        fp["numpy"] = np.__version__
        return fp
