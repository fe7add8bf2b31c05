"""Attention on the GPU: cuDNN's fused scaled-dot-product attention (the frontend's SDPA graph: flash attention
with the scale and the additive mask fused, FP16/BF16 storage, FP32 softmax and accumulation) and cuBLAS's
two batched GEMMs around a softmax kernel (every precision, FP32 scores).

Operands are described by dims and strides, so cuDNN reads q, k and v where they lie: [B, H, S, D] tensors, K^T
given already transposed, or, for a heads-mode layer (passes/attention_heads.py), column ranges of the merged QKV
projection's [B, S, C] output, written back as [B, S, H*Dv] — no head split or merge copy. The mask is cuDNN's bias
operand, broadcast by strides. Which runs is the builder's choice by timing; supports() asks cuDNN at build time
whether it builds the layer's graph, so the runtime never meets a refusal (issue 23's contract)."""
from __future__ import annotations

import threading

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import has_library, missing
from native.cuda.diagnostics import captured_stderr
from native.cuda.driver import CudaError
from native.cuda.tactics.common import FLOAT_STORAGE, bcast_strides, cast, on_device, out_array, storage, suffix
from native.cuda.tactics.cudnn_conv import handle, on_release, report
from native.cuda.tactics.gemm import matmul
from native.cuda.tactics.pointwise import broadcast_params, launch_softmax
from native.cuda.tactics.tensor import strided_copy
from native.tactics import Tactic, TacticRefusal, register_tactic

_LOCK = threading.Lock()
_GRAPHS: dict = {}
_DECIDED: dict = {}     # graph key -> "" (cuDNN runs it) or why not


def _contiguous(shape) -> list:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= int(shape[d])
    return out


class Layout:
    """Where an Attention layer's operands lie: (dims [B,H,S,D], element strides, element offset) of q, k, v and
    the output, the mask's (dims, strides) as a [B|1, H|1, S, Sk] bias, and the output tensor's shape."""

    def __init__(self, op, shapes):
        p = op.params
        heads = p.get("heads")
        shapes = [tuple(int(d) for d in s) if s is not None else None for s in shapes]
        if any(s is None for s in shapes[:3]):
            raise TacticRefusal("q, k, v shapes unknown")
        if heads:
            cols = list(p.get("columns") or [])
            views = []
            for i in range(3):
                s = shapes[i]
                if len(s) != 3:
                    raise TacticRefusal(f"heads-mode operand {i} of rank {len(s)} (expected [B, S, C])")
                a, b = (cols[2 * i], cols[2 * i + 1]) if cols else (0, s[2])
                if (b - a) % heads:
                    raise TacticRefusal(f"columns {a}:{b} do not split into {heads} heads")
                d = (b - a) // heads
                views.append(([s[0], heads, s[1], d], [s[1] * s[2], d, s[2], 1], a))
            self.q, self.k, self.v = views
            b_, h_, sq, dv = views[0][0][0], heads, views[0][0][2], views[2][0][3]
            self.out_shape = (b_, sq, h_ * dv)
            self.o = ([b_, h_, sq, dv], [sq * h_ * dv, dv, h_ * dv, 1], 0)
        else:
            q, k, v = (tuple(s) for s in shapes[:3])
            if not (len(q) == len(k) == len(v)) or len(q) not in (3, 4) or q[:-2] != k[:-2] or q[:-2] != v[:-2]:
                raise TacticRefusal(f"q, k, v of shapes {[list(q), list(k), list(v)]} are not [B, H, S, D] alike")
            pad = (1,) * (4 - len(q))
            q, k, v = pad + q, pad + k, pad + v
            self.q = (list(q), _contiguous(q), 0)
            if p.get("transpose_k", True):
                self.k = (list(k), _contiguous(k), 0)
            else:     # K^T given [B, H, D, Sk]: K is its transpose, by strides
                st = _contiguous(k)
                self.k = ([k[0], k[1], k[3], k[2]], [st[0], st[1], st[3], st[2]], 0)
            self.v = (list(v), _contiguous(v), 0)
            o = (q[0], q[1], q[2], v[3])
            self.o = (list(o), _contiguous(o), 0)
            self.out_shape = tuple(shapes[0][:-1]) + (v[3],)
        b_, h_, sq, d = self.q[0]
        sk = self.k[0][2]
        if self.k[0][3] != d or self.v[0][2] != sk or self.k[0][:2] != [b_, h_] or self.v[0][:2] != [b_, h_]:
            raise TacticRefusal("q, k, v disagree on batch, heads, key length or head size")
        self.bias = None
        if p.get("mask_kind", "add") != "none" and len(shapes) > 3 and shapes[3] is not None:
            m = shapes[3]
            if len(m) > 4:
                raise TacticRefusal(f"mask of rank {len(m)}")
            m = (1,) * (4 - len(m)) + tuple(m)
            full = (b_, h_, sq, sk)
            if any(a not in (1, f) for a, f in zip(m, full)):
                raise TacticRefusal(f"mask {list(m)} does not broadcast to the scores {list(full)}")
            st = _contiguous(m)
            # batch and head dims stay 1 where the mask has 1; query and key dims are full, stride 0 if broadcast
            dims = [m[0], m[1], sq, sk]
            strides = [st[0], st[1], 0 if m[2] == 1 else st[2], 0 if m[3] == 1 else st[3]]
            self.bias = (dims, strides)

    def key(self):
        return (tuple(map(tuple, self.q[:2])), tuple(map(tuple, self.k[:2])), tuple(map(tuple, self.v[:2])),
                tuple(map(tuple, self.o[:2])), None if self.bias is None else tuple(map(tuple, self.bias)))


