"""`with weights_detached(model):` large initializers' bytes are taken out of the model for the duration.

ONNX shape inference serialises the whole model, parses it back and copies it again for its result: for a model
whose weights are tens of MiB that is most of a parse (and of a warm-cache rebuild). It needs every initializer's
type and dims, and the values only of the small integer tensors that feed shapes (data propagation); float weights
are never read. So the raw bytes of initializers of `min_elements` or more elements (not INT32/INT64) are detached
while it runs and put back after, exactly as they were (the model object is the caller's)."""
from __future__ import annotations

import math

MIN_ELEMENTS = 4096   # shape tensors are a few int64s: anything this large is a weight


class weights_detached:
    def __init__(self, model, min_elements: int = MIN_ELEMENTS):
        self.model, self.min_elements, self.detached = model, min_elements, []

    def __enter__(self):
        for t in self.model.graph.initializer:   # top-level only: subgraph constants are small and rare
            # not INT32/INT64 (shape data); sized from the dims: reading raw_data copies it
            if t.data_type not in (6, 7) and math.prod(t.dims) >= self.min_elements and t.HasField("raw_data"):
                self.detached.append((t, t.raw_data))
                t.ClearField("raw_data")
        return self.model

    def __exit__(self, *exc):
        for t, raw in self.detached:
            t.raw_data = raw
        self.detached = []
        return False
