"""`debug reduce`: the smallest subgraph of a model that still fails a check, by ddmin over node sets.

Any subset of nodes makes a runnable model: a tensor a kept node reads but no kept node produces becomes a graph
input fed with its value from one real ONNX Runtime run of the whole model (`mode="graph-input"`), or a constant
holding that value (`mode="fold"`). Integer and bool tensors (shapes, indices, masks) are always folded: engines need
shape tensors at build time, and a reduced model should not fail because a shape became unknown. The subgraph's
outputs are the tensors its nodes produce that the model outputs, that a dropped node reads, or that no kept node
reads. So branches, multi-input/multi-output pieces and disconnected sets are all candidates, not only one frontier.
Constant nodes come along with whoever reads them and are never items of the search.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from backends.runners.model import topological_nodes
from debugkit.surgeon.graphutil import node_label, node_reads
from native.errors import UsageError
from native.logger import G_LOGGER

MODES = ("graph-input", "fold")


class ReductionError(UsageError):
    """The reduction cannot produce a meaningful model (e.g. the check fails even on an empty model)."""


class Subgraphs:
    """Makes the model of any node subset of `model`, with the values of the tensors it cuts (`values`)."""

    def __init__(self, model: onnx.ModelProto, feeds: dict, values: dict, mode: str = "graph-input"):
        if mode not in MODES:
            raise UsageError(f"--mode {mode}: choose one of {MODES}")
        self.model, self.feeds, self.values, self.mode = model, dict(feeds), dict(values), mode
        g = model.graph
        self.nodes = topological_nodes(g)
        self.labels = _unique_labels(self.nodes)
        self.by_label = dict(zip(self.labels, self.nodes))
        self.order = {lab: i for i, lab in enumerate(self.labels)}
        self.inits = {t.name: t for t in g.initializer}
        self.graph_inputs = {i.name: i for i in g.input if i.name not in self.inits}
        self.graph_outputs = [o.name for o in g.output]
        self.const_producer = {o: n for n in self.nodes if n.op_type == "Constant" for o in n.output}
        self.readers: dict[str, list] = {}
        for lab, n in zip(self.labels, self.nodes):
            for t in node_reads(n):
                self.readers.setdefault(t, []).append(lab)

    @property
    def items(self) -> list:
        """The labels a search chooses among (every node but Constant nodes), in topological order."""
        return [lab for lab, n in zip(self.labels, self.nodes) if n.op_type != "Constant"]

    def build(self, labels) -> tuple[onnx.ModelProto, dict, dict]:
        """(model, feeds, expected outputs from the full run) for the subgraph of these nodes."""
        keep = sorted(set(labels), key=self.order.__getitem__)
        kept = set(keep)
        nodes = [self.by_label[lab] for lab in keep]
        produced = {o for n in nodes for o in n.output if o}
        needed_consts, boundary = [], []
        for n in nodes:
            for t in node_reads(n):
                if t in produced or t in self.inits:
                    continue
                if t in self.const_producer:
                    if self.const_producer[t] not in needed_consts:
                        needed_consts.append(self.const_producer[t])
                elif t not in boundary:
                    boundary.append(t)
        outputs = []
        for n in nodes:
            for o in n.output:
                if not o or o in outputs:
                    continue
                readers = self.readers.get(o, [])
                if o in self.graph_outputs or not any(r in kept for r in readers) or \
                        any(r not in kept and self.by_label[r].op_type != "Constant" for r in readers):
                    outputs.append(o)
        new_inputs, new_inits, feeds = [], [], {}
        for t in boundary:
            if t in self.graph_inputs:
                new_inputs.append(_value_info(t, self.feeds[t]))
                feeds[t] = self.feeds[t]
                continue
            if t not in self.values:
                raise ReductionError(f"no captured value for tensor '{t}' (ONNX Runtime did not produce it)")
            v = np.asarray(self.values[t])
            if self.mode == "fold" or v.dtype.kind not in "fc":
                new_inits.append(numpy_helper.from_array(v, t))
            else:
                new_inputs.append(_value_info(t, v))
                feeds[t] = v
        used_inits = []
        for n in nodes:
            for t in node_reads(n):
                if t in self.inits and t not in used_inits:
                    used_inits.append(t)
        g = helper.make_graph(list(needed_consts) + nodes, self.model.graph.name or "reduced", new_inputs,
                              [_value_info(o, self.values.get(o)) for o in outputs],
                              [self.inits[t] for t in used_inits] + new_inits)
        m = helper.make_model(g, opset_imports=list(self.model.opset_import), producer_name="debugkit reduce")
        m.ir_version = self.model.ir_version
        m.functions.extend(self.model.functions)
        expected = {o: self.values[o] for o in outputs if o in self.values}
        return m, feeds, expected


def _unique_labels(nodes) -> list:
    labels, seen = [], {}
    for i, n in enumerate(nodes):
        lab = node_label(n, i)
        if lab in seen:
            seen[lab] += 1
            lab = f"{lab}#{seen[lab]}"
        else:
            seen[lab] = 0
        labels.append(lab)
    return labels


def _value_info(name, value):
    if value is None:
        return onnx.ValueInfoProto(name=name)
    v = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))


def capture_values(model: onnx.ModelProto, feeds: dict) -> dict:
    """Every tensor of the main graph from one ONNX Runtime run (the values cut tensors are fed with)."""
    from backends.runners import OnnxrtRunner
    from debugkit.debug.checks import ReferenceFailedError
    from native.errors import DebugkitError
    try:
        with OnnxrtRunner(model, mark="all") as r:
            taps = r.observable_tensors()
            out = r.infer(feeds, taps=taps)
    except DebugkitError as e:
        raise ReferenceFailedError(f"the reference (ONNX Runtime) fails on the model itself, so there is nothing to "
                                   f"reduce against: {str(e).splitlines()[0]}") from None
    values = dict(feeds)
    values.update({k: v for k, v in out.items() if isinstance(v, np.ndarray)})
    return values


def finish(model: onnx.ModelProto) -> onnx.ModelProto:
    """Sanitize a reduced model: dead code out, topological order, shapes inferred, checked valid."""
    from debugkit.surgeon.cleanup import cleanup_graph
    from debugkit.surgeon.shapes import infer_shapes
    from debugkit.surgeon.toposort import toposort_graph
    cleanup_graph(model.graph, remove_unused_inputs=True)
    toposort_graph(model.graph)
    try:
        infer_shapes(model)
    except Exception as e:   # shape inference is a nicety; the model is still valid without it
        G_LOGGER.warning(f"shape inference on the reduced model failed: {e}")
    onnx.checker.check_model(model)
    return model


def save_with_inputs(model, feeds, path, provenance=None) -> str | None:
    """Write the model and, when it has fed inputs, their values as an HDF5 inputs file beside it."""
    from debugkit.surgeon.external_data import save_model
    save_model(model, path, what="reduced model")
    if not feeds:
        return None
    from debugkit.data_file import DataWriter
    inputs_path = os.path.splitext(path)[0] + "_inputs.h5"
    with DataWriter(inputs_path, "inputs", provenance or {}) as w:
        w.write_inputs(0, feeds)
    return inputs_path


class ReduceProbe:
    """fails(labels) for `debug reduce`: build the subgraph, run the check on it. Picklable for executors.

    check: a CommandCheck, or CompareOptions (in-process: our engine on the subgraph vs the values of the full
    ONNX Runtime run). `key` names the search (the subgraph maker's cache key in each worker); `workdir` is where an
    external check's probe models are written (a directory of this process, or of the worker's own when shipped).
    `ship(subgraphs)` makes the probe carry the model's bytes and the captured values, so workers on other machines
    need none of this machine's files: they arrive once per worker (the executor sends a probe object once) and
    are unpacked once per worker (WorkerCache).
    """

    def __init__(self, workdir, mode: str, check, flags=(), subgraphs: Subgraphs | None = None, build=None,
                 key=None):
        self.workdir, self.mode, self.check, self.flags = workdir, mode, check, tuple(flags)
        self.key = key or (os.path.abspath(workdir) if workdir else None)
        self.build = build   # the command's BuildOptions (debugkit/options.py): every subgraph builds with them
        self.state = None    # (model bytes, {tensor: array}) when shipped
        if subgraphs is not None:
            from debugkit.debug.executor import WorkerCache
            WorkerCache.put(self._cache_key(), subgraphs)

    def _cache_key(self):
        return ("reduce", self.key, self.mode)

    def subgraphs(self) -> Subgraphs:
        from debugkit.debug.executor import WorkerCache
        return WorkerCache.get(self._cache_key(), self._load)

    def _load(self):
        if self.state is None:
            raise ReductionError(f"this worker has no state for the search {self.key} (a probe that was not "
                                 f"shipped reached another process)")
        blob, values = self.state
        model = onnx.load_from_string(blob)
        names = [i.name for i in model.graph.input]
        return Subgraphs(model, {k: values[k] for k in names if k in values}, values, self.mode)

    def ship(self, subgraphs: Subgraphs):
        """Carry the model and the captured values to the workers (process / Ray executors)."""
        self.state = (subgraphs.model.SerializeToString(), dict(subgraphs.values))
        return self

    def probe_dir(self) -> str:
        """Where an external check's probe model goes: the search's directory when this process has it, else
        (a worker on another machine) this process's own scratch directory."""
        if self.workdir and os.path.isdir(self.workdir):
            return self.workdir
        from debugkit.debug.scratch import process_scratch_dir
        return process_scratch_dir()

    def __call__(self, labels) -> dict:
        from debugkit.debug.checks import CommandCheck
        sub = self.subgraphs()
        if not labels:
            if not isinstance(self.check, CommandCheck):
                return {"fails": False, "reason": "empty subgraph"}
            model, feeds = empty_model(sub.model, sub.feeds), dict(sub.feeds)
        else:
            model, feeds, expected = sub.build(labels)
        if isinstance(self.check, CommandCheck):
            import hashlib
            tag = hashlib.sha1("\n".join(sorted(labels)).encode()).hexdigest()[:12]
            path = os.path.join(self.probe_dir(), f"probe_{tag}.onnx")
            inputs = save_with_inputs(model, feeds, path)
            try:
                return self.check(path, inputs)
            finally:
                for p in (path, inputs):
                    if p and os.path.exists(p):
                        os.remove(p)
        return engine_vs_expected(model, feeds, expected, self.check, self.flags, getattr(self, "build", None))


