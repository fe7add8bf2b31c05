"""Pattern fusions that recognise decomposed ops and rebuild the single layer (TensorRT FUS-19, FUS-28):
GELU (erf and tanh forms) → Activation GELU_*, hand-made LayerNorm → Normalization LAYER,
exp / sum / div → Softmax, MatMul → [scale] → [mask add] → Softmax → MatMul → Attention.
"""
from __future__ import annotations

import math

from backends.engine.builder.passes.fusion_util import View, close, fused_node, other_input, same_precision


def _ew(view, name, op):
    return view.producer(name, "ElementWise", op)


def _scalar_operand(view, node, name):
    """For a binary node reading `name`, the scalar constant on its other side."""
    o = other_input(node, name)
    return view.scalar(o) if o is not None else None


# GELU ---------------------------------------------------------------------------------------------------

def _gelu_tail(view, t, x, nodes):
    """From t = (1 + f(x)): match  x * t * 0.5  in any association; returns (output, nodes) or None."""
    m1 = view.sole_consumer(t)
    if m1 is None or m1.kind != "ElementWise" or m1.params.get("op") != "PROD":
        return None
    o = other_input(m1, t)
    if o == x:                                     # (x * t) * 0.5
        m2 = view.sole_consumer(m1.outputs[0])
        if m2 is None or m2.kind != "ElementWise" or m2.params.get("op") != "PROD" or \
                not close(_scalar_operand(view, m2, m1.outputs[0]), 0.5):
            return None
        return m2.outputs[0], nodes + [m1, m2]
    h = _ew(view, o, "PROD")                       # (x * 0.5) * t   or   x * (0.5 * t) handled as above
    if h is not None and x in h.inputs and close(_scalar_operand(view, h, x), 0.5) and view.internal(o, [m1]):
        return m1.outputs[0], [h] + nodes + [m1]
    if close(view.scalar(o), 0.5):                 # (t * 0.5) * x
        m2 = view.sole_consumer(m1.outputs[0])
        if m2 is not None and m2.kind == "ElementWise" and m2.params.get("op") == "PROD" and \
                other_input(m2, m1.outputs[0]) == x:
            return m2.outputs[0], nodes + [m1, m2]
    return None


def _plus_one(view, t):
    a = view.sole_consumer(t)
    if a is not None and a.kind == "ElementWise" and a.params.get("op") == "SUM" and \
            close(_scalar_operand(view, a, t), 1.0):
        return a
    return None


def fuse_gelu(graph, config, logger) -> int:
    view, count = View(graph), 0
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        form = None
        if node.kind == "Unary" and node.params.get("op") == "ERF":
            form = "GELU_ERF"
        elif (node.kind == "Activation" and node.params.get("type") == "TANH") or \
                (node.kind == "Unary" and node.params.get("op") == "TANH"):
            form = "GELU_TANH"
        if form is None or not view.is_float(node.inputs[0]):
            continue
        inner = view.prod.get(node.inputs[0])
        if inner is None or inner.kind != "ElementWise" or view.sole_consumer(node.inputs[0]) is not node:
            continue
        if form == "GELU_ERF":
            op = inner.params.get("op")
            x = next((i for i in inner.inputs if view.const(i) is None), None)
            s = _scalar_operand(view, inner, x) if x is not None else None
            if not ((op == "DIV" and inner.inputs[0] == x and close(s, math.sqrt(2))) or
                    (op == "PROD" and close(s, 1 / math.sqrt(2)))):
                continue
            head = [inner, node]
        else:
            x, head = _tanh_inner(view, inner)
            if x is None:
                continue
            head = head + [node]
        add = _plus_one(view, node.outputs[0])
        if add is None:
            continue
        tail = _gelu_tail(view, add.outputs[0], x, head + [add])
        if tail is None or not same_precision(tail[1]):
            continue
        out, nodes = tail
        new = fused_node(nodes, "Activation", [x], [out], {"type": form, "alpha": 0.0, "beta": 0.0})
        view.replace(nodes, new)
        logger.verbose(f"fusion: GELU ({form}) pattern → '{new.name}'")
        count += 1
    return count


