"""The NHWC conversion the layout pass makes (passes/layout.py says what and when): which layers have NHWC twins,
the transposes around them, and the elimination of inverse transpose pairs. Shared by the layout pass and layout
timing (passes/layout_timing.py), which converts a copy of the graph to time it."""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_util import View
from backends.engine.engine_graph import Node

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
AGNOSTIC = {"Activation", "ElementWise", "Pointwise", "Unary"}


def is_transpose(n, perm=None):
    ok = n is not None and n.kind == "Shuffle" and n.params.get("first_transpose") is not None and \
        n.params.get("reshape_dims") is None and n.params.get("second_transpose") is None and \
        len([i for i in n.inputs if i is not None]) == 1
    return ok and (perm is None or list(n.params["first_transpose"]) == list(perm))


def count_transposes(graph) -> int:
    return sum(1 for n in graph.nodes if is_transpose(n) and
               list(n.params["first_transpose"]) != list(range(len(n.params["first_transpose"]))))


def _transpose_node(view, name, src, perm, base, made_for=None):
    """A layout transpose. Made for layer `made_for`, it carries that layer's precision constraint: a layer asked to
    run FP32 must not have its input or output stored FP16 by a transpose the user never named."""
    out = view.unique(base)
    meta = {"layout": "reformat"}
    if made_for is not None and made_for.meta.get("precision_constraint") is not None:
        meta["precision_constraint"] = made_for.meta["precision_constraint"]
    return Node(name=view.unique(name), kind="Shuffle", inputs=[src], outputs=[out],
                params={"first_transpose": list(perm), "reshape_dims": None, "second_transpose": None,
                        "zero_is_placeholder": True}, meta=meta)


def _conv_eligible(view, n):
    if n.kind != "Convolution" or n.params.get("integer") or len(n.params.get("kernel_shape") or []) != 2:
        return None
    if n.params.get("side"):   # a merged shortcut convolution (fusion_shortcut.py): NCHW kernels only
        return None
    if n.params.get("groups", 1) != 1 or n.params.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", None):
        return None
    if view.rank(n.inputs[0]) != 4:
        return None
    k = n.weights.get("kernel")
    b = n.weights.get("bias")
    if k is None and len(n.inputs) > 1:
        k = view.const(n.inputs[1])
        if len(n.inputs) > 2 and n.inputs[2] is not None:
            b = view.const(n.inputs[2])
            if b is None:
                return None
    if k is None or np.asarray(k).ndim != 4 or np.asarray(k).dtype.kind != "f":
        return None
    return np.asarray(k), b


def _pool_eligible(view, n):
    p = n.params
    if n.kind != "Pooling" or len(n.outputs) != 1 or view.rank(n.inputs[0]) != 4 or p.get("type") not in ("MAX", "AVERAGE"):
        return False
    if p.get("global"):
        return True
    return len(p.get("window") or []) == 2 and not p.get("ceil_mode") and \
        p.get("auto_pad", "NOTSET") in ("NOTSET", "VALID", None) and all(d == 1 for d in (p.get("dilations") or [1, 1]))


def _agnostic_eligible(view, n, from_nchw_transpose):
    """Operand indices to transpose for a layout-agnostic op, or None."""
    if n.kind not in AGNOSTIC or len(n.outputs) != 1 or view.rank(n.outputs[0]) != 4:
        return None
    if n.kind == "Activation" and len(n.inputs) != 1:
        return None
    idx, hit = [], False
    for i, name in enumerate(n.inputs):
        if name is None:
            continue
        c = view.const(name)
        if c is not None and (c.size == 1 or c.ndim == 4):
            continue
        if view.rank(name) != 4:
            return None
        idx.append(i)
        hit = hit or from_nchw_transpose(name)
    return idx if hit else None


class _Producers:
    """The graph's own producer index (kept current by its mutation API) read as View.prod is read."""

    def __init__(self, graph):
        self.graph = graph

    def get(self, name, default=None):
        n = self.graph.producer(name) if name is not None else None
        return default if n is None else n


