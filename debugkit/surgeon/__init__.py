"""ONNX graph surgery: constant folding with our own kernels, cleanup, toposort, shapes, extract, insert, lint.

Everything here works on `onnx.ModelProto` / `GraphProto` in place; one module per concept:

- graphutil      names, producers/consumers, subgraph outer references, renaming
- external_data  load / save models with external weights (models over 2 GB)
- toposort       topological sort of nodes (subgraph outer references count as inputs)
- cleanup        remove dead nodes, unused inputs / initializers / value_info
- shapes         input-shape overrides and ONNX shape inference written back (symbolic dims kept)
- fold           constant folding evaluated by our engine's kernels, shape-subgraph folding, no-op removal
- sanitize       the pipeline behind `debugkit surgeon sanitize`
- extract        cut the subgraph between named tensors
- insert         replace the subgraph between named tensors by one node
- lint           `debugkit check lint`: onnx checker plus per-node checks
"""
