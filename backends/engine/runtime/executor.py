"""Runs an engine Graph node by node on a device, freeing each intermediate after its last use.

Shared by the runtime, the builder's timing run and constant folding, so that all three execute the same code.
"""
from __future__ import annotations

import dataclasses

from native.errors import DebugkitError, ExecutionError
from native.tactics import Op, tactic_by_id, tactics_for


def default_tactic(node, device="cpu"):
    """The first registered tactic that supports the node (what an untimed build picks)."""
    candidates = tactics_for(node.kind, device)
    shapes = node.meta.get("input_shapes")
    op = node_op(node)
    for t in candidates:
        if t.supports(op, shapes):
            return t
    from native.errors import BuildError
    raise BuildError(f"no {device} implementation for layer '{node.name}' (kind {node.kind}, ONNX nodes "
                     f"{node.source_nodes}); try another device or report the layer kind")


def node_op(node) -> Op:
    return Op(node.kind, node.name, node.params, node.weights, {}, node.precision)


class GraphExecutor:
    """Executes one Graph. `keep` names tensors to return besides the outputs (debug taps)."""

    def __init__(self, graph, device: str = "cpu", keep_all: bool = False):
        self.graph = graph
        self.device = device
        if device == "cpu":
            from native.cpu import threads
            threads.init()  # BLAS single-threaded from the first layer on, not from the first parallel kernel
        self.steps = []
        self.consts = {}  # Constant layers' outputs, bound once here instead of running a layer per execution
        for node in graph.nodes:
            tactic = tactic_by_id(node.kind, node.tactic_id, device) if node.tactic_id is not None \
                else default_tactic(node, device)
            if node.kind == "Constant" and tactic.name == "numpy" and not node.subgraphs:
                self.consts[node.outputs[0]] = node.weights["value"]
                continue
            subs = {k: GraphExecutor(g, device) for k, g in node.subgraphs.items()}
            op = node_op(node)
            if hasattr(tactic, "check_loadable"):  # e.g. a Plugin layer whose plugin is not registered here
                tactic.check_loadable(op)
            self.steps.append((node, tactic, op, subs))
        self.outer = graph.outer_references()
        self.keep_all = keep_all
        self._last_use = self._compute_last_use()

    def _compute_last_use(self):
        last = {}
        for i, (node, _, _, subs) in enumerate(self.steps):
            for name in node.inputs:
                if name is not None:
                    last[name] = i
            for sub in subs.values():
                for name in sub.outer:
                    last[name] = i
        return last

    def free_plan(self, keep: set):
        """Per step, the names that die after it (not outputs, not kept)."""
        keep = set(keep) | set(self.graph.output_names) | set(self.consts)
        dies = [[] for _ in self.steps]
        for name, i in self._last_use.items():
            if name not in keep:
                dies[i].append(name)
        # outputs nobody reads die at once
        read = set(self._last_use)
        for i, (node, _, _, _) in enumerate(self.steps):
            for name in node.outputs:
                if name not in read and name not in keep:
                    dies[i].append(name)
        return dies

    def run(self, feeds: dict, keep=(), parent_env=None, tactics=None) -> dict:
        """Execute; returns the env restricted to outputs and `keep` (everything when keep_all)."""
        env = dict(self.consts)
        env.update(feeds)
        if parent_env is not None:
            for name in self.outer:
                if name not in env and name in parent_env:
                    env[name] = parent_env[name]
        if self.keep_all:
            dies = None
        else:  # cached per `keep`: loop bodies run this many times with the same keep set
            cache = self.__dict__.setdefault("_dies_cache", {})
            key = frozenset(keep)
            dies = cache.get(key)
            if dies is None:
                dies = cache[key] = self.free_plan(keep)
        for i, (node, tactic, op, subs) in enumerate(self.steps):
            if tactics is not None and node.name in tactics:
                tactic = tactics[node.name]
            try:
                args = [env[n] if n is not None else None for n in node.inputs]
            except KeyError as e:
                raise ExecutionError(f"layer '{node.name}' reads tensor {e.args[0]!r}, which no earlier layer or "
                                     f"input produced") from None
            if subs:
                op = dataclasses.replace(op, subgraphs={k: _bind(s, env) for k, s in subs.items()})
            try:
                outs = tactic.run(op, args)
            except DebugkitError:
                raise
            except Exception as e:  # a kernel failing on real data is reported with the layer's ONNX origin
                shapes = [getattr(a, "shape", None) for a in args]
                raise ExecutionError(f"layer '{node.name}' ({node.kind}, tactic {tactic.name}, ONNX nodes "
                                     f"{node.source_nodes}) failed on input shapes {shapes}: "
                                     f"{type(e).__name__}: {e}") from e
            for name, value in zip(node.outputs, outs):
                env[name] = value
            if dies is not None:
                for name in dies[i]:
                    env.pop(name, None)
        return env

    def run_list(self, inputs: list, parent_env=None) -> list:
        feeds = {t.name: v for t, v in zip(self.graph.inputs, inputs)}
        env = self.run(feeds, parent_env=parent_env)
        return [env[t.name] for t in self.graph.outputs]


def _bind(executor, env):
    return lambda inputs: executor.run_list(inputs, parent_env=env)
