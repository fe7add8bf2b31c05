"""Convolution and pooling geometry, the same on every device: ONNX auto_pad resolved to begin/end pads, the
output sizes of a convolution or a window, and a transposed convolution's pads and output sizes."""
from __future__ import annotations


def resolve_pads(auto_pad, in_sizes, kernel, strides, dilations, pre, post):
    """Begin/end pads per spatial dim, resolving ONNX auto_pad (SAME_UPPER/SAME_LOWER/VALID) from the input size."""
    nd = len(in_sizes)
    auto_pad = auto_pad or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pre, post = [], []
        for i in range(nd):
            out = -(-in_sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
            small = total // 2
            pre.append(small if auto_pad == "SAME_UPPER" else total - small)
            post.append(total - pre[-1])
        return pre, post
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    return list(pre or [0] * nd), list(post or [0] * nd)


def geometry(params, x_shape, kernel):
    """(strides, dilations, pads_begin, pads_end, output sizes) for a convolution over x_shape's spatial dims."""
    spatial = list(x_shape[2:])
    nd = len(spatial)
    strides = list(params.get("strides") or [1] * nd)
    dil = list(params.get("dilations") or [1] * nd)
    pre, post = resolve_pads(params.get("auto_pad"), spatial, kernel, strides, dil,
                             params.get("pre_padding"), params.get("post_padding"))
    out = [(spatial[i] + pre[i] + post[i] - (kernel[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    return strides, dil, pre, post, out


def deconv_geometry(params, in_sizes, kernel):
    nd = len(in_sizes)
    strides = list(params.get("strides") or [1] * nd)
    dil = list(params.get("dilations") or [1] * nd)
    opad = list(params.get("output_padding") or [0] * nd)
    full = [strides[i] * (in_sizes[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nd)]
    out_shape = params.get("output_shape")
    auto_pad = params.get("auto_pad") or "NOTSET"
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [in_sizes[i] * strides[i] for i in range(nd)]
    if out_shape is not None:
        out_shape = list(out_shape)[-nd:]
        pre = []
        for i in range(nd):
            total = full[i] - out_shape[i]
            pre.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return strides, dil, pre, out_shape
    pre = list(params.get("pre_padding") or [0] * nd)
    post = list(params.get("post_padding") or [0] * nd)
    return strides, dil, pre, [full[i] - pre[i] - post[i] for i in range(nd)]