def subgraph_config(build, model, feeds):
    """The command's build options for a subgraph: layer precision / output type specs kept for the nodes it has
    (a spec naming a node the subgraph lacks would be an error), INT8 calibrated on the subgraph's own feeds."""
    import fnmatch
    config = build.replace(int8=False).builder_config()
    if build.int8:
        from backends.engine import Calibrator
        from backends.engine.builder import BuilderFlag
        config.set_flag(BuilderFlag.INT8)
        config.int8_calibrator = Calibrator([feeds], algorithm=build.calibration_algorithm,
                                            percentile=build.calibration_percentile)
    names = [n.name for n in model.graph.node]

    def here(pattern):
        return pattern == "*" or any(fnmatch.fnmatchcase(n, pattern) for n in names)
    config.layer_precisions = [(p, v) for p, v in config.layer_precisions if here(p)]
    config.layer_output_types = [(p, v) for p, v in config.layer_output_types if here(p)]
    return config


def engine_vs_expected(model, feeds, expected, options, flags=(), build=None) -> dict:
    """In-process check: our engine's outputs vs `expected`; an engine that cannot build counts as not failing, and
    so does a comparison that saw nothing finite (it reproduces no disagreement)."""
    from backends.runners import EngineRunner
    from native.errors import DebugkitError
    try:
        config = subgraph_config(build, model, feeds) if build is not None else None
        ranges = {k: v for k, v in build.shape_ranges().items() if k in feeds} if build is not None else {}
        with EngineRunner(model, flags=flags, config=config, device=(build.device if build else None) or "cpu",
                          shapes=ranges) as r:
            out = r.infer(feeds)
    except DebugkitError as e:
        return {"fails": False, "reason": f"engine error (not counted as failing): {str(e).splitlines()[0][:200]}"}
    res = options.judge(out, expected)
    res.pop("outputs", None)
    if "disagrees" in res:
        res["fails"] = res["disagrees"]
    return res


