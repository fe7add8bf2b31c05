"""Plugins on the GPU: NonMaxSuppression (index.cu: score ranking, float64 IoU bitmask, one greedy warp
per class, one sync for the output size) and the Squeeze / Unsqueeze view plugins. The CPU's twins:
cpu/kernels/plugins*.py; the STFT plugin is in signal.py."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray, to_host
from native.cuda.driver import context
from native.cuda.nvrtc import kernel, launch
from native.cuda.tactics.common import on_device, out_array, ptr
from native.cuda.tactics.index import BLOCK, IndexKernel, SRC, code
from native.tactics import TacticRefusal, register_tactic


_NMS_SCRATCH = 2 << 30   # bytes of IoU bitmask one NMS layer may use before the host's clustered pass is better


def _opt_scalar(inputs, i, dtype):
    """Input i as a device scalar of `dtype`, or None where absent or empty (the CPU plugin's defaults)."""
    v = inputs[i] if len(inputs) > i else None
    if v is None:
        return None
    v = on_device(v)
    if not isinstance(v, GpuArray) or v.size == 0:
        return None
    if v.dtype != dtype:
        raise TacticRefusal(f"NMS scalar input {i} of type {v.dtype} runs on the host")
    return v


@register_tactic
class GpuNonMaxSuppression(IndexKernel):
    """The NonMaxSuppression plugin on the GPU: per (batch, class) the candidates above the score threshold are
    ranked by score (descending, stable, NaN last), an IoU bitmask of every ordered pair is built in parallel
    (float64, as the CPU plugin computes IoU), and one block per class walks it greedily, 64 candidates at a time,
    up to max_output_boxes.
    The kept counts are downloaded (one sync) to size the [n, 3] int64 output."""

    kind, name = "Plugin", "nvrtc-nms"

    def supports(self, op, input_shapes):
        if op.params.get("plugin_type") != "NonMaxSuppression":
            return f"plugin {op.params.get('plugin_type')} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if op.params.get("plugin_type") != "NonMaxSuppression":
            raise TacticRefusal(f"plugin {op.params.get('plugin_type')} runs on the host")
        boxes, scores = on_device(inputs[0]), on_device(inputs[1])
        c = code(boxes)
        if c not in ("f32", "f16") or scores.dtype != boxes.dtype or boxes.ndim != 3 or scores.ndim != 3 \
                or boxes.shape[2] != 4 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise TacticRefusal("NMS inputs outside [B, n, 4] / [B, C, n] float32/float16 run on the host")
        max_out = _opt_scalar(inputs, 2, np.int64)
        iou_thr = _opt_scalar(inputs, 3, np.float32)
        score_thr = _opt_scalar(inputs, 4, np.float32)
        fields = dict(op.params.get("fields") or {})
        fields.update(op.weights or {})
        center = int(np.asarray(fields.get("center_point_box", 0)).reshape(-1)[0])
        B, C, n = scores.shape
        bc = B * C
        words = (n + 63) // 64
        if not (n and bc and max_out is not None):
            return [out_array(outputs, 0, (0, 3), np.int64)]
        if bc * n * words * 8 > _NMS_SCRATCH or bc > 65535 or words * 8 > 48 * 1024 or n >= 2 ** 31:
            raise TacticRefusal(f"NMS of {bc} classes x {n} boxes: the host's clustered pass is the better choice")
        ctx = context()
        count = GpuArray((bc,), np.int32)
        ctx.memset0(count.ptr, count.nbytes)
        order = GpuArray((bc, n), np.int32)
        launch(kernel(SRC, f"rank_{c}"), (bc, (n + 255) // 256, 1), BLOCK,
               [np.uint64(scores.ptr), np.uint64(0), np.uint64(0), np.uint64(order.ptr), np.uint64(count.ptr),
                np.int64(bc), np.int64(n), np.int64(1), np.int64(n), np.int32(2), ptr(score_thr)])
        mask = GpuArray((bc, n, words), np.uint64)
        launch(kernel(SRC, f"nms_mask_{c}"), (words, (n + 63) // 64, bc), (64, 1, 1),
               [np.uint64(mask.ptr), np.uint64(boxes.ptr), np.uint64(order.ptr), np.uint64(count.ptr), np.int64(C),
                np.int64(n), np.int64(words), np.int32(center), ptr(iou_thr)])
        kept = GpuArray((bc, n), np.int32)
        nkept = GpuArray((bc,), np.int32)
        launch(kernel(SRC, "nms_scan"), (bc, 1, 1), BLOCK,
               [np.uint64(kept.ptr), np.uint64(nkept.ptr), np.uint64(mask.ptr), np.uint64(order.ptr),
                np.uint64(count.ptr), np.int64(n), np.int64(words), ptr(max_out)], shared=words * 8)
        total = int(to_host(nkept).astype(np.int64).sum())
        out = out_array(outputs, 0, (total, 3), np.int64)
        if total:
            launch(kernel(SRC, "nms_rows"), (bc, 1, 1), BLOCK,
                   [np.uint64(out.ptr), np.uint64(kept.ptr), np.uint64(nkept.ptr), np.int64(C), np.int64(n)])
        return [out]


_VIEW_PLUGINS = ("Squeeze", "Unsqueeze")


@register_tactic
class GpuShapePlugin(IndexKernel):
    """The Squeeze / Unsqueeze plugins (axes known only at run time, as in ssdlite320, ppocr_v4_rec, silero_vad):
    a reshaped view of the input, no kernel (axes given as a tensor are downloaded: one sync)."""

    kind, name = "Plugin", "device-view"
    writes_outputs = False

    def supports(self, op, input_shapes):
        if op.params.get("plugin_type") not in _VIEW_PLUGINS:
            return f"plugin {op.params.get('plugin_type')} is not a view"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        kind = op.params.get("plugin_type")
        x = on_device(inputs[0])
        if kind not in _VIEW_PLUGINS or not isinstance(x, GpuArray):
            raise TacticRefusal(f"plugin {kind} runs on the host")
        fields = dict(op.params.get("fields") or {})
        axes = fields.get("axes")
        if len(inputs) > 1 and inputs[1] is not None:
            axes = [int(a) for a in np.asarray(to_host(inputs[1])).reshape(-1)]
        probe = np.broadcast_to(np.zeros((), np.uint8), x.shape)     # shape arithmetic without memory
        try:
            if kind == "Unsqueeze":
                shape = np.expand_dims(probe, tuple(axes)).shape
            elif axes is None:
                shape = [d for d in x.shape if d != 1]
            else:
                shape = np.squeeze(probe, axis=tuple(a + x.ndim if a < 0 else a for a in axes)).shape
        except (ValueError, TypeError, IndexError) as e:
            raise TacticRefusal(f"{kind} axes {axes} on shape {list(x.shape)}: the host plugin reports it ({e})") from None
        return [x.reshape(shape)]
