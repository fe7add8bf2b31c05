"""The `surgeon sanitize` pipeline: shape overrides, shape inference, folding, cleanup, toposort."""
from __future__ import annotations

from dataclasses import dataclass, field

from debugkit.surgeon.cleanup import cleanup_graph
from debugkit.surgeon.fold import FoldOptions, FoldReport, fold_constants, lower_constant_nodes
from debugkit.surgeon.shapes import drop_inconsistent_value_info, infer_shapes, override_input_shapes
from debugkit.surgeon.toposort import toposort_graph
from native.logger import G_LOGGER


@dataclass
class SanitizeOptions:
    fold_constants: bool = False
    fold: FoldOptions = field(default_factory=FoldOptions)
    cleanup: bool = False
    toposort: bool = False
    override_input_shapes: dict = field(default_factory=dict)
    shape_inference: bool = True


def sanitize(model, opts: SanitizeOptions) -> FoldReport | None:
    """Apply the requested steps to `model` in place; returns the folding report when folding ran."""
    report = None
    if opts.override_input_shapes:
        override_input_shapes(model, opts.override_input_shapes)
        G_LOGGER.info(f"Overrode input shapes: {opts.override_input_shapes}")
    if opts.toposort or opts.fold_constants:
        toposort_graph(model.graph)
    if opts.fold_constants:
        opts.fold.shape_inference = opts.shape_inference
        report = fold_constants(model, opts.fold)
    if opts.cleanup:
        stats = cleanup_graph(model.graph, remove_unused_inputs=True)
        G_LOGGER.info(f"Cleanup removed {stats.nodes} nodes, {stats.inputs} inputs, {stats.initializers} "
                      f"initializers, {stats.value_info} value_info entries")
    if opts.toposort:
        toposort_graph(model.graph)
    if opts.shape_inference and (opts.override_input_shapes or opts.fold_constants or opts.cleanup):
        infer_shapes(model)
        drop_inconsistent_value_info(model)
    return report


__all__ = ["sanitize", "SanitizeOptions", "lower_constant_nodes"]
