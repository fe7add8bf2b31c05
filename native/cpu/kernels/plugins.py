"""CPU kernels: the Plugin layer and the built-in plugins (ops TensorRT serves with plugins)."""
from native.errors import ExecutionError
from native.plugins import Plugin, find_plugin, register_plugin  # noqa: F401
from native.tactics import simple_tactic


@simple_tactic("Plugin")
def plugin(op, inputs):
    impl = find_plugin(op.params["plugin_type"])
    if impl is None:
        raise ExecutionError(f"layer '{op.name}' needs plugin '{op.params['plugin_type']}', which is not registered "
                             f"in this process; register it with native.plugins.register_plugin before loading the plan")
    fields = dict(op.params.get("fields", {}))
    fields.update(op.weights)
    return list(impl.enqueue(inputs, fields))
