"""Built-in plugins for the stateful sequence ops of ai.onnx opset 27: CausalConvWithState and LinearAttention.

Both carry a state from one call to the next (incremental decoding): the state goes in as an optional input and the
updated one comes out as the second output. float16/bfloat16 compute in float32 and round once at the end.
"""
import numpy as np

from native.plugins import Plugin, register_plugin


def _work(dtype):
    return np.float32 if dtype == np.float16 or dtype.name == "bfloat16" else dtype.type


@register_plugin
class CausalConvWithStatePlugin(Plugin):
    """Depthwise causal 1-D convolution: input (B, C, L), weight (C, 1, k), optional bias (C,) and past_state
    (B, C, k-1; zeros when absent). The past state is prepended to the input, each channel is correlated with its
    own kernel, and present_state is the last k-1 positions of that concatenation; `activation` silu/swish applies
    x * sigmoid(x) to the output."""

    name = "CausalConvWithState"

    def enqueue(self, inputs, fields):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        past = inputs[3] if len(inputs) > 3 else None
        act = str(fields.get("activation", "none") or "none").lower()
        if act not in ("none", "silu", "swish"):
            raise ValueError(f"CausalConvWithState activation must be silu, swish or none, got {act!r}")
        b, c, length = x.shape
        k = w.shape[-1]
        if w.shape[0] != c or w.size != c * k:
            raise ValueError(f"CausalConvWithState weight must be ({c}, 1, k), got {tuple(w.shape)}")
        work = _work(x.dtype)
        if past is None:
            past = np.zeros((b, c, k - 1), work)
        full = np.concatenate([past.astype(work), x.astype(work)], axis=2)    # (B, C, k-1+L)
        wk = w.reshape(c, k).astype(work)
        y = np.zeros((b, c, length), work)
        for j in range(k):          # y[t] = sum_j w[j] * full[t + j]
            y += wk[None, :, j, None] * full[:, :, j:j + length]
        if bias is not None:
            y += bias.astype(work)[None, :, None]
        if act != "none":
            y = y / (1 + np.exp(-y))
        present = full[:, :, full.shape[2] - (k - 1):] if k > 1 else np.zeros((b, c, 0), work)
        return [y.astype(x.dtype), present.astype(x.dtype)]


@register_plugin
class LinearAttentionPlugin(Plugin):
    """Linear attention as its recurrence, token by token: state S (B, H_kv, d_k, d_v), zeros when no past_state.

    linear:      S = S + k v^T
    gated:       S = exp(g) S + k v^T
    delta:       S = S + beta k (v - S^T k)^T
    gated_delta: S = exp(g) S + beta k (v - exp(g) S^T k)^T      (the decayed state in both places)
    then o = scale * S^T q, with query head h reading KV head h // (H_q / H_kv). The decay g is per key dimension
    (B, T, H_kv*d_k) or per head (B, T, H_kv); beta is per head (B, T, H_kv) or shared (B, T, 1); scale 0 means
    1/sqrt(d_k). chunk_size is a hint for chunked kernels and does not change the result."""

    name = "LinearAttention"
    RULES = ("linear", "gated", "delta", "gated_delta")

    def enqueue(self, inputs, fields):
        q, k, v = inputs[:3]
        past, decay, beta = (list(inputs[3:]) + [None] * 3)[:3]
        rule = str(fields.get("update_rule", "gated_delta"))
        if rule not in self.RULES:
            raise ValueError(f"LinearAttention update_rule must be one of {', '.join(self.RULES)}, got {rule!r}")
        hq, hkv = int(fields["q_num_heads"]), int(fields["kv_num_heads"])
        if hq <= 0 or hkv <= 0 or hq % hkv:
            raise ValueError(f"LinearAttention q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
        if rule in ("gated", "gated_delta") and decay is None:
            raise ValueError(f"LinearAttention update_rule {rule!r} needs the decay input")
        if rule in ("delta", "gated_delta") and beta is None:
            raise ValueError(f"LinearAttention update_rule {rule!r} needs the beta input")
        b, t, _ = q.shape
        dk, dv = q.shape[2] // hq, v.shape[2] // hkv
        work = _work(q.dtype)
        qh = q.astype(work).reshape(b, t, hq, dk)
        kh = k.astype(work).reshape(b, t, hkv, dk)
        vh = v.astype(work).reshape(b, t, hkv, dv)
        scale = float(fields.get("scale", 0.0) or 0.0) or 1.0 / np.sqrt(dk)
        state = np.zeros((b, hkv, dk, dv), work) if past is None else past.astype(work).copy()
        if decay is not None:   # -> (B, T, H_kv, d_k or 1): multiplies the rows (key dims) of S
            decay = decay.astype(work).reshape(b, t, hkv, -1)
        if beta is not None:    # -> (B, T, H_kv or 1)
            beta = beta.astype(work).reshape(b, t, -1)
        group = hq // hkv
        out = np.empty((b, t, hq, dv), work)
        for i in range(t):
            if decay is not None and rule in ("gated", "gated_delta"):
                state = np.exp(decay[:, i])[..., None] * state
            ki, vi = kh[:, i], vh[:, i]                          # (B, H_kv, d_k), (B, H_kv, d_v)
            if rule in ("delta", "gated_delta"):
                pred = np.einsum("bhkv,bhk->bhv", state, ki)     # S^T k
                vi = beta[:, i][..., None] * (vi - pred)
            state = state + ki[..., :, None] * vi[..., None, :]
            s_q = np.repeat(state, group, axis=1) if group > 1 else state
            out[:, i] = scale * np.einsum("bhkv,bhk->bhv", s_q, qh[:, i])
        return [out.reshape(b, t, hq * dv).astype(q.dtype), state.astype(past.dtype if past is not None else q.dtype)]
