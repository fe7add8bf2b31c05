"""Built-in plugins for transformer ops: Attention (opsets 23-25), RotaryEmbedding (23), TensorScatter (24)."""
import numpy as np

from native.plugins import Plugin, register_plugin


def _split_heads(x, heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


@register_plugin
class AttentionPlugin(Plugin):
    """Scaled dot-product attention (opsets 23-25): masks (bool or additive, short last dim padded with -inf),
    grouped-query heads, past/present KV concat, nonpad_kv_seqlen, softcap, and opset 25's left/right windows.

    As onnx 1.23's definition states it: a query at absolute position p = offset + i (offset: the past length, or
    nonpad_kv_seqlen - S_q per batch for an external cache) attends key j when j <= p (is_causal), p - left <= j
    and j <= p + right (windows >= 0), j < nonpad_kv_seqlen and the bool mask allows it; softcap applies to the
    logits before the mask is added; a query row with no key left is a zero row (not NaN). qk_matmul_output_mode:
    0 QK, 1 after softcap, 2 plus the mask, 3 the probabilities. float16/bfloat16 compute in float32."""

    name = "Attention"

    def enqueue(self, inputs, fields):
        q, k, v = inputs[:3]
        mask, past_k, past_v, nonpad = (list(inputs[3:]) + [None] * 4)[:4]
        dtype = q.dtype
        three_d = q.ndim == 3
        if three_d:
            q = _split_heads(q, int(fields["q_num_heads"]))
            k = _split_heads(k, int(fields["kv_num_heads"]))
            v = _split_heads(v, int(fields["kv_num_heads"]))
        past_len = 0 if past_k is None else past_k.shape[2]
        if past_k is not None:
            k = np.concatenate([past_k, k], axis=2)
        if past_v is not None:
            v = np.concatenate([past_v, v], axis=2)
        present_k, present_v = k, v
        hq, hkv = q.shape[1], k.shape[1]
        work = np.float32 if dtype == np.float16 or dtype.name == "bfloat16" else dtype.type
        qf, kf, vf = (a.astype(work) for a in (q, k, v))
        if hq != hkv:  # grouped-query attention: each KV head serves hq // hkv consecutive query heads
            kf, vf = np.repeat(kf, hq // hkv, axis=1), np.repeat(vf, hq // hkv, axis=1)
        scale = fields.get("scale")
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
        scores = (qf @ np.swapaxes(kf, -1, -2)) * work(scale)
        qk0 = scores
        softcap = float(fields.get("softcap", 0.0) or 0.0)
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        qk1 = scores
        batch = scores.shape[0]
        lq, lk = scores.shape[-2:]
        if nonpad is not None:
            nonpad = np.asarray(nonpad).reshape(-1).astype(np.int64)
            offset = nonpad - lq                                   # external cache: per batch
        else:
            offset = np.full(batch, past_len, np.int64)
        pos = offset[:, None, None] + np.arange(lq)[None, :, None]   # (B, lq, 1): each query's absolute position
        j = np.arange(lk)[None, None, :]
        allowed = np.ones((batch, lq, lk), bool)
        if int(fields.get("is_causal", 0)):
            allowed &= j <= pos
        left, right = int(fields.get("left_window_size", -1)), int(fields.get("right_window_size", -1))
        if left >= 0:
            allowed &= j >= pos - left
        if right >= 0:
            allowed &= j <= pos + right
        if nonpad is not None:
            allowed &= j < nonpad[:, None, None]
        allowed = allowed[:, None]                                  # (B, 1, lq, lk)
        bias = np.zeros((1, 1, lq, lk), work)
        if mask is not None:
            if mask.shape[-1] < lk:
                pad = [(0, 0)] * (mask.ndim - 1) + [(0, lk - mask.shape[-1])]
                mask = np.pad(mask, pad, constant_values=False if mask.dtype == bool else -np.inf)
            if mask.dtype == bool:
                allowed = allowed & mask
            else:
                bias = bias + mask.astype(work)
        with np.errstate(invalid="ignore"):
            scores = np.where(allowed, scores + bias, -np.inf).astype(work)
        qk2 = scores
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.max(scores, axis=-1, keepdims=True)
            live = np.isfinite(m) | (m > 0)                        # a row with some key left
            e = np.where(live, np.exp(scores - np.where(np.isfinite(m), m, 0)), 0)
            total = np.sum(e, axis=-1, keepdims=True)
            probs = np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(work)   # fully masked: zeros
        y = probs @ vf
        if three_d:
            b, h, s, d = y.shape
            y = y.transpose(0, 2, 1, 3).reshape(b, s, h * d)
        qk = [qk0, qk1, qk2, probs][int(fields.get("qk_matmul_output_mode", 0))]
        return [y.astype(dtype), present_k, present_v, qk.astype(dtype)]


@register_plugin
class RotaryEmbeddingPlugin(Plugin):
    """Rotates (a leading `rotary_embedding_dim` slice of) each head's features by position-dependent angles,
    pairing halves (x[:d/2], x[d/2:]) or interleaved neighbours (x[0::2], x[1::2])."""

    name = "RotaryEmbedding"

    def enqueue(self, inputs, fields):
        x, cos, sin = inputs[:3]
        pos = inputs[3] if len(inputs) > 3 else None
        interleaved = int(fields.get("interleaved", 0))
        rot = int(fields.get("rotary_embedding_dim", 0))
        heads = int(fields.get("num_heads", 0))
        orig = x.shape
        if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
            x = x.transpose(0, 2, 1, 3)
        else:
            b, s, hid = x.shape
            x = x.reshape(b, s, heads, hid // heads)
        d = x.shape[-1]
        rot = rot or d
        if pos is not None:
            cos, sin = cos[pos], sin[pos]  # (B, S, rot/2)
        cos, sin = cos[:, :, None, : rot // 2], sin[:, :, None, : rot // 2]
        xr, rest = x[..., :rot], x[..., rot:]
        if interleaved:
            a, b_ = xr[..., 0::2], xr[..., 1::2]
        else:
            a, b_ = xr[..., : rot // 2], xr[..., rot // 2:]
        ra, rb = a * cos - b_ * sin, b_ * cos + a * sin
        out = np.stack([ra, rb], axis=-1).reshape(xr.shape) if interleaved else np.concatenate([ra, rb], axis=-1)
        out = np.concatenate([out, rest], axis=-1).astype(x.dtype)
        if len(orig) == 4:
            return [out.transpose(0, 2, 1, 3)]
        return [out.reshape(orig)]


@register_plugin
class TensorScatterPlugin(Plugin):
    """KV-cache update: writes `update` into a copy of `past_cache` along `axis` starting at each batch's
    write index (default 0); mode 'circular' wraps positions around the cache length."""

    name = "TensorScatter"

    def enqueue(self, inputs, fields):
        cache, update = inputs[:2]
        idx = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(cache.shape[0], np.int64)
        axis = int(fields.get("axis", -2)) % cache.ndim
        circular = fields.get("mode", "linear") == "circular"
        out = np.array(cache, copy=True)
        n, length = update.shape[axis], cache.shape[axis]
        for b in range(cache.shape[0]):
            pos = int(idx[b]) + np.arange(n)
            pos = pos % length if circular else pos
            np.moveaxis(out[b], axis - 1, 0)[pos] = np.moveaxis(update[b], axis - 1, 0)
        return [out]
