"""Attention heads as strides: the head split (Reshape [B,S,H,D] + Transpose) of q, k and v, the Split of a merged
QKV projection before them, and the head merge (Transpose + Reshape [B,S,H*D]) after the Attention layer are folded
into the layer itself (params `heads`, `columns`), so a device whose attention kernel reads strided operands (cuDNN's
SDPA on the GPU) reads q, k and v straight out of the projection's [B, S, C] output and writes [B, S, H*Dv]: no copy
of any of them. Runs where the device asks for it (`Device.attention_heads_as_strides`).

Each absorbed Shuffle chain is checked by applying it to an index array of the real shape, so any sequence of
reshapes and transposes that moves elements exactly like the head split / merge is accepted, and nothing else."""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_util import View, fused_node
from backends.engine.engine_graph import Node, TensorInfo
from native.cpu.kernels.tensor import shuffle
from native.tactics import Op


def _apply_shuffle(x: np.ndarray, p: dict) -> np.ndarray | None:
    """What a Shuffle layer with params `p` makes of x (None when its dims do not fit): the CPU kernel's own
    semantics, so the check and the layer cannot disagree."""
    try:
        return shuffle(Op("Shuffle", "", p), [x])[0]
    except (ValueError, IndexError, TypeError):
        return None


def _plain_shuffle(n) -> bool:
    return n is not None and n.kind == "Shuffle" and (len(n.inputs) == 1 or n.inputs[1] is None) and \
        len(n.outputs) == 1


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, (int, np.integer)) and d > 0 for d in shape)


