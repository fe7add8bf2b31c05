"""A Loop or Scan body as a model of its own, one per iteration, so `debug reduce` can search inside it.

A body's nodes run once per iteration with different values, so no single captured value stands for a tensor
inside it. Instead the loop is replayed here, iteration by iteration, with ONNX Runtime running the body as a
stand-alone model: iteration i's feeds are the body inputs (Loop: iteration number, condition, carried values; Scan:
states and the i-th slice of each scan input) plus the outer-scope tensors the body reads. `iteration_model(i)` then
gives that iteration as an ordinary model — integer and bool inputs (the iteration number, the condition, shape
tensors) folded to constants, float inputs fed — on which the usual node-set reduction runs. The first iteration
that fails the check on its own is the one to reduce; when none does, the fault only shows through the iterations
together and the loop node stays whole.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from debugkit.surgeon.graphutil import outer_references
from native.errors import UsageError
from native.logger import G_LOGGER

LOOP_OPS = ("Loop", "Scan")
MAX_ITERATIONS = 16


class BodyError(UsageError):
    """The body cannot be replayed on its own (an outer tensor without a value, a body ONNX Runtime refuses)."""


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class BodyIterations:
    """The body of `node` (a top-level Loop/Scan of `model`) and its feeds at each of the first iterations."""

    def __init__(self, model: onnx.ModelProto, node: onnx.NodeProto, values: dict, limit: int = MAX_ITERATIONS):
        if node.op_type not in LOOP_OPS:
            raise UsageError(f"node '{node.name}' is a {node.op_type}, not one of {LOOP_OPS}")
        self.model, self.node, self.limit = model, node, limit
        self.body = _attr(node, "body")
        inits = {t.name: t for t in model.graph.initializer}
        consts = {o: n for n in model.graph.node if n.op_type == "Constant" for o in n.output}
        self.outer_inits, self.outer_values = [], {}
        for t in sorted(outer_references(self.body)):
            if t in inits:
                self.outer_inits.append(inits[t])
            elif t in values:
                self.outer_values[t] = np.asarray(values[t])
            elif t in consts:
                self.outer_inits.append(numpy_helper.from_array(numpy_helper.to_array(_attr(consts[t], "value")), t))
            else:
                raise BodyError(f"the body of {node.op_type} '{node.name}' reads '{t}' from the outer graph, and no "
                                f"value of it was captured")
        self.feeds = self._replay(values)

    def _value(self, name, values):
        if not name:
            return None
        if name in values:
            return np.asarray(values[name])
        for t in self.model.graph.initializer:
            if t.name == name:
                return numpy_helper.to_array(t)
        raise BodyError(f"no captured value for '{name}', an input of {self.node.op_type} '{self.node.name}'")

    def stand_alone(self, feeds: dict) -> onnx.ModelProto:
        """The body as a model whose inputs are the body's inputs and outer reads (typed from `feeds`)."""
        b = self.body
        ins = [_info(k, feeds[k]) for k in [i.name for i in b.input] + list(self.outer_values)]
        g = helper.make_graph(list(b.node), f"{self.node.name or self.node.op_type}_body", ins, list(b.output),
                              list(b.initializer) + list(self.outer_inits))
        m = helper.make_model(g, opset_imports=list(self.model.opset_import), producer_name="debugkit reduce")
        m.ir_version = self.model.ir_version
        m.functions.extend(self.model.functions)
        return m

    def _replay(self, values) -> list:
        """Feeds of each iteration (at most `limit`), from running the body with ONNX Runtime one step at a time."""
        node, b = self.node, self.body
        names = [i.name for i in b.input]
        if node.op_type == "Loop":
            trips = self._value(node.input[0], values) if len(node.input) > 0 else None
            cond = self._value(node.input[1], values) if len(node.input) > 1 else None
            carried = [self._value(t, values) for t in node.input[2:]]
            n = self.limit if trips is None else min(int(trips), self.limit)
            state = [np.asarray(True if cond is None else bool(cond))] + carried
            step = lambda i: [np.asarray(i, np.int64)] + state   # noqa: E731
        else:
            n_scan = int(_attr(node, "num_scan_inputs"))
            ins = [self._value(t, values) for t in node.input]
            state, scans = ins[:len(ins) - n_scan], ins[len(ins) - n_scan:]
            axes = list(_attr(node, "scan_input_axes", [0] * n_scan))
            dirs = list(_attr(node, "scan_input_directions", [0] * n_scan))
            length = scans[0].shape[axes[0] % scans[0].ndim] if scans else 0
            n = min(length, self.limit)

            def step(i):
                return state + [np.take(s, (length - 1 - i) if d else i, axis=a % s.ndim)
                                for s, a, d in zip(scans, axes, dirs)]
        feeds, session = [], None
        for i in range(n):
            f = dict(zip(names, step(i)))
            f.update(self.outer_values)
            feeds.append(f)
            if i == n - 1:
                break
            session = session or self._session(f)
            outs = session.run(None, f)
            if node.op_type == "Loop":
                state = [np.asarray(outs[0])] + [np.asarray(o) for o in outs[1:len(names) - 1]]
                if not bool(state[0]):
                    break
            else:
                state = [np.asarray(o) for o in outs[:len(state)]]
        return feeds

    def _session(self, feeds):
        import onnxruntime as ort
        try:
            return ort.InferenceSession(self.stand_alone(feeds).SerializeToString(),
                                        providers=["CPUExecutionProvider"])
        except Exception as e:
            raise BodyError(f"ONNX Runtime cannot run the body of {self.node.op_type} '{self.node.name}' on its "
                            f"own: {str(e).splitlines()[0][:200]}") from None

    def iteration_model(self, i: int) -> tuple[onnx.ModelProto, dict]:
        """(model, feeds) of iteration i: integer/bool inputs folded to constants, float inputs fed."""
        f = self.feeds[i]
        m = self.stand_alone(f)
        g = m.graph
        folded = [k for k in f if np.asarray(f[k]).dtype.kind not in "fc"]
        for k in folded:
            g.initializer.append(numpy_helper.from_array(np.asarray(f[k]), k))
        keep = [x for x in g.input if x.name not in folded]
        del g.input[:]
        g.input.extend(keep)
        return m, {k: v for k, v in f.items() if k not in folded}


def first_failing_iteration(iterations: BodyIterations, fails) -> int | None:
    """The first iteration whose body model fails on its own (`fails(model, feeds) -> bool`), or None."""
    for i in range(len(iterations.feeds)):
        model, feeds = iterations.iteration_model(i)
        if fails(model, feeds):
            return i
    G_LOGGER.info(f"no single iteration of the body of '{iterations.node.name}' fails on its own "
                  f"(first {len(iterations.feeds)} tried)")
    return None


def _info(name, value):
    v = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
