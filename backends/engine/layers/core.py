"""Constants, identity, casts, shapes and plugins."""
from backends.engine.layers.base import Layer

__all__ = ["ConstantLayer", "IdentityLayer", "CastLayer", "ShapeLayer", "PluginLayer", "AssertionLayer"]


class ConstantLayer(Layer):
    """Outputs weights['value'] (any rank, any dtype)."""
    kind = "Constant"


class IdentityLayer(Layer):
    """Passes its input through unchanged."""
    kind = "Identity"


class CastLayer(Layer):
    """Converts to dtype `to` (numpy name); `saturate` for float8 targets."""
    kind = "Cast"
    defaults = {"to": "float32", "saturate": True}


class ShapeLayer(Layer):
    """Outputs the input's shape as int64, optionally sliced to [start, end)."""
    kind = "Shape"
    defaults = {"start": 0, "end": None}


class PluginLayer(Layer):
    """Runs a plugin from the plugin registry looked up by `plugin_type` (and `plugin_version`), with
    `fields` as its attributes. ONNX ops served by plugins in TensorRT (NonMaxSuppression, RoiAlign, STFT, ...)
    import as built-in plugins; users register their own with `native.plugins.register_plugin`."""
    kind = "Plugin"
    defaults = {"plugin_type": "", "plugin_version": "1", "fields": {}}


class AssertionLayer(Layer):
    """Fails at run time with `message` if any element of its bool input is false."""
    kind = "Assertion"
    defaults = {"message": ""}
    num_outputs_default = 0
