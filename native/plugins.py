"""The plugin registry: Python implementations of ops that have no layer of their own, looked up by op type.

Built-in plugins (NonMaxSuppression, RoiAlign, STFT, Attention, ...) live in `native/cpu/kernels/plugins_*.py`;
users add their own with `register_plugin` before parsing:

    class MyPlugin(Plugin):
        name = "MyOp"
        def enqueue(self, inputs, fields):       # numpy arrays in, list of numpy arrays out
            return [inputs[0] * fields.get("alpha", 1.0)]

    register_plugin(MyPlugin)                    # or register_plugin("MyOp", MyPlugin)

The ONNX parser imports any node whose op type has a registered plugin as a Plugin layer (attributes become
`fields`, tensor attributes become weights). A plan records only the plugin's name: loading it in a process
where that name is not registered fails with a PlanError naming the plugin.
"""
from __future__ import annotations

from native.tactics import tactics_for

_PLUGINS: dict[str, object] = {}


class Plugin:
    """Base class: `name` (the op type it serves), `version`, and `enqueue(inputs, fields) -> list`."""

    name = ""
    version = "1"

    def enqueue(self, inputs: list, fields: dict) -> list:
        raise NotImplementedError

    def num_outputs(self, fields: dict, node_outputs: int) -> int:
        return node_outputs


def register_plugin(name_or_cls, cls=None, override=False):
    """register_plugin(MyPlugin) or register_plugin("OpType", MyPlugin); an instance is stored.

    Usable as a class decorator (`@register_plugin`). Registering a name twice raises unless override=True.
    """
    _load_builtin()  # so a user plugin named like a built-in one needs override=True, whatever the import order
    if cls is None:
        cls, name = name_or_cls, getattr(name_or_cls, "name", "")
    else:
        name = name_or_cls
    if not name or not isinstance(name, str):
        raise ValueError(f"plugin {cls!r} needs a name: set `name` on the class or pass register_plugin('OpType', cls)")
    inst = cls() if isinstance(cls, type) else cls
    if not callable(getattr(inst, "enqueue", None)):
        raise TypeError(f"plugin '{name}' must have an enqueue(inputs, fields) method")
    if name in _PLUGINS and not override:
        raise ValueError(f"plugin '{name}' is already registered (pass override=True to replace it)")
    _PLUGINS[name] = inst
    return cls


def unregister_plugin(name: str) -> bool:
    """Remove a plugin; returns whether one was registered under `name`."""
    _load_builtin()
    return _PLUGINS.pop(name, None) is not None


def find_plugin(name: str):
    _load_builtin()
    return _PLUGINS.get(name)


def registered_plugins() -> list[str]:
    _load_builtin()
    return sorted(_PLUGINS)


_loaded = False


def _load_builtin():
    global _loaded
    if not _loaded:
        _loaded = True
        tactics_for("Plugin", "cpu")   # the CPU device's kernels register the built-in plugins as they load
