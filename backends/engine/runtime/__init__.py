"""Runtime → Engine → ExecutionContext, and the EngineInspector."""
from backends.engine.runtime.runtime import Engine, EngineInspector, ExecutionContext, Runtime  # noqa: F401