def _io_type(dtype):
    import cudnn
    return {"float16": cudnn.data_type.HALF, "bfloat16": cudnn.data_type.BFLOAT16}[np.dtype(dtype).name]


class SdpaGraph:
    """One built cuDNN SDPA graph (inference: no softmax stats) and its execution plan."""

    expand = False      # the mask is expanded to a dense bias before each execution (cuDNN refused stride 0)

    def __init__(self, layout: Layout, dtype, scale: float, handle):
        import cudnn
        io = _io_type(dtype)
        self.g = g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                                   compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        self.q = g.tensor(name="q", dim=layout.q[0], stride=layout.q[1], data_type=io)
        self.k = g.tensor(name="k", dim=layout.k[0], stride=layout.k[1], data_type=io)
        self.v = g.tensor(name="v", dim=layout.v[0], stride=layout.v[1], data_type=io)
        self.bias = None
        kwargs = {}
        if layout.bias is not None:
            self.bias = g.tensor(name="bias", dim=layout.bias[0], stride=layout.bias[1], data_type=io)
            kwargs["bias"] = self.bias
        res = g.sdpa(name="sdpa", q=self.q, k=self.k, v=self.v, generate_stats=False, attn_scale=float(scale),
                     **kwargs)
        o = res[0] if isinstance(res, (list, tuple)) else res
        o.set_output(True).set_dim(layout.o[0]).set_stride(layout.o[1]).set_data_type(io)
        self.o = o
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        self.index, why = None, "no execution plan"
        for j in range(int(g.get_execution_plan_count())):    # cuDNN's order: the first plan that builds
            try:
                g.build_plan_at_index(j)
                self.workspace = int(g.get_workspace_size_plan_at_index(j))
                self.index = j
                break
            except Exception as e:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if self.index is None:
            raise TacticRefusal(f"cuDNN built none of its SDPA plans: {why}")

    def execute(self, q, k, v, bias, o, offsets, handle):
        size = np.dtype(q.dtype).itemsize
        pack = {self.q: q.ptr + offsets[0] * size, self.k: k.ptr + offsets[1] * size,
                self.v: v.ptr + offsets[2] * size, self.o: o.ptr}
        if self.bias is not None:
            pack[self.bias] = bias.ptr
        ws = GpuArray((self.workspace,), np.uint8) if self.workspace else None
        self.g.execute_plan_at_index(pack, ws.ptr if ws is not None else 0, self.index, handle=handle)