def empty_model(model, feeds) -> onnx.ModelProto:
    """The model with none of its nodes: each graph input passed straight to an output of the same name."""
    ins = [_value_info(k, v) for k, v in feeds.items()]
    g = helper.make_graph([], "empty", ins, [_value_info(k, v) for k, v in feeds.items()])
    m = helper.make_model(g, opset_imports=list(model.opset_import), producer_name="debugkit reduce")
    m.ir_version = model.ir_version
    return m


def inline_taken_ifs(model: onnx.ModelProto, values: dict) -> tuple[onnx.ModelProto, int]:
    """The model with every top-level If whose condition was captured replaced by the branch it took (the condition
    becomes a constant holding the captured value), so the search can reach the nodes inside. Loop/Scan bodies stay
    whole: their nodes run many times with different values, which no single captured value can stand for."""
    from debugkit.surgeon.cleanup import cleanup_graph
    from debugkit.surgeon.inline_if import inline_constant_ifs
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    fixed = 0
    for node in g.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input[0] in values:
            name = f"{node.name or 'If'}/captured_condition"
            g.initializer.append(numpy_helper.from_array(np.asarray(values[node.input[0]]), name))
            node.input[0] = name
            fixed += 1
    count = inline_constant_ifs(g) if fixed else 0
    if count:
        cleanup_graph(g, remove_unused_inputs=False)
    return m, count
