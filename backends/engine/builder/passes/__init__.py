"""Builder passes: plain functions `pass(graph, config) -> int` (how many rewrites they made) over a Graph."""
from backends.engine.builder.passes.fold import absorb_constant_weights, fold_constants  # noqa: F401
from backends.engine.builder.passes.dead import eliminate_dead_layers  # noqa: F401