@register_tactic
class CudnnSdpaAttention(Tactic):
    """cuDNN's fused SDPA (flash attention): scale and additive mask fused, q/k/v read through strides (heads-mode
    layers straight out of the QKV projection), FP16/BF16 storage with FP32 softmax and accumulation."""

    kind, name, device = "Attention", "cudnn-sdpa", "cuda"
    writes_outputs = True
    precisions = ("float16", "bfloat16")
    input_dtypes, dtype_inputs = frozenset(("float16", "bfloat16")), (0, 1, 2)

    def supports(self, op, input_shapes):
        if not has_library("cudnn"):
            return missing("cudnn")
        p = op.params
        if storage(op).name not in ("float16", "bfloat16"):
            return "cuDNN's SDPA takes FP16/BF16 operands; FP32 layers run cublas-softmax"
        if p.get("mask_kind", "add") not in ("add", "none"):
            return f"mask kind {p.get('mask_kind')} runs on cublas-softmax or the host"
        if p.get("nan_to_zero"):
            return "fully masked rows -> 0 (nan_to_zero) is not cuDNN's contract; cublas-softmax runs it"
        if p.get("softmax_axis", -1) not in (-1, None):
            return "softmax over another axis runs on the host"
        if not input_shapes or any(s is None for s in list(input_shapes)[:3]):
            return None
        for shapes in (list(input_shapes), getattr(input_shapes, "min_shapes", None),
                       getattr(input_shapes, "max_shapes", None)):
            if not shapes or any(s is None for s in shapes[:3]):
                continue
            why = self._decide(op, shapes)
            if why:
                return why if list(shapes) == list(input_shapes) else \
                    f"{why} (at the profile's input shapes {[list(s) for s in shapes if s is not None]})"
        return None

    @staticmethod
    def _scale(op, layout):
        s = op.params.get("scale")
        return 1.0 / np.sqrt(layout.q[0][3]) if s is None else float(s)

    def _decide(self, op, shapes):
        """None when cuDNN builds the SDPA graph for these shapes, else why not (cached per graph key)."""
        try:
            layout = Layout(op, shapes)
        except TacticRefusal as e:
            return str(e)
        if 0 in layout.q[0] or 0 in layout.k[0]:
            return "empty attention runs on cublas-softmax"
        dtype = storage(op)
        key = (layout.key(), dtype.name, self._scale(op, layout))
        known = _DECIDED.get(key)
        if known is None:
            try:
                _graph(key, layout, dtype, self._scale(op, layout))
                known = ""
            except TacticRefusal as e:
                known = str(e)
            _DECIDED[key] = known
        return known or None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        q, k, v = (on_device(x) for x in inputs[:3])
        dtype = storage(op)
        if {np.dtype(x.dtype).name for x in (q, k, v)} != {dtype.name}:
            raise TacticRefusal(f"cuDNN's SDPA needs q, k, v stored as {dtype.name}")
        layout = Layout(op, [x.shape for x in inputs[:3]] +
                        [tuple(inputs[3].shape) if len(inputs) > 3 and inputs[3] is not None else None])
        out = out_array(outputs, 0, layout.out_shape, dtype)
        if out.size == 0:
            return [out]
        scale = self._scale(op, layout)
        key = (layout.key(), dtype.name, scale)
        g = _GRAPHS.get(key) or _graph(key, layout, dtype, scale)
        bias = None
        if layout.bias is not None:
            bias = cast(on_device(inputs[3]), dtype)
            if g.expand:
                bias = _expanded_mask(bias, layout.bias[0])
        try:
            g.execute(q, k, v, bias, out, (layout.q[2], layout.k[2], layout.v[2]), handle())
        except Exception as e:
            raise CudaError(f"cuDNN SDPA failed: {e}") from e
        return [out]


def _graph(key, layout, dtype, scale) -> SdpaGraph:
    """The built graph for `key`: the mask broadcast by strides, or, where cuDNN wants a dense bias, expanded over
    the query rows into a buffer per execution (`SdpaGraph.expand`). TacticRefusal when cuDNN builds neither."""
    with _LOCK:
        g = _GRAPHS.get(key)
        if g is not None:
            return g
        said, why = [], None
        tries = [False] + ([True] if layout.bias is not None and 0 in layout.bias[1] else [])
        for expand in tries:
            if expand:
                layout.bias = (layout.bias[0], _contiguous(layout.bias[0]))
            try:
                with captured_stderr(said):
                    g = SdpaGraph(layout, dtype, scale, handle())
                g.expand = expand
                break
            except Exception as e:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if g is None:
            raise TacticRefusal(f"cuDNN has no SDPA engine for this attention: {why}")
        if said:
            report("attention", "cudnn-sdpa", said)
        _GRAPHS[key] = g
        return g


