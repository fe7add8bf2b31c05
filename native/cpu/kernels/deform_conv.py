"""Built-in plugin DeformConv: deformable convolution (v1 without mask, v2 with mask), N-D.

Each kernel tap samples the input at its regular grid position plus a learned, per-output-position offset, with
multilinear interpolation (bilinear in 2-D) and zeros outside the input; the optional mask scales each sample.
The samples are gathered into im2col columns (N, C, taps, positions) — one vectorised gather per tap and
interpolation corner — and a grouped matmul with W finishes the convolution.

A plugin, not a Convolution tactic: the Convolution layer has no offset/mask inputs, and TensorRT serves this op
with a plugin too. The ONNX node imports through the generic plugin fallback (attributes become fields).

Inputs: X (N, C, *S), W (oC, C/group, *K), offset (N, offset_group*prod(K)*n, *O), B (oC,) optional,
mask (N, offset_group*prod(K), *O) optional. Fields: kernel_shape, strides, pads, dilations, group, offset_group.
"""
import itertools

import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def _sample(xg, pos, spatial):
    """xg (N, G, Cg, prod(S)); pos list of n arrays (N, G, P) of fractional coordinates -> (N, G, Cg, P)."""
    strides = np.cumprod((list(spatial[1:]) + [1])[::-1])[::-1]
    floors = [np.floor(p) for p in pos]
    out = 0.0
    for corner in itertools.product((0, 1), repeat=len(spatial)):
        weight = 1.0
        flat = 0
        valid = True
        for i, c in enumerate(corner):
            idx = floors[i] + c
            frac = pos[i] - floors[i]
            weight = weight * (frac if c else 1.0 - frac)
            valid = valid & (idx >= 0) & (idx < spatial[i])
            flat = flat + np.clip(idx, 0, spatial[i] - 1).astype(np.int64) * int(strides[i])
        vals = np.take_along_axis(xg, np.broadcast_to(flat[:, :, None, :], xg.shape[:3] + flat.shape[-1:]), axis=3)
        out = out + vals * (weight * valid)[:, :, None, :]
    return out


def deform_conv(x, w, offset, bias=None, mask=None, strides=None, pads=None, dilations=None, group=1,
                offset_group=1):
    x, w, offset = np.asarray(x), np.asarray(w), np.asarray(offset)
    n_batch, channels, spatial = x.shape[0], x.shape[1], x.shape[2:]
    nd = len(spatial)
    out_ch, kernel = w.shape[0], w.shape[2:]
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    pads = list(pads or [0] * (2 * nd))
    out_sp = [(spatial[i] + pads[i] + pads[i + nd] - (dilations[i] * (kernel[i] - 1) + 1)) // strides[i] + 1
              for i in range(nd)]
    taps = int(np.prod(kernel))
    npos = int(np.prod(out_sp))
    if channels % offset_group or channels % group or out_ch % group or w.shape[1] * group != channels:
        raise ExecutionError(f"DeformConv: channels {channels}, weight {w.shape}, group {group} and offset_group "
                             f"{offset_group} do not fit together")
    if tuple(offset.shape) != (n_batch, offset_group * taps * nd, *out_sp):
        raise ExecutionError(f"DeformConv: offset shape {offset.shape} != expected "
                             f"{(n_batch, offset_group * taps * nd, *out_sp)}")
    off = offset.reshape(n_batch, offset_group, taps, nd, npos)
    msk = None if mask is None else np.asarray(mask).reshape(n_batch, offset_group, taps, npos)
    xg = x.reshape(n_batch, offset_group, channels // offset_group, -1)
    grid = np.meshgrid(*[np.arange(o) * strides[i] - pads[i] for i, o in enumerate(out_sp)], indexing="ij")
    grid = [g.reshape(-1) for g in grid]
    cols = np.empty((n_batch, offset_group, channels // offset_group, taps, npos), x.dtype)
    for t, k in enumerate(itertools.product(*[range(s) for s in kernel])):
        pos = [grid[i] + k[i] * dilations[i] + off[:, :, t, i, :] for i in range(nd)]
        sampled = _sample(xg, pos, spatial)
        if msk is not None:
            sampled = sampled * msk[:, :, t, None, :]
        cols[:, :, :, t, :] = sampled
    cols = cols.reshape(n_batch, group, (channels // group) * taps, npos)
    wg = w.reshape(group, out_ch // group, (channels // group) * taps)
    y = np.matmul(wg[None], cols).reshape(n_batch, out_ch, *out_sp)
    if bias is not None:
        y = y + np.asarray(bias).reshape((1, out_ch) + (1,) * nd)
    return y.astype(x.dtype)


@register_plugin
class DeformConvPlugin(Plugin):
    name = "DeformConv"

    def enqueue(self, inputs, fields):
        get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None else None  # noqa: E731
        return [deform_conv(inputs[0], inputs[1], inputs[2], get(3), get(4), fields.get("strides"),
                            fields.get("pads"), fields.get("dilations"), int(fields.get("group", 1)),
                            int(fields.get("offset_group", 1)))]
