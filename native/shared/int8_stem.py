"""The INT8 stem: a stride-2 convolution over a few input channels (ResNet's 7x7/2 over RGB) as a stride-1
convolution over a packed int8 tensor, so that it runs on the INT8 tensor-core kernels (which take channel counts
in multiples of 16 and gain nothing from 3 of them).

Space-to-depth by 2 folds each 2x2 block of pixels into 4C channels; the kernel's horizontal taps are folded into
channels too, so the packed convolution is kh2 x 1, stride 1, no padding:

    packed[n, r, X, ((b * 2 + dy) * 2 + dx) * C + c] = q(x[n, 2 (r + a_min) + dy, 2 (X + b + b_min) + dx, c])

for r < HP = OH + kh2 - 1 packed rows, X < OW, b < kw2, zero outside the input (the convolution's padding) and in
the channels from kw2 * 4C up to the padded count `cp`. The packed kernel holds the original weights at
ky = 2 (t + a_min) + dy + pt, kx = 2 (b + b_min) + dx + pl (zero where that is outside the kernel). Every product
of the original convolution appears once, so the int32 accumulators are the same numbers: the per-channel weight
scales (the max over each output channel's weights) are unchanged by the zeros. ResNet-50 at batch 128 on an H200:
the packed 4 x 1 convolution over 64 channels at 112 x 112 takes 0.175 ms; in FP16 the 7x7/2 one 0.289 ms.
"""
from __future__ import annotations

import numpy as np

MAX_CHANNELS = 64     # packed channels at most: kw2 * 4C of them, padded to a multiple of 16


def packable(kernel_spatial, strides, pre, dilations, groups, c_in) -> bool:
    """Whether a convolution of these params packs (at any input size large enough for one output)."""
    kh, kw = (int(k) for k in kernel_spatial)
    return plan(kernel_spatial, strides, pre, [0, 0], dilations, groups, c_in, kh + 2, kw + 2) is not None


def plan(kernel_spatial, strides, pre, post, dilations, groups, c_in, h, w) -> dict | None:
    """The packing of a convolution ({"k2": [kh2, kw2], "lo": [a_min, b_min], "c": C, "cp": padded channels,
    "rows": HP, "ow": OW, "oh": OH}), or None where it does not apply: stride 2 both ways, no dilation, no groups,
    C not a multiple of 16, and the packed channels within MAX_CHANNELS."""
    kh, kw = (int(k) for k in kernel_spatial)
    if list(strides or [1, 1]) != [2, 2] or list(dilations or [1, 1]) != [1, 1] or (groups or 1) != 1 \
            or c_in % 16 == 0:
        return None
    pt, pl = (int(p) for p in (pre or [0, 0]))
    pb, pr = (int(p) for p in (post or [0, 0]))
    oh = (h + pt + pb - kh) // 2 + 1
    ow = (w + pl + pr - kw) // 2 + 1
    if oh <= 0 or ow <= 0:
        return None
    a_min, a_max = -((pt + 1) // 2), (kh - 1 - pt) // 2
    b_min, b_max = -((pl + 1) // 2), (kw - 1 - pl) // 2
    kh2, kw2 = a_max - a_min + 1, b_max - b_min + 1
    used = kw2 * 4 * c_in
    cp = -(-used // 16) * 16
    if cp > MAX_CHANNELS:
        return None
    if cp > 32:           # the TMA kernels' 64-byte rows: 48 channels ran 1.8x slower than 64 (H200)
        cp = MAX_CHANNELS
    return {"k2": [kh2, kw2], "lo": [a_min, b_min], "c": int(c_in), "cp": int(cp), "rows": oh + kh2 - 1,
            "ow": ow, "oh": oh}


def packed_shape(pack, n) -> tuple:
    """The packed int8 tensor's shape [N, HP, OW, cp]."""
    return (int(n), pack["rows"], pack["ow"], pack["cp"])


def packed_conv_params(params, pack) -> dict:
    """The convolution's params once it reads the packed tensor: kh2 x 1, stride 1, no padding."""
    k = [pack["k2"][0], 1]
    return dict(params, kernel_spatial=k, kernel_shape=k, strides=[1, 1], pre_padding=[0, 0], post_padding=[0, 0],
                dilations=[1, 1])


def packed_kernel(kernel_hwio, kernel_spatial, pre, pack) -> np.ndarray:
    """The packed convolution's [kh2 * cp, M] kernel from the original's [kh * kw * C, M] (rows in (ky, kx, c)
    order)."""
    kh, kw = (int(k) for k in kernel_spatial)
    c, cp = pack["c"], pack["cp"]
    (kh2, kw2), (a_min, b_min) = pack["k2"], pack["lo"]
    pt, pl = (int(p) for p in (pre or [0, 0]))
    k = np.asarray(kernel_hwio).reshape(kh, kw, c, -1)
    out = np.zeros((kh2, cp, k.shape[-1]), k.dtype)
    for t in range(kh2):
        for b in range(kw2):
            for dy in range(2):
                ky = 2 * (t + a_min) + dy + pt
                if not 0 <= ky < kh:
                    continue
                for dx in range(2):
                    kx = 2 * (b + b_min) + dx + pl
                    if 0 <= kx < kw:
                        j = ((b * 2 + dy) * 2 + dx) * c
                        out[t, j:j + c] = k[ky, kx]
    return out.reshape(kh2 * cp, -1)


def pack_values(x_nhwc, pack) -> np.ndarray:
    """The packed tensor of x [N, H, W, C] in x's dtype (packing only moves values and puts zeros, so quantizing
    before or after it gives the same int8 tensor): the reference the devices' pack kernels equal."""
    x = np.asarray(x_nhwc)
    n, h, w, c = x.shape
    kw2, (a_min, b_min) = pack["k2"][1], pack["lo"]
    out = np.zeros((n, pack["rows"], pack["ow"], pack["cp"]), x.dtype)
    rows, cols = np.arange(pack["rows"]), np.arange(pack["ow"])
    for b in range(kw2):
        for dy in range(2):
            iy = 2 * (rows + a_min) + dy
            vy = (iy >= 0) & (iy < h)
            for dx in range(2):
                ix = 2 * (cols + b + b_min) + dx
                vx = (ix >= 0) & (ix < w)
                j = ((b * 2 + dy) * 2 + dx) * c
                out[:, rows[vy][:, None], cols[vx][None, :], j:j + c] = x[:, iy[vy][:, None], ix[vx][None, :], :]
    return out
