"""Graph clean-ups and pointwise fusion (TensorRT FUS-01/05/09/10/25/30):

- identity elimination: Identity, same-type Cast, empty Shuffle, no-op Scale, x+0 / x*1 that keep the shape;
- shuffle pairs: transpose∘transpose composed (or dropped when they cancel), reshape∘reshape merged;
- pointwise chains: ElementWise / Unary / Activation nodes joined through single-consumer edges become one
  Pointwise node whose params["program"] the fused kernel evaluates in one pass with in-place buffers.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_util import View, fused_node, other_input

POINTWISE_ELEMENTWISE = {"SUM", "PROD", "SUB", "DIV", "MAX", "MIN", "POW"}
POINTWISE_UNARY = {"EXP", "LOG", "SQRT", "RECIP", "ABS", "NEG", "SIN", "COS", "TAN", "SINH", "COSH", "ASIN", "ACOS",
                   "ATAN", "ASINH", "ACOSH", "ATANH", "CEIL", "FLOOR", "ERF", "SIGN", "ROUND", "RECIPROCAL_SQRT",
                   "TANH"}
MAX_INLINE_CONST_BYTES = 1 << 16
MAX_PROGRAM_STEPS = 64


def _is_transpose(n):
    return n is not None and n.kind == "Shuffle" and n.params.get("first_transpose") is not None and \
        n.params.get("reshape_dims") is None and n.params.get("second_transpose") is None and \
        len([i for i in n.inputs if i is not None]) == 1


def _reshape_dims(view, n):
    """Constant target dims of a pure reshape Shuffle, else None."""
    if n is None or n.kind != "Shuffle" or n.params.get("first_transpose") is not None or \
            n.params.get("second_transpose") is not None:
        return None
    dims = n.params.get("reshape_dims")
    if dims is None and len(n.inputs) > 1:
        c = view.const(n.inputs[1])
        dims = c.tolist() if c is not None else None
    return list(dims) if dims is not None else None


def _is_noop(view, n):
    """The input tensor this node passes through unchanged, else None."""
    if n.kind == "Identity" and len(n.inputs) == 1:
        return n.inputs[0]
    if n.kind == "Cast" and view.dtype(n.inputs[0]) is not None and view.dtype(n.inputs[0]) == n.params.get("to"):
        return n.inputs[0]
    if n.kind == "Shuffle" and len([i for i in n.inputs if i is not None]) == 1:
        p = n.params
        ft, st = p.get("first_transpose"), p.get("second_transpose")
        ident = lambda perm: perm is None or list(perm) == list(range(len(perm)))  # noqa: E731
        if ident(ft) and ident(st) and p.get("reshape_dims") is None:
            return n.inputs[0]
    if n.kind == "Scale" and len(n.inputs) == 1:
        w = n.weights
        if all(np.all(np.asarray(w.get(k, d)) == d) for k, d in (("scale", 1), ("shift", 0), ("power", 1))):
            return n.inputs[0]
    if n.kind == "ElementWise" and n.params.get("op") in ("SUM", "SUB", "PROD", "DIV"):
        x = n.inputs[0] if n.params["op"] in ("SUB", "DIV") else next(
            (i for i in n.inputs if view.const(i) is None), None)
        if x is None or (n.params["op"] in ("SUB", "DIV") and view.const(n.inputs[1]) is None):
            return None
        c = view.const(other_input(n, x) if n.params["op"] in ("SUM", "PROD") else n.inputs[1])
        neutral = 0 if n.params["op"] in ("SUM", "SUB") else 1
        sx = view.shape(x)
        if c is not None and c.size >= 1 and np.all(c == neutral) and sx is not None and c.ndim <= len(sx) and \
                view.dtype(x) == c.dtype.name and \
                all(dc == 1 or dc == dx for dc, dx in zip(c.shape[::-1], sx[::-1])):
            return x
    return None


def eliminate_identities(graph, config, logger) -> int:
    view, count = View(graph), 0
    for n in list(graph.nodes):
        src = _is_noop(view, n)
        if src is not None and len(n.outputs) == 1 and view.bypass(n, src, n.outputs[0]):
            logger.verbose(f"fusion: removed no-op {n.kind} '{n.name}'")
            count += 1
    return count


def merge_shuffles(graph, config, logger) -> int:
    """Transpose(p1) then Transpose(p2) → Transpose(p1[p2]) or nothing; Reshape then Reshape → one Reshape."""
    view, count = View(graph), 0
    for first in list(graph.nodes):
        if first not in graph.nodes:
            continue
        second = view.sole_consumer(first.outputs[0]) if first.kind == "Shuffle" else None
        if second is None or second.kind != "Shuffle" or second.inputs[0] != first.outputs[0]:
            continue
        if _is_transpose(first) and _is_transpose(second):
            p1, p2 = list(first.params["first_transpose"]), list(second.params["first_transpose"])
            if len(p1) != len(p2):
                continue
            perm = [p1[i] for i in p2]
            if perm == list(range(len(perm))):
                graph.set_inputs(second, [first.inputs[0]])
                graph.erase(first)
                view.refresh()
                if not view.bypass(second, first.inputs[0], second.outputs[0]):
                    second.params = dict(second.params, first_transpose=perm)
                    second.source_nodes = (first.source_nodes or [first.name]) + (second.source_nodes or [second.name])
                    view.refresh()
                logger.verbose(f"fusion: transposes '{first.name}' and '{second.name}' cancel")
            else:
                new = fused_node([first, second], "Shuffle", [first.inputs[0]], second.outputs,
                                 dict(second.params, first_transpose=perm))
                view.replace([first, second], new)
                logger.verbose(f"fusion: transposes merged → '{new.name}' perm {perm}")
            count += 1
            continue
        d1, d2 = _reshape_dims(view, first), _reshape_dims(view, second)
        if d1 is not None and d2 is not None and (0 not in d2 or not second.params.get("zero_is_placeholder", True)):
            new = fused_node([first, second], "Shuffle", [first.inputs[0]], second.outputs,
                             dict(second.params, reshape_dims=[int(d) for d in d2]))
            view.replace([first, second], new)
            logger.verbose(f"fusion: reshapes merged → '{new.name}'")
            count += 1
    return count


def _static(shape):
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def sink_gemm_reshapes(graph, config, logger) -> int:
    """Reshape [..., K] → [P, K], MatrixMultiply by a constant 2-D operand, Reshape [P, N] → [..., N]: the GEMM
    kernels fold leading dims themselves, so both reshapes go (ONNX Gemm exports of GPT-2 / BERT blocks).
    Needs static shapes (fixed profiles); the GEMM may carry bias / activation post-ops (row-local), not residuals."""
    view, count = View(graph), 0
    for m in list(graph.nodes):
        if m.kind != "MatrixMultiply" or "b" not in m.weights or np.ndim(m.weights["b"]) != 2 or \
                m.params.get("transpose_a") or len(m.outputs) != 1 or len([i for i in m.inputs if i]) != 1 or \
                any(s["op"] not in ("bias", "activation") for s in m.params.get("post_ops") or []):
            continue
        r1, r2 = view.producer(m.inputs[0], "Shuffle"), view.sole_consumer(m.outputs[0])
        if _reshape_dims(view, r1) is None or _reshape_dims(view, r2) is None or r2.inputs[0] != m.outputs[0]:
            continue
        x_shape, flat, out = view.shape(r1.inputs[0]), view.shape(m.inputs[0]), view.shape(r2.outputs[0])
        if not (_static(x_shape) and _static(flat) and _static(out)) or len(flat) != 2 or len(x_shape) < 2 or \
                x_shape[-1] != flat[-1] or list(out) != list(x_shape[:-1]) + [view.shape(m.outputs[0])[-1]]:
            continue
        graph.set_inputs(m, [r1.inputs[0]] + m.inputs[1:])
        old_out = m.outputs[0]
        graph.set_outputs(m, r2.outputs)
        m.source_nodes = (m.source_nodes or [m.name]) + (r2.source_nodes or [r2.name])
        graph.erase(r2)
        graph.tensor_info.pop(old_out, None)
        view.refresh()
        logger.verbose(f"fusion: reshapes around GEMM '{m.name}' removed")
        count += 1
    return count


def merge_reshape_transpose(graph, config, logger) -> int:
    """Reshape (constant dims) then Transpose → one Shuffle (reshape, second_transpose); Transpose then Reshape →
    one Shuffle (first_transpose, reshape). Runs after the pattern fusions, which look for plain transposes."""
    view, count = View(graph), 0
    for n in graph.nodes:  # constant dims input → params (a static reshape, as TensorRT builds it)
        if n.kind == "Shuffle" and len(n.inputs) == 2 and n.inputs[1] is not None and n.params.get("reshape_dims") is None:
            c = view.const(n.inputs[1])
            if c is not None and np.asarray(c).dtype.kind in "iu":  # a float shape is the kernel's to reject
                n.params = dict(n.params, reshape_dims=[int(d) for d in np.asarray(c).reshape(-1)])
                graph.set_inputs(n, n.inputs[:1])
                count += 1
    view.refresh()
    for first in list(graph.nodes):
        if first not in graph.nodes or first.kind != "Shuffle":
            continue
        second = view.sole_consumer(first.outputs[0])
        if second is None or second.kind != "Shuffle" or second.inputs[0] != first.outputs[0]:
            continue
        d1, d2 = _reshape_dims(view, first), _reshape_dims(view, second)
        if d1 is not None and _is_transpose(second):
            params = {"first_transpose": None, "reshape_dims": [int(d) for d in d1],
                      "second_transpose": list(second.params["first_transpose"]),
                      "zero_is_placeholder": first.params.get("zero_is_placeholder", True)}
        elif _is_transpose(first) and d2 is not None:
            params = {"first_transpose": list(first.params["first_transpose"]), "reshape_dims": [int(d) for d in d2],
                      "second_transpose": None, "zero_is_placeholder": second.params.get("zero_is_placeholder", True)}
        else:
            continue
        new = fused_node([first, second], "Shuffle", [first.inputs[0]], second.outputs, params)
        view.replace([first, second], new)
        logger.verbose(f"fusion: reshape and transpose merged → '{new.name}'")
        count += 1
    return count


def _pointwise_op(view, n):
    """Whether `n` can be a step of a Pointwise program."""
    if len(n.outputs) != 1 or n.subgraphs or n.params.get("post_ops") or not view.is_float(n.outputs[0]):
        return False
    if n.kind == "ElementWise":
        return n.params.get("op") in POINTWISE_ELEMENTWISE and len(n.inputs) == 2 and \
            all(view.is_float(i) for i in n.inputs)
    if n.kind == "Unary":
        return n.params.get("op") in POINTWISE_UNARY and view.is_float(n.inputs[0])
    if n.kind == "Activation":
        return len(n.inputs) == 1 and view.is_float(n.inputs[0])
    if n.kind == "Pointwise":
        return True
    return False


def fuse_pointwise(graph, config, logger) -> int:
    """Join pointwise nodes linked by single-consumer edges into Pointwise nodes (in-trees with one sink)."""
    view = View(graph)
    group_of: dict[int, list] = {}
    for n in graph.nodes:
        if not _pointwise_op(view, n):
            continue
        joined = None
        for name in dict.fromkeys(i for i in n.inputs if i is not None):
            p = view.prod.get(name)
            if p is None or id(p) not in group_of or view.sole_consumer(name) is not n:
                continue
            if p.meta.get("precision_constraint") != n.meta.get("precision_constraint"):
                continue
            g = group_of[id(p)]
            if joined is None:
                joined = g
            elif g is not joined and len(joined) + len(g) <= MAX_PROGRAM_STEPS:
                joined.extend(g)
                for m in g:
                    group_of[id(m)] = joined
        if joined is not None and len(joined) < MAX_PROGRAM_STEPS:
            joined.append(n)
            group_of[id(n)] = joined
        else:
            group_of[id(n)] = [n]
    groups, seen = [], set()
    for n in graph.nodes:
        g = group_of.get(id(n))
        if g is not None and id(g) not in seen:
            seen.add(id(g))
            if len(g) >= 2:
                groups.append(g)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    count = 0
    for g in groups:
        g.sort(key=lambda m: order[id(m)])
        new = _build_pointwise(view, g)
        view.replace(g, new)
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        logger.verbose(f"fusion: pointwise chain of {len(g)} layers → '{new.name}'")
        count += 1
    return count


def _build_pointwise(view, group):
    steps, where, ext, weights = [], {}, [], {}
    members = {id(m) for m in group}

    def ref(name):
        if name in where:
            return where[name]
        c = view.const(name)
        if c is not None and c.nbytes <= MAX_INLINE_CONST_BYTES:
            key = f"c{len(weights)}"
            weights[key] = c
            where[name] = f"w:{key}"
            return where[name]
        if name not in ext:
            ext.append(name)
        return f"in:{ext.index(name)}"

    for m in group:
        sub = m.params.get("program") if m.kind == "Pointwise" else None
        if sub is not None:           # an already fused chain: inline its steps
            base = len(steps)
            local = {}
            for j, st in enumerate(sub):
                args = []
                for a in st["args"]:
                    kind, idx = a.split(":", 1)
                    if kind == "in":
                        args.append(ref(m.inputs[int(idx)]))
                    elif kind == "w":
                        key = f"c{len(weights)}"
                        weights[key] = m.weights[idx]
                        args.append(f"w:{key}")
                    else:
                        args.append(f"s:{local[int(idx)]}")
                local[j] = base + j
                steps.append({"op": st["op"], "args": args, "params": dict(st.get("params", {}))})
        else:
            steps.append({"op": m.kind, "args": [ref(i) for i in m.inputs], "params": dict(m.params)})
        where[m.outputs[0]] = f"s:{len(steps) - 1}"
    del members
    sink = group[-1]
    names = [m.name for m in group]
    name = f"PWN({', '.join(names)})"
    node = fused_node(group, "Pointwise", ext, sink.outputs, {"program": steps}, weights, name=name)
    return node