def _tanh_inner(view, m):
    """m = c1 * (x + c2 * x^3) with c1 = sqrt(2/pi), c2 = 0.044715; returns (x, nodes)."""
    if m.params.get("op") != "PROD":
        return None, None
    s = next((i for i in m.inputs if view.const(i) is None), None)
    if s is None or not close(_scalar_operand(view, m, s), math.sqrt(2 / math.pi)):
        return None, None
    add = _ew(view, s, "SUM")
    if add is None or view.sole_consumer(s) is not m:
        return None, None
    for x in add.inputs:
        cube = other_input(add, x)
        mul = _ew(view, cube, "PROD")
        if mul is None or view.sole_consumer(cube) is not add:
            continue
        p = next((i for i in mul.inputs if view.const(i) is None), None)
        if p is None or not close(_scalar_operand(view, mul, p), 0.044715):
            continue
        pw = _ew(view, p, "POW")
        if pw is not None and pw.inputs[0] == x and close(view.scalar(pw.inputs[1]), 3.0) and \
                view.sole_consumer(p) is mul:
            return x, [pw, mul, add, m]
    return None, None


# LayerNorm ----------------------------------------------------------------------------------------------

def _reduce_mean_axes(view, node):
    if node is None or node.kind != "Reduce" or node.params.get("op") != "AVG" or not node.params.get("keep_dims", True):
        return None
    axes = node.params.get("axes")
    if axes is None and len(node.inputs) > 1:
        c = view.const(node.inputs[1])
        axes = c.tolist() if c is not None else None
    if axes is None or len(axes) != 1:
        return None
    r = view.rank(node.inputs[0])
    a = int(axes[0])
    if a >= 0:
        if r is None or a != r - 1:
            return None
    elif a != -1:
        return None
    return [-1]


def fuse_layernorm(graph, config, logger) -> int:
    """mean → sub → pow 2 → mean → add eps → sqrt → div [→ mul gamma] [→ add beta]  ⇒  Normalization LAYER."""
    view, count = View(graph), 0
    for mean in list(graph.nodes):
        if mean not in graph.nodes or _reduce_mean_axes(view, mean) is None:
            continue
        x = mean.inputs[0]
        if not view.is_float(x):
            continue
        sub = view.sole_consumer(mean.outputs[0])
        if sub is None or sub.kind != "ElementWise" or sub.params.get("op") != "SUB" or sub.inputs != [x, mean.outputs[0]]:
            continue
        d = sub.outputs[0]
        users = view.cons.get(d, [])
        if d in view.outs or len(users) != 2:
            continue
        sq = next((u for u in users if u.kind == "ElementWise" and (
            (u.params.get("op") == "POW" and u.inputs[0] == d and close(view.scalar(u.inputs[1]), 2.0)) or
            (u.params.get("op") == "PROD" and u.inputs == [d, d]))), None)
        div = next((u for u in users if u.kind == "ElementWise" and u.params.get("op") == "DIV" and u.inputs[0] == d), None)
        if sq is None or div is None:
            continue
        var = view.sole_consumer(sq.outputs[0])
        if _reduce_mean_axes(view, var) is None:
            continue
        add = view.sole_consumer(var.outputs[0])
        eps = _scalar_operand(view, add, var.outputs[0]) if add is not None and add.kind == "ElementWise" and \
            add.params.get("op") == "SUM" else None
        if eps is None:
            continue
        sqrt = view.sole_consumer(add.outputs[0])
        if sqrt is None or sqrt.kind != "Unary" or sqrt.params.get("op") != "SQRT" or div.inputs[1] != sqrt.outputs[0] \
                or view.sole_consumer(sqrt.outputs[0]) is not div:
            continue
        nodes = [mean, sub, sq, var, add, sqrt, div]
        out, gamma, beta = div.outputs[0], None, None
        mul = view.sole_consumer(out)
        if mul is not None and mul.kind == "ElementWise" and mul.params.get("op") == "PROD":
            g = other_input(mul, out)
            if view.const(g) is not None and view.const(g).ndim <= 1:
                gamma, out = g, mul.outputs[0]
                nodes.append(mul)
        badd = view.sole_consumer(out)
        if badd is not None and badd.kind == "ElementWise" and badd.params.get("op") == "SUM":
            b = other_input(badd, out)
            if view.const(b) is not None and view.const(b).ndim <= 1:
                beta, out = b, badd.outputs[0]
                nodes.append(badd)
        if not same_precision(nodes):
            continue
        import numpy as np
        dt = np.dtype(view.dtype(x))
        width = max(view.const(gamma).size if gamma else 1, view.const(beta).size if beta else 1)
        if gamma is None:
            gamma = view.new_constant(f"{mean.name}/gamma", np.ones(width, dt), mean)
        if beta is None:
            beta = view.new_constant(f"{mean.name}/beta", np.zeros(width, dt), mean)
        new = fused_node(nodes, "Normalization", [x, gamma, beta], [out],
                         {"mode": "LAYER", "axes": [-1], "epsilon": eps, "num_groups": 1, "stash_type": 1})
        view.replace(nodes, new)
        logger.verbose(f"fusion: LayerNorm pattern ({len(nodes)} layers) → '{new.name}'")
        count += 1
    return count