def _head_split(view, att, i, heads, expect):
    """(source tensor [B, S, C], Shuffle node) when input i of `att` is a head split of a [B, S, C] tensor
    that moves elements as `expect` does, else None."""
    name = att.inputs[i]
    sh = view.producer(name)
    if not _plain_shuffle(sh) or view.sole_consumer(name) is not att:
        return None
    src = sh.inputs[0]
    shape = view.shape(src)
    if not _static(shape) or len(shape) != 3 or shape[2] % heads:
        return None
    idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    got = _apply_shuffle(idx, sh.params)
    want = expect(idx.reshape(shape[0], shape[1], heads, shape[2] // heads))
    if got is None or got.shape != want.shape or not np.array_equal(got, want):
        return None
    return src, sh


def _head_merge(view, att, out_shape):
    """(Shuffle nodes, final tensor, None) when the Attention output [B,H,S,Dv] reaches a [B, S, H*Dv] tensor through
    a chain of Shuffles (each the sole reader of the one before) that moves elements as the head merge does; or
    (Shuffle nodes, their last output, the next Shuffle) when the chain reaches the merged order in another shape
    ([B, S, H, Dv]) and the next Shuffle (GPT-2's reshape to [B*S, C] for its Gemm) makes of it what it makes of the
    [B, S, H*Dv] tensor: that Shuffle then reads the merged tensor instead."""
    b, h, s, dv = out_shape
    idx = np.arange(b * h * s * dv, dtype=np.int64).reshape(out_shape)
    want = idx.transpose(0, 2, 1, 3).reshape(b, s, h * dv)
    t, chain, cur = att.outputs[0], [], idx
    for _ in range(3):
        nxt = view.sole_consumer(t)
        if not _plain_shuffle(nxt):
            return None
        cur = _apply_shuffle(cur, nxt.params)
        if cur is None:
            return None
        chain.append(nxt)
        t = nxt.outputs[0]
        if cur.shape == want.shape and np.array_equal(cur, want):
            return chain, t, None
        if cur.size == want.size and np.array_equal(cur.reshape(-1), want.reshape(-1)):
            tail = view.sole_consumer(t)
            if _plain_shuffle(tail):
                a, m = _apply_shuffle(cur, tail.params), _apply_shuffle(want, tail.params)
                if a is not None and m is not None and a.shape == m.shape and np.array_equal(a, m):
                    return chain, t, tail
    return None


def _read_merged(view, graph, att, tail, heads_out):
    """A new [B, S, H*Dv] tensor for the folded layer to write, and `tail` replaced by a copy that reads it."""
    name = view.unique(f"{att.name}/heads_merged")
    info = view.info(att.outputs[0])
    graph.tensor_info[name] = TensorInfo(name, info.dtype if info is not None else "float32", list(heads_out), {})
    new_tail = Node(name=tail.name, kind=tail.kind, inputs=[name] + list(tail.inputs[1:]), outputs=list(tail.outputs),
                    params=dict(tail.params), weights=dict(tail.weights), source_nodes=list(tail.source_nodes),
                    precision=tail.precision, meta=dict(tail.meta))
    view.replace([tail], new_tail)
    return name


def _split_columns(view, src, readers):
    """(packed tensor, [start, stop)) when `src` is an output of a Split along the last axis read only by
    `readers`, else (src, [0, C])."""
    shape = view.shape(src)
    sp = view.producer(src, "Split")
    if sp is not None and (len(sp.inputs) == 1 or sp.inputs[1] is None) and sp.params.get("split") and \
            sp.params.get("axis") in (-1, 2) and view.internal(src, readers):
        sizes = [int(v) for v in sp.params["split"]]
        j = sp.outputs.index(src)
        start = sum(sizes[:j])
        return sp.inputs[0], [start, start + sizes[j]], sp
    return src, [0, int(shape[2])], None


def fold_attention_heads(graph, config, logger) -> int:
    """Attention layers whose q, k, v are head splits and whose output is head-merged → one Attention layer with
    `heads` (and `columns` into a merged QKV projection's output) that reads and writes the [B, S, C] tensors."""
    if not getattr(getattr(config, "device", None), "attention_heads_as_strides", False):
        return 0
    view, count = View(graph), 0
    for att in list(graph.nodes):
        if att not in graph.nodes or att.kind != "Attention" or att.params.get("heads") or len(att.outputs) != 1:
            continue
        q_shape, out_shape = view.shape(att.inputs[0]), view.shape(att.outputs[0])
        if not _static(q_shape) or not _static(out_shape) or len(q_shape) != 4 or len(out_shape) != 4:
            continue
        heads = int(q_shape[1])
        k_perm = (0, 2, 1, 3) if att.params.get("transpose_k", True) else (0, 2, 3, 1)
        found = [_head_split(view, att, 0, heads, lambda a: a.transpose(0, 2, 1, 3)),
                 _head_split(view, att, 1, heads, lambda a: a.transpose(k_perm)),
                 _head_split(view, att, 2, heads, lambda a: a.transpose(0, 2, 1, 3))]
        merge = _head_merge(view, att, out_shape)
        if any(f is None for f in found) or merge is None or len({f[1].name for f in found}) != 3:
            continue
        shuffles = [f[1] for f in found]
        srcs, columns, splits = [], [], []
        for src, _ in found:
            packed, cols, sp = _split_columns(view, src, shuffles)
            srcs.append(packed)
            columns.append(cols)
            if sp is not None and sp not in splits:
                splits.append(sp)
        for sp in splits:     # a Split goes only when every output of it is read here; else its outputs are read
            if not all(o in [f[0] for f in found] for o in sp.outputs):
                for j, (src, _) in enumerate(found):
                    if src in sp.outputs:
                        srcs[j], columns[j] = src, [0, int(view.shape(src)[2])]
        splits = [sp for sp in splits if any(s == sp.inputs[0] for s in srcs)]
        chain, final, tail = merge
        if tail is not None:
            b, h, sq, dv = out_shape
            final = _read_merged(view, graph, att, tail, [b, sq, h * dv])
        params = dict(att.params, heads=heads, columns=[c for pair in columns for c in pair], transpose_k=True)
        nodes = splits + shuffles + [att] + chain
        new = fused_node(nodes, "Attention", srcs + att.inputs[3:], [final], params, name=att.name)
        new.meta = dict(att.meta, **{k: v for k, v in new.meta.items()})
        view.replace(nodes, new)
        logger.verbose(f"fusion: attention heads as strides ({heads} heads, columns {columns}, "
                       f"{len(nodes) - 1} layers folded) → '{new.name}'")
        count += 1
    return count