class _ConvertView(View):
    """What convert() reads of the graph (producers, constants, shapes, free names) without View's full refresh
    after each insertion: producers through the graph's maintained index, taken names as a set. Refreshing per
    inserted transpose made converting ssdlite's ~2000 layers quadratic (the layout pass converts twice: a
    quarter of its warm GPU build). convert() reads no consumer lists."""

    def refresh(self):
        g = self.graph
        if not hasattr(self, "taken"):
            self.prod = _Producers(g)
            self.cons = None
            self.outs = set(g.output_names)
            self.ins = set(g.input_names)
            self.taken = {o for n in g.nodes for o in n.outputs} | {n.name for n in g.nodes} | self.ins

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


def convert(graph, skip, renamed=None) -> list:
    """Step 1 over the graph: NHWC twins wrapped in transposes (layers named in `skip` stay NCHW); returns the
    names of the layers converted. `renamed` gets {NCHW output: the NHWC tensor now computed instead}."""
    view = _ConvertView(graph)
    converted = []
    for n in list(graph.nodes):
        if (n.precision == "int8" and not n.meta.get("int8_io")) or n.name in skip:   # INT8 kernels take NCHW,
            continue                                   # except int8 I/O ones (passes/int8_io.py)

        def from_nchw(name):
            return is_transpose(view.prod.get(name), TO_NCHW)
        operands = None
        conv = _conv_eligible(view, n)
        if conv is not None:
            k, b = conv
            m = k.shape[0]
            w = {"kernel_hwio": np.ascontiguousarray(k.transpose(2, 3, 1, 0).reshape(-1, m))}
            if b is not None:
                w["bias"] = np.asarray(b)
            for key, val in n.weights.items():
                if key.startswith("post_bias") or key == "kernel_scale":
                    w[key] = val
            post = [dict(s, axis=-1) if s["op"] == "bias" else s for s in (n.params.get("post_ops") or [])]
            extra = [s["input"] for s in post if s["op"] == "add"]
            inputs = [n.inputs[0], None, None] + [n.inputs[i] for i in extra]
            post = [dict(s, input=3 + extra.index(s["input"])) if s["op"] == "add" else s for s in post]
            n.kind, n.weights = "ConvolutionNHWC", w
            graph.set_inputs(n, inputs)
            n.params = dict(n.params, post_ops=post, kernel_spatial=[int(d) for d in k.shape[2:]],
                            num_output_maps=int(m))
            operands = [0] + list(range(3, len(inputs)))
        elif _pool_eligible(view, n):
            n.kind = "PoolingNHWC"
            operands = [0]
        else:
            operands = _agnostic_eligible(view, n, from_nchw)
            if operands is None:
                continue
            for i, name in enumerate(n.inputs):
                c = view.const(name) if name is not None else None
                if c is not None and c.ndim == 4 and c.size > 1:
                    graph.set_inputs(n, n.inputs[:i] + [view.new_constant(
                        f"{name}_nhwc", np.ascontiguousarray(c.transpose(TO_NHWC)), n)] + n.inputs[i + 1:])
        for i in operands:
            t = _transpose_node(view, f"{n.name}_transpose_input_{i}", n.inputs[i], TO_NHWC, f"{n.inputs[i]}_nhwc",
                                n)
            view.insert_before(n, t)
            graph.set_inputs(n, n.inputs[:i] + [t.outputs[0]] + n.inputs[i + 1:])
        out = n.outputs[0]
        inner = view.unique(f"{out}_nhwc")
        graph.set_outputs(n, [inner] + n.outputs[1:])
        if renamed is not None:
            renamed[out] = inner
        back = _transpose_node(view, f"{n.name}_transpose_output_0", inner, TO_NCHW, f"{out}_nchw", n)
        back.outputs = [out]
        graph.insert_after(n, back)
        view.refresh()
        converted.append(n.name)
    return converted


def eliminate_pairs(graph, view) -> int:
    removed, changed, gone = 0, True, set()
    while changed:
        changed = False
        for t2 in list(graph.nodes):
            if id(t2) in gone or not is_transpose(t2):     # (gone: a set, not a scan of the node list per node)
                continue
            t1 = view.prod.get(t2.inputs[0])
            if not is_transpose(t1):
                continue
            p1, p2 = list(t1.params["first_transpose"]), list(t2.params["first_transpose"])
            if len(p1) == len(p2) and [p1[i] for i in p2] == list(range(len(p1))):
                if view.bypass(t2, t1.inputs[0], t2.outputs[0]):
                    gone.add(id(t2))
                    removed += 1
                    changed = True
    return removed