# Softmax ------------------------------------------------------------------------------------------------

def _reduce_axis(view, node, op):
    if node is None or node.kind != "Reduce" or node.params.get("op") != op or not node.params.get("keep_dims", True):
        return None
    axes = node.params.get("axes")
    if axes is None and len(node.inputs) > 1:
        c = view.const(node.inputs[1])
        axes = c.tolist() if c is not None else None
    return int(axes[0]) if axes is not None and len(axes) == 1 else None


def fuse_softmax(graph, config, logger) -> int:
    """[x - max(x)] → exp → e / sum(e)  ⇒  Softmax(axis)."""
    view, count = View(graph), 0
    for exp in list(graph.nodes):
        if exp not in graph.nodes or exp.kind != "Unary" or exp.params.get("op") != "EXP":
            continue
        e = exp.outputs[0]
        users = view.cons.get(e, [])
        if e in view.outs or len(users) != 2:
            continue
        red = next((u for u in users if u.kind == "Reduce"), None)
        div = next((u for u in users if u.kind == "ElementWise" and u.params.get("op") == "DIV"), None)
        axis = _reduce_axis(view, red, "SUM")
        if axis is None or div is None or red.inputs[0] != e or div.inputs != [e, red.outputs[0]] or \
                view.sole_consumer(red.outputs[0]) is not div or not view.is_float(e):
            continue
        nodes, x = [exp, red, div], exp.inputs[0]
        sub = _ew(view, x, "SUB")
        if sub is not None and view.sole_consumer(x) is exp:
            mx = view.producer(sub.inputs[1], "Reduce")
            if _reduce_axis(view, mx, "MAX") == axis and mx.inputs[0] == sub.inputs[0] and \
                    view.sole_consumer(mx.outputs[0]) is sub:
                nodes, x = [mx, sub] + nodes, sub.inputs[0]
        if not same_precision(nodes):
            continue
        new = fused_node(nodes, "Softmax", [x], [div.outputs[0]], {"axis": axis, "log": False, "hard": False})
        view.replace(nodes, new)
        logger.verbose(f"fusion: Softmax pattern → '{new.name}' (axis {axis})")
        count += 1
    return count


# Attention ----------------------------------------------------------------------------------------------

def _plain_matmul(n):
    return n is not None and n.kind == "MatrixMultiply" and not n.weights and not n.params.get("post_ops") \
        and not n.params.get("transpose_a") and len([i for i in n.inputs if i is not None]) == 2