def _expanded_mask(mask: GpuArray, dims) -> GpuArray:
    """The mask as a dense [B|1, H|1, S, Sk] bias (one strided copy; broadcast dims read with stride 0)."""
    out = GpuArray(tuple(dims), mask.dtype)
    shape = (1,) * (4 - mask.ndim) + tuple(mask.shape)
    strided_copy(mask, 0, bcast_strides(dims, shape), dims, out)
    return out


def split_heads(x: GpuArray, columns, i: int, heads: int) -> GpuArray:
    """Operand i of a heads-mode Attention as a contiguous [B, H, S, D] copy (for cublas-softmax)."""
    b, s, c = x.shape
    a, e = (columns[2 * i], columns[2 * i + 1]) if columns else (0, c)
    d = (e - a) // heads
    out = GpuArray((b, heads, s, d), x.dtype)
    strided_copy(x, a, [s * c, d, c, 1], out.shape, out)
    return out


def merge_heads(y: GpuArray, outputs) -> GpuArray:
    """[B, H, S, Dv] -> [B, S, H*Dv] (one strided copy into the planned output)."""
    b, h, s, dv = y.shape
    out = out_array(outputs, 0, (b, s, h * dv), y.dtype)
    strided_copy(y, 0, [h * s * dv, dv, s * dv, 1], (b, s, h, dv), out)
    return out


@register_tactic
class CublasAttention(Tactic):
    """softmax(q @ k' * scale + mask) @ v: scores in FP32 from one batched GEMM, a row kernel for scale, additive
    mask and softmax (fully masked rows -> 0 with nan_to_zero), then a batched GEMM with v. Heads-mode layers
    copy their heads out and back (cuDNN's SDPA reads them in place)."""

    kind, name, device = "Attention", "cublas-softmax", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = ("float32", "float16", "bfloat16")
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if missing("cublas"):
            return missing("cublas")
        if op.params.get("mask_kind", "add") not in ("add", "none"):
            return f"mask kind {op.params.get('mask_kind')} runs on the host"
        if input_shapes and all(s is not None for s in input_shapes[:3]):
            q, k, v = (tuple(s) for s in input_shapes[:3])
            if op.params.get("heads"):
                if len(q) != 3 or len(k) != 3 or len(v) != 3:
                    return "heads-mode operands must be [B, S, C]"
            elif len(q) < 2 or q[:-2] != k[:-2] or q[:-2] != v[:-2]:
                return "q, k, v with different batch dims run on the host"
        if op.params.get("softmax_axis", -1) not in (-1, None):
            return "softmax over another axis runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        q, k, v = (on_device(x) for x in inputs[:3])
        mask = on_device(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
        p = op.params
        heads = p.get("heads")
        if heads:
            q, k, v = (split_heads(x, p.get("columns"), i, heads) for i, x in enumerate((q, k, v)))
        if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
            raise TacticRefusal("q, k, v with different batch dims run on the host")
        scores = matmul(q, k, False, bool(p.get("transpose_k", True)), tf32=(op.math == "tf32"),
                        out_dtype=np.float32)
        scale = p.get("scale")
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        rows, cols = scores.size // max(scores.shape[-1], 1), scores.shape[-1]
        probs = GpuArray(scores.shape, q.dtype)
        if mask is not None and p.get("mask_kind", "add") != "none":
            if mask.dtype != np.float32:
                mask = cast(mask, np.float32)
            ms = broadcast_params(scores.shape, scores.shape, mask.shape)
            mptr = mask.ptr
        else:
            ms, mptr = np.zeros(26, np.int64), 0
        launch_softmax("attn_softmax" + suffix(q.dtype), rows, cols,
                       [np.uint64(probs.ptr), np.uint64(scores.ptr), np.int64(rows), np.int64(cols), np.float32(scale),
                        np.uint64(mptr), ms, np.int32(1 if p.get("nan_to_zero") else 0)])
        del scores
        if heads:
            return [merge_heads(matmul(probs, v, tf32=(op.math == "tf32")), outputs)]
        return [matmul(probs, v, tf32=(op.math == "tf32"), outputs=outputs)]


def release():
    """Drop the SDPA graphs and decisions (before cuDNN's handles go: cudnn_conv.release calls it)."""
    with _LOCK:
        _GRAPHS.clear()
        _DECIDED.clear()


on_release(release)
