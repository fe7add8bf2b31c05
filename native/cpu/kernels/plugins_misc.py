"""Built-in plugins that fit no other field: BitCast (reinterpret the bytes of a tensor as another dtype)."""
import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def _dtype(name):
    """numpy dtype from its name, including the ml_dtypes ones (bfloat16, float8_*)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


@register_plugin
class BitCastPlugin(Plugin):
    """Same bytes, new dtype (field `dtype`, a numpy name): shape is kept, so both widths must be equal. numpy
    stores little-endian on every platform we run, which is the byte order the ONNX op specifies."""

    name = "BitCast"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        x = x if x.flags.c_contiguous else x.copy()  # (ascontiguousarray would turn a scalar into 1-D)
        to = _dtype(fields["dtype"])
        if to.itemsize != x.dtype.itemsize:
            raise ExecutionError(f"BitCast: {x.dtype.name} ({x.dtype.itemsize * 8} bits) and {to.name} "
                                 f"({to.itemsize * 8} bits) differ in width")
        return [x.view(to).reshape(x.shape)]
