"""CPU kernels: the Plugin layer and the built-in plugins (ops TensorRT serves with plugins).

The Plugin layer looks its implementation up in the registry by `plugin_type`. A plan that needs a plugin which
is not registered in the loading process fails to load (`check_loadable`) with a message naming the plugin.
Built-in plugins live in the `plugins_*` modules imported at the bottom, grouped by field.
"""
from native.errors import PlanError
from native.plugins import Plugin, find_plugin, register_plugin  # noqa: F401
from native.tactics import Tactic, register_tactic


def _missing(op):
    name = op.params["plugin_type"]
    return PlanError(f"layer '{op.name}' needs plugin '{name}' (version {op.params.get('plugin_version', '1')}), "
                     f"which is not registered in this process; call native.plugins.register_plugin('{name}', ...) "
                     f"before loading the plan")


@register_tactic
class PluginTactic(Tactic):
    """Calls the registered plugin's `enqueue(inputs, fields)`; fields are the params' fields plus the weights."""

    kind = "Plugin"
    name = "registry"

    def check_loadable(self, op):
        if find_plugin(op.params["plugin_type"]) is None:
            raise _missing(op)

    def run(self, op, inputs):
        impl = find_plugin(op.params["plugin_type"])
        if impl is None:
            raise _missing(op)
        fields = dict(op.params.get("fields", {}))
        fields.update(op.weights)
        return list(impl.enqueue(inputs, fields))


from native.cpu.kernels import (  # noqa: E402,F401  (registers the built-in plugins)
    plugins_attention, plugins_detection, plugins_image, plugins_misc, plugins_ml, plugins_random, plugins_recurrent,
    plugins_signal, plugins_text)
