"""The emulated DLA device: rules (which layers it runs, and why not), profiles, formats, numerics, tactics,
memory pools and standalone loadables. Importing the package registers the "dla" device."""
from native.device import register_device
from native.dla.device import DlaDevice

register_device("dla", DlaDevice)