def fuse_attention(graph, config, logger) -> int:
    """MatMul(q, k) → [* / scale] → [+ mask] → Softmax(-1) → [where(isnan, 0, ·)] → MatMul(·, v)  ⇒  Attention."""
    view, count = View(graph), 0
    for mm1 in list(graph.nodes):
        if mm1 not in graph.nodes or not _plain_matmul(mm1) or not view.is_float(mm1.outputs[0]):
            continue
        nodes, scale, mask, t = [mm1], 1.0, None, mm1.outputs[0]
        nxt = view.sole_consumer(t)
        if nxt is not None and nxt.kind == "ElementWise" and nxt.params.get("op") in ("DIV", "PROD") and \
                nxt.inputs[0] == t and view.scalar(nxt.inputs[1]) not in (None, 0.0):
            s = view.scalar(nxt.inputs[1])
            scale = 1.0 / s if nxt.params["op"] == "DIV" else s
            nodes.append(nxt)
            t = nxt.outputs[0]
            nxt = view.sole_consumer(t)
        if nxt is not None and nxt.kind == "ElementWise" and nxt.params.get("op") == "SUM" and \
                other_input(nxt, t) is not None:
            mask = other_input(nxt, t)
            nodes.append(nxt)
            t = nxt.outputs[0]
            nxt = view.sole_consumer(t)
        rank = view.rank(t)
        if nxt is None or nxt.kind != "Softmax" or nxt.params.get("log") or nxt.params.get("hard") or \
                nxt.params.get("axis") not in (-1, (rank - 1) if rank else -1):
            continue
        sm, nodes, t = nxt, nodes + [nxt], nxt.outputs[0]
        nan_to_zero = False
        users = view.cons.get(t, [])
        if len(users) == 2 and t not in view.outs:
            isnan = next((u for u in users if u.kind == "Unary" and u.params.get("op") == "ISNAN"), None)
            sel = next((u for u in users if u.kind == "Select"), None)
            if isnan is not None and sel is not None and sel.inputs == [isnan.outputs[0], sel.inputs[1], t] and \
                    view.scalar(sel.inputs[1]) == 0.0 and view.sole_consumer(isnan.outputs[0]) is sel:
                nodes += [isnan, sel]
                t, nan_to_zero = sel.outputs[0], True
        mm2 = view.sole_consumer(t)
        if not _plain_matmul(mm2) or mm2.inputs[0] != t or mm2.params.get("transpose_b"):
            continue
        nodes.append(mm2)
        q, k = mm1.inputs[0], mm1.inputs[1]
        for side in (0, 1):                       # absorb scalar pre-scales of q and k (SDPA exports)
            name = mm1.inputs[side]
            pre = _ew(view, name, "PROD")
            if pre is not None and view.sole_consumer(name) is mm1:
                xin = next((i for i in pre.inputs if view.const(i) is None), None)
                s = _scalar_operand(view, pre, xin) if xin is not None else None
                if s is not None:
                    scale *= s
                    nodes.insert(0, pre)
                    if side == 0:
                        q = xin
                    else:
                        k = xin
        if not same_precision(nodes):
            continue
        inputs = [q, k, mm2.inputs[1]] + ([mask] if mask is not None else [])
        new = fused_node(nodes, "Attention", inputs, mm2.outputs,
                         {"scale": scale, "mask_kind": "add" if mask is not None else "none",
                          "transpose_k": bool(mm1.params.get("transpose_b")), "softmax_axis": -1,
                          "nan_to_zero": nan_to_zero},
                         name=f"Attention({mm1.name}, {sm.name}, {mm2.name})")
        view.replace(nodes, new)
        logger.verbose(f"fusion: attention ({len(nodes)} layers, scale {scale:.6g}, mask {mask is not None}) → "
                       f"'{new.name}'")
        count += 1
    return count


# SiLU / HardSwish ---------------------------------------------------------------------------------------

