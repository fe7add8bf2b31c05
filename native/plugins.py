"""The plugin registry: Python implementations of ops that have no layer of their own, looked up by op type.

Built-in plugins (NonMaxSuppression, RoiAlign, STFT, ...) live in `native/cpu/kernels/plugins.py`; users add
their own with `register_plugin`. A plugin is a class with `name`, `version` and
`enqueue(inputs: list, fields: dict) -> list`; optionally `supports(fields)`.
"""
from __future__ import annotations

_PLUGINS: dict[str, object] = {}


class Plugin:
    name = ""
    version = "1"

    def enqueue(self, inputs: list, fields: dict) -> list:
        raise NotImplementedError

    def num_outputs(self, fields: dict, node_outputs: int) -> int:
        return node_outputs


def register_plugin(name_or_cls, cls=None, override=False):
    """register_plugin(MyPlugin) or register_plugin("OpType", MyPlugin); an instance is stored."""
    if cls is None:
        cls, name = name_or_cls, name_or_cls.name
    else:
        name = name_or_cls
    inst = cls() if isinstance(cls, type) else cls
    if name in _PLUGINS and not override:
        raise ValueError(f"plugin '{name}' is already registered (pass override=True to replace it)")
    _PLUGINS[name] = inst
    return cls


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
        import native.cpu.kernels.plugins  # noqa: F401
