"""The closed set of layer kinds (seed 002, TensorRT's layer reference), one class per kind.

Kinds are grouped by family; a class carries its kind name, its parameter defaults and a docstring that
states its semantics. Kernels for each kind live in `native/<device>/kernels`.
"""
from backends.engine.layers.core import *  # noqa: F401,F403
from backends.engine.layers.math import *  # noqa: F401,F403
from backends.engine.layers.nn import *  # noqa: F401,F403
from backends.engine.layers.tensor import *  # noqa: F401,F403
from backends.engine.layers.control import *  # noqa: F401,F403
from backends.engine.layers.fused import *  # noqa: F401,F403
from backends.engine.layers.base import LAYER_KINDS, Layer  # noqa: F401