def fuse_silu(graph, config, logger) -> int:
    """x * sigmoid(x) ⇒ Activation SILU (so a preceding convolution can take it as its epilogue)."""
    view, count = View(graph), 0
    for sig in list(graph.nodes):
        if sig not in graph.nodes or sig.kind != "Activation" or sig.params.get("type") != "SIGMOID" or \
                len(sig.inputs) != 1 or not view.is_float(sig.inputs[0]):
            continue
        x, s = sig.inputs[0], sig.outputs[0]
        mul = view.sole_consumer(s)
        if mul is None or mul.kind != "ElementWise" or mul.params.get("op") != "PROD" or other_input(mul, s) != x \
                or not same_precision([sig, mul]) or view.shape(x) is None or view.shape(x) != view.shape(mul.outputs[0]):
            continue
        new = fused_node([sig, mul], "Activation", [x], mul.outputs, {"type": "SILU", "alpha": 0.0, "beta": 0.0})
        view.replace([sig, mul], new)
        logger.verbose(f"fusion: SiLU pattern → '{new.name}'")
        count += 1
    return count


# Parallel GEMMs (Q / K / V projections) -------------------------------------------------------------------------

def _gemm_key(n):
    """Group key of a MatrixMultiply that can share one GEMM with its siblings, else None."""
    import numpy as np
    b = n.weights.get("b")
    if n.kind != "MatrixMultiply" or b is None or np.ndim(b) != 2 or n.params.get("transpose_a") or \
            len([i for i in n.inputs if i is not None]) != 1 or len(n.outputs) != 1 or n.meta.get("output_types"):
        return None
    if any(s["op"] != "bias" or s.get("axis", -1) not in (-1, 1) for s in n.params.get("post_ops") or []):
        return None
    return n.inputs[0], bool(n.params.get("transpose_b")), str(b.dtype), n.meta.get("precision_constraint")


def merge_parallel_gemms(graph, config, logger) -> int:
    """MatrixMultiply layers that read the same input with constant 2-D right operands (the Q, K and V projections
    of attention) → one GEMM over the concatenated weights (and biases) plus a Split into the original tensors:
    one larger GEMM instead of three small ones, and two fewer layers."""
    import numpy as np
    groups: dict = {}
    for n in graph.nodes:
        key = _gemm_key(n)
        if key is not None:
            groups.setdefault(key, []).append(n)
    count = 0
    for (src, tb, _, _), nodes in groups.items():
        if len(nodes) < 2:
            continue
        ws = [n.weights["b"] for n in nodes]
        if len({w.shape[1 if tb else 0] for w in ws}) != 1:
            continue
        sizes = [int(w.shape[0 if tb else 1]) for w in ws]
        weights = {"b": np.concatenate(ws, axis=0 if tb else 1)}
        params = {"transpose_a": False, "transpose_b": tb}
        if any(n.params.get("post_ops") for n in nodes):
            biases = []
            for n, size in zip(nodes, sizes):
                b = np.zeros(size, ws[0].dtype)
                for s in n.params.get("post_ops") or []:
                    b = b + np.asarray(n.weights[s["weight"]], ws[0].dtype).reshape(-1)
                biases.append(b)
            weights["bias"] = np.concatenate(biases)
            params["post_ops"] = [{"op": "bias", "weight": "bias", "axis": -1}]
        merged = nodes[0].outputs[0] + "/merged_gemm"
        gemm = fused_node(nodes, "MatrixMultiply", [src], [merged], params, weights)
        split = fused_node(nodes, "Split", [merged], [n.outputs[0] for n in nodes], {"axis": -1, "split": sizes},
                           name=gemm.name + " (split)")
        graph.replace_nodes(nodes, [gemm, split], where="first")
        graph.tensor_info.pop(merged, None)
        logger.verbose(f"fusion: {len(nodes)} GEMMs on '{src}' merged → '{gemm.name}' ({sizes})")
        count += 1
    return count
