"""Constant folding at the ONNX level, evaluated by our own engine's kernels (never ONNX Runtime).

One pass:
1. `Constant` nodes become initializers.
2. Shapes: `Shape`/`Size` of tensors whose dims are static become constants; of partially static tensors they
   become *partial* values (known dims, None elsewhere) that `Gather`/`Slice`/`Concat`/`Cast`/`Squeeze`/`Unsqueeze`
   carry along, so a shape subgraph that only reads static dims folds even when the batch is dynamic.
3. Every other node whose inputs are all constant (bodies of If/Loop/Scan included) is evaluated, all together,
   by `engine_eval.evaluate_nodes` (our parser + lowering + default CPU tactics). A node that fails (no importer,
   no kernel, kernel error, output of an unexpected dtype/shape) is reported by name and stays as it is.
4. Folded nodes are replaced by initializers for the tensors the rest of the graph still reads, unless a tensor
   is larger than `size_threshold` bytes (then its producer stays).
5. `If` nodes with a constant condition are replaced by their taken branch (`inline_if.py`).
6. No-op removal (`noops.py`): Identity, Dropout, same-type Cast, shape-preserving Reshape/Expand/..., x*1, x+0.
`fold_constants` repeats passes (with cleanup and shape inference between them) until nothing changes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from debugkit.surgeon import engine_eval, noops
from debugkit.surgeon.cleanup import cleanup_graph
from debugkit.surgeon.inline_if import inline_constant_ifs
from debugkit.surgeon.graphutil import elem_type, node_label, node_reads, static_shape, subgraphs, tensor_types
from debugkit.surgeon.shapes import infer_shapes
from debugkit.surgeon.toposort import toposort_graph
from native.logger import G_LOGGER

# nodes never folded: random draws and ops with side effects on sequences of calls
NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
SHAPE_CARRIERS = {"Gather", "Slice", "Concat", "Cast", "Squeeze", "Unsqueeze", "Identity"}


@dataclass
class FoldOptions:
    size_threshold: int | None = None   # bytes; folded tensors larger than this are not written as initializers
    fold_shapes: bool = True
    shape_inference: bool = True
    remove_noops: bool = True
    max_passes: int = 10
    device: str = "cpu"


@dataclass
class FoldReport:
    passes: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    folded: int = 0
    noops_removed: int = 0
    dead_removed: int = 0               # nodes whose outputs nothing reads (cleanup between passes)
    failures: dict = field(default_factory=dict)   # node label -> reason (last seen)
    too_large: list = field(default_factory=list)
    seconds: float = 0.0


# ---------------------------------------------------------------------------------------------------------------
def constant_node_value(node) -> onnx.TensorProto | None:
    """The TensorProto a Constant node produces, or None for a form we do not lower (sparse)."""
    for a in node.attribute:
        if a.name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(a.t)
            return t
        if a.name == "value_float":
            return numpy_helper.from_array(np.array(a.f, dtype=np.float32))
        if a.name == "value_floats":
            return numpy_helper.from_array(np.array(list(a.floats), dtype=np.float32))
        if a.name == "value_int":
            return numpy_helper.from_array(np.array(a.i, dtype=np.int64))
        if a.name == "value_ints":
            return numpy_helper.from_array(np.array(list(a.ints), dtype=np.int64))
        if a.name == "value_string":
            return numpy_helper.from_array(np.array(a.s.decode("utf-8", "replace"), dtype=object))
        if a.name == "value_strings":
            return numpy_helper.from_array(np.array([s.decode("utf-8", "replace") for s in a.strings], dtype=object))
    return None


def lower_constant_nodes(graph, recurse=True) -> int:
    """Turn `Constant` nodes into initializers (in bodies too); returns how many were lowered."""
    count, keep = 0, []
    for node in graph.node:
        value = constant_node_value(node) if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
        if value is None:
            keep.append(node)
            if recurse:
                for sub in subgraphs(node):
                    count += lower_constant_nodes(sub, True)
            continue
        value.name = node.output[0]
        graph.initializer.append(value)
        count += 1
    if count:
        del graph.node[:]
        graph.node.extend(keep)
    return count


# ---------------------------------------------------------------------------------------------------------------
def _shape_info(graph, name, types, init_by_name):
    if name in init_by_name:
        return list(init_by_name[name].dims)
    return static_shape(types.get(name))


def _partial_op(node, partial, const_arrays):
    """Propagate a partial shape value (list of int|None) through a shape-carrying node; None if not possible."""
    op = node.op_type
    ins = list(node.input)

    def val(i):
        if i >= len(ins) or not ins[i]:
            return None
        if ins[i] in partial:
            return partial[ins[i]]
        arr = const_arrays(ins[i])
        if arr is not None and arr.ndim <= 1 and arr.dtype.kind in "iu":
            return [int(v) for v in np.atleast_1d(arr)]
        return None

    data = val(0)
    if data is None:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if op in ("Identity", "Cast"):
        if op == "Cast" and attrs.get("to") not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            return None
        return list(data)
    if op == "Gather":
        if attrs.get("axis", 0) not in (0, -1) or len(ins) < 2:
            return None
        idx = const_arrays(ins[1])
        if idx is None or idx.ndim > 1:
            return None
        picked = [data[int(i)] for i in np.atleast_1d(idx)] if all(-len(data) <= int(i) < len(data)
                                                                    for i in np.atleast_1d(idx)) else None
        if picked is None:
            return None
        return ("scalar", picked[0]) if idx.ndim == 0 else picked
    if op == "Slice":
        starts, ends = val(1), val(2)
        axes, steps = (val(3) if len(ins) > 3 and ins[3] else [0]), (val(4) if len(ins) > 4 and ins[4] else [1])
        if starts is None or ends is None or axes is None or steps is None or len(starts) != 1 or axes[0] not in (0, -1):
            return None
        if steps[0] == 0:
            return None
        return list(data[slice(starts[0], ends[0], steps[0])])
    if op == "Concat":
        out = []
        for i in range(len(ins)):
            v = val(i)
            if v is None:
                return None
            out.extend(v)
        return out
    if op == "Unsqueeze":
        return list(data) if len(data) == 0 else None
    return None


# ---------------------------------------------------------------------------------------------------------------
def fold_pass(model, options: FoldOptions, report: FoldReport) -> int:
    """One folding pass over the main graph; returns the number of nodes replaced by constants."""
    graph = model.graph
    lower_constant_nodes(graph)
    types = tensor_types(graph)
    input_names = {i.name for i in graph.input}
    init_by_name = {t.name: t for t in graph.initializer}
    graph_outputs = {o.name for o in graph.output}
    array_cache: dict = {}

    def const_array(name):
        if name in array_cache:
            return array_cache[name]
        t = init_by_name.get(name)
        if t is None:
            return None
        try:
            arr = numpy_helper.to_array(t)
        except Exception:
            arr = None
        array_cache[name] = arr
        return arr

    direct: dict = {}        # name -> numpy value computed here from shapes
    partial: dict = {}       # name -> list of int|None (shape values with unknown dims)
    planned = []             # nodes to evaluate with the engine
    const_names = set(init_by_name)  # initializers count as constants even when also listed as inputs
    for node in graph.node:
        if node.op_type in NEVER_FOLD:
            continue
        reads = node_reads(node)
        if options.fold_shapes and node.op_type in ("Shape", "Size") and node.input and node.input[0] not in const_names:
            shape = _shape_info(graph, node.input[0], types, init_by_name)
            if shape is None:
                continue
            if node.op_type == "Size":
                if all(d is not None for d in shape):
                    direct[node.output[0]] = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
                    const_names.add(node.output[0])
                continue
            attrs = {a.name: a.i for a in node.attribute}
            start, end = attrs.get("start", 0), attrs.get("end")
            sub = shape[start:end] if end is not None else shape[start:]
            if all(d is not None for d in sub):
                direct[node.output[0]] = np.array(sub, dtype=np.int64)
                const_names.add(node.output[0])
            else:
                partial[node.output[0]] = list(sub)
            continue
        if reads and all(r in const_names for r in reads):
            planned.append(node)
            const_names.update(o for o in node.output if o)
            continue
        if options.fold_shapes and node.op_type in SHAPE_CARRIERS and node.input and node.input[0] in partial:
            pv = _partial_op(node, partial, lambda n: direct.get(n) if n in direct else const_array(n))
            if pv is None:
                continue
            if isinstance(pv, tuple):  # scalar gather
                if pv[1] is not None:
                    direct[node.output[0]] = np.array(pv[1], dtype=np.int64)
                    const_names.add(node.output[0])
                continue
            out_type = elem_type(types.get(node.output[0]))
            dtype = np.int32 if out_type == onnx.TensorProto.INT32 else np.int64
            if all(d is not None for d in pv):
                direct[node.output[0]] = np.array(pv, dtype=dtype)
                const_names.add(node.output[0])
            else:
                partial[node.output[0]] = pv
    if not planned and not direct:
        return 0

    # which tensors of folded nodes does the rest of the graph read?
    planned_outputs = {o for n in planned for o in n.output if o}
    folded_names = planned_outputs | set(direct)
    # engine inputs: initializers plus directly computed shape values read by planned nodes
    needed_consts = {}
    for node in planned:
        for r in node_reads(node):
            if r in planned_outputs:
                continue
            if r in direct:
                needed_consts[r] = numpy_helper.from_array(direct[r], r)
            elif r in init_by_name:
                needed_consts[r] = init_by_name[r]
    value_types = _value_types(graph, {x for n in planned for x in list(n.input) + list(n.output) if x})
    # ask for every planned output: a folded node's value is needed when a planned reader of it fails
    result = engine_eval.evaluate_nodes(model, planned, needed_consts, planned_outputs, value_types, options.device)
    values = dict(direct)
    for name, v in result.values.items():
        reason = _check_value(name, v, types)
        if reason is None:
            values[name] = v
        else:
            owner = next((node_label(n) for n in planned if name in n.output), name)
            result.failures.setdefault(owner, reason)
    for label, reason in result.failures.items():
        report.failures[label] = reason

    # decide which nodes go: a node goes when every output it has that someone reads has a value that fits
    producer = {o: n for n in graph.node for o in n.output if o}
    removable = {id(n) for n in planned} | {id(producer[n]) for n in direct if n in producer}
    readers = {}
    for node in graph.node:
        for r in node_reads(node):
            readers.setdefault(r, []).append(node)
    keep_ids = set()
    changed = True
    while changed:
        changed = False
        for node in graph.node:
            if id(node) not in removable or id(node) in keep_ids:
                continue
            for o in node.output:
                if not o:
                    continue
                read_by_kept = o in graph_outputs or any(
                    id(r) not in removable or id(r) in keep_ids for r in readers.get(o, []))
                if not read_by_kept:
                    continue
                v = values.get(o)
                too_big = (isinstance(v, np.ndarray) and options.size_threshold is not None
                           and v.nbytes > options.size_threshold)
                if v is None or not isinstance(v, np.ndarray) or too_big:
                    if too_big:
                        report.too_large.append(o)
                    keep_ids.add(id(node))
                    changed = True
                    break
    new_inits = {}
    kept_nodes = []
    folded = 0
    for node in graph.node:
        if id(node) in removable and id(node) not in keep_ids:
            folded += 1
            continue
        kept_nodes.append(node)
    live_reads = {r for n in kept_nodes for r in node_reads(n)} | graph_outputs
    for name in live_reads:
        if name in values and name not in init_by_name and name in folded_names:
            p = producer.get(name)
            if p is not None and id(p) in keep_ids:
                continue
            new_inits[name] = numpy_helper.from_array(np.ascontiguousarray(values[name]), name)
    if folded:
        del graph.node[:]
        graph.node.extend(kept_nodes)
        graph.initializer.extend(new_inits.values())
        # the values of folded tensors are now initializers: their value_info entries are redundant
        vis = [v for v in graph.value_info if v.name not in new_inits]
        del graph.value_info[:]
        graph.value_info.extend(vis)
    return folded


def _value_types(graph, names):
    """What our parser knows of these tensors from ONNX shape inference (dtype, shape, dim names, kind)."""
    from backends.engine.onnx_parser.parser import _value_info_type
    return {vi.name: _value_info_type(vi) for vi in list(graph.input) + list(graph.value_info) + list(graph.output)
            if vi.name in names}


def _check_value(name, value, types):
    """Reason why a kernel's value cannot stand for `name` (dtype or static shape differ from ONNX's), else None."""
    if not isinstance(value, np.ndarray):
        return None
    tp = types.get(name)
    want = elem_type(tp)
    if want:
        try:
            expected = onnx.helper.tensor_dtype_to_np_dtype(want)
        except Exception:
            expected = None
        if expected is not None and np.dtype(expected) != value.dtype and not (
                value.dtype.kind == "O" and want == onnx.TensorProto.STRING):
            return f"our kernel produced {value.dtype} for '{name}', ONNX expects {np.dtype(expected)}"
    shape = static_shape(tp)
    if shape is not None and (len(shape) != value.ndim or any(d is not None and d != s for d, s in zip(shape, value.shape))):
        return f"our kernel produced shape {list(value.shape)} for '{name}', ONNX shape inference says {shape}"
    return None


# ---------------------------------------------------------------------------------------------------------------
def fold_constants(model, options: FoldOptions | None = None) -> FoldReport:
    """Fold `model` in place until a pass changes nothing (at most `options.max_passes` passes)."""
    options = options or FoldOptions()
    report = FoldReport(nodes_before=len(model.graph.node))
    t0 = time.perf_counter()
    lower_constant_nodes(model.graph)
    for p in range(options.max_passes):
        before = len(model.graph.node)
        cleanup_graph(model.graph, remove_unused_inputs=False)
        dead = before - len(model.graph.node)
        toposort_graph(model.graph)
        if options.shape_inference:
            infer_shapes(model)
        folded = fold_pass(model, options, report)
        folded += inline_constant_ifs(model.graph)
        removed = noops.remove_noops(model.graph) if options.remove_noops else 0
        n = len(model.graph.node)
        cleanup_graph(model.graph, remove_unused_inputs=False)
        dead += n - len(model.graph.node)
        report.passes = p + 1
        report.folded += folded
        report.noops_removed += removed
        report.dead_removed += dead
        after = len(model.graph.node)
        G_LOGGER.info(f"Folding constants | pass {p + 1}: {before} -> {after} nodes ({folded} folded, "
                      f"{removed} no-ops removed)")
        if folded == 0 and removed == 0:
            break
    # a node reported as failing in an early pass may have folded later (e.g. after shape inference)
    remaining = {node_label(n) for n in model.graph.node}
    report.failures = {k: v for k, v in report.failures.items() if k in remaining}
    for label, reason in list(report.failures.items())[:20]:
        G_LOGGER.warning(f"constant folding left node '{label}' unfolded: {reason}")
    if len(report.failures) > 20:
        G_LOGGER.warning(f"... and {len(report.failures) - 20} more nodes left unfolded (use -v to see each)")
    report.nodes_after = len(model.graph.node)
    # the summary's counts add up to its totals: what left the graph and was neither a no-op nor dead code was
    # folded (Constant nodes turned initializers included; an inlined If counts its branch's nodes)
    report.folded = report.nodes_before - report.nodes_after - report.noops_removed - report.dead_removed
    report.seconds = time.perf_counter() - t0
    return report
