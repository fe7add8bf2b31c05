"""Built-in plugins for detection and spatial ops: NonMaxSuppression, RoiAlign, AffineGrid."""
import numpy as np

from native.plugins import Plugin, register_plugin


def _scalar(x, default):
    return default if x is None or np.size(x) == 0 else np.asarray(x).reshape(-1)[0].item()


@register_plugin
class NonMaxSuppressionPlugin(Plugin):
    """Greedy per-(batch, class) NMS; outputs int64 [n, 3] rows (batch, class, box), best score first."""

    name = "NonMaxSuppression"

    def enqueue(self, inputs, fields):
        boxes, scores = inputs[0].astype(np.float64), inputs[1]
        rest = list(inputs[2:]) + [None] * 3
        max_out = int(_scalar(rest[0], 0))
        iou_thr = float(_scalar(rest[1], 0.0))
        score_thr = _scalar(rest[2], None)
        if int(fields.get("center_point_box", 0)):
            c, half = boxes[..., :2], boxes[..., 2:] / 2
            lo, hi = c - half, c + half  # (x, y) order; IoU does not care which axis is which
        else:
            lo = np.minimum(boxes[..., :2], boxes[..., 2:])
            hi = np.maximum(boxes[..., :2], boxes[..., 2:])
        area = (hi[..., 0] - lo[..., 0]) * (hi[..., 1] - lo[..., 1])
        selected = []
        if max_out > 0:
            for b in range(scores.shape[0]):
                for c in range(scores.shape[1]):
                    s = scores[b, c]
                    order = np.argsort(-s, kind="stable")
                    if score_thr is not None:
                        order = order[s[order] > score_thr]
                    keep = _greedy(order, lo[b], hi[b], area[b], iou_thr, max_out)
                    selected += [(b, c, i) for i in keep]
        return [np.array(selected, np.int64).reshape(-1, 3)]


def _iou(a, b, lo, hi, area):
    """IoU matrix [len(a), len(b)] of boxes indexed by a and b."""
    wh = np.clip(np.minimum(hi[a][:, None], hi[b][None]) - np.maximum(lo[a][:, None], lo[b][None]), 0, None)
    inter = wh[..., 0] * wh[..., 1]
    union = area[a][:, None] + area[b][None] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _greedy_block(order, lo, hi, area, iou_thr, max_out, block=256):
    """Exact greedy suppression in score order, blocked: each block of candidates is first checked against every
    box already kept (one matrix), then resolved in order within the block. Returns positions into `order`."""
    keep = np.empty(0, np.int64)
    for start in range(0, len(order), block):
        pos = np.arange(start, min(start + block, len(order)))
        if keep.size:
            pos = pos[~(_iou(order[keep], order[pos], lo, hi, area) > iou_thr).any(axis=0)]
        if not pos.size:
            continue
        suppress = _iou(order[pos], order[pos], lo, hi, area) > iou_thr
        alive = np.ones(len(pos), bool)
        local = []
        for j in range(len(pos)):
            if alive[j]:
                local.append(j)
                alive[j + 1:] &= ~suppress[j, j + 1:]
        keep = np.concatenate([keep, pos[local]])
        if keep.size >= max_out:
            break
    return keep[:max_out]


def _greedy(order, lo, hi, area, iou_thr, max_out):
    """Greedy NMS over candidates in score order. Boxes whose x-extents do not overlap cannot suppress each other,
    so candidates are split into x-overlap clusters (e.g. torchvision's per-class coordinate offsets make one cluster
    per class) and each is resolved alone; kept boxes are then merged back in score order. Same result as one
    global greedy pass, at a fraction of the pairwise work."""
    if not len(order):
        return []
    x_lo, x_hi = lo[order, 0], hi[order, 0]
    by_x = np.argsort(x_lo, kind="stable")
    reach = np.maximum.accumulate(x_hi[by_x])
    starts = np.empty(len(order), bool)
    starts[0] = True
    starts[1:] = x_lo[by_x][1:] >= reach[:-1]
    cluster = np.empty(len(order), np.int64)
    cluster[by_x] = np.cumsum(starts) - 1
    grouped = np.argsort(cluster, kind="stable")  # positions, grouped by cluster, score order kept inside
    bounds = np.flatnonzero(np.diff(cluster[grouped])) + 1
    kept = []
    for positions in np.split(grouped, bounds):
        sub = order[positions]
        kept.append(positions[_greedy_block(sub, lo, hi, area, iou_thr, max_out)])
    kept = np.sort(np.concatenate(kept))[:max_out]
    return [int(i) for i in order[kept]]


def _bilinear_weights(coord, size):
    """Sample positions -> (low index, high index, low weight, high weight, valid) along one axis."""
    valid = (coord >= -1.0) & (coord <= size)
    c = np.maximum(coord, 0.0)
    low = np.floor(c).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    c = np.where(at_edge, low, c)
    frac = c - low
    return low, high, 1.0 - frac, frac, valid


@register_plugin
class RoiAlignPlugin(Plugin):
    """RoiAlign over NCHW features; avg or max of bilinear samples on a regular grid in each output bin."""

    name = "RoiAlign"

    def enqueue(self, inputs, fields):
        x, rois, batch_idx = inputs[:3]
        ph, pw = int(fields.get("output_height", 1)), int(fields.get("output_width", 1))
        ratio = int(fields.get("sampling_ratio", 0))
        scale = float(fields.get("spatial_scale", 1.0))
        half_pixel = fields.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
        use_max = fields.get("mode", "avg") == "max"
        n_rois, channels, height, width = rois.shape[0], x.shape[1], x.shape[2], x.shape[3]
        out = np.zeros((n_rois, channels, ph, pw), x.dtype)
        offset = 0.5 if half_pixel else 0.0
        for r in range(n_rois):
            x1, y1, x2, y2 = (rois[r].astype(np.float64) * scale - offset).tolist()
            rw, rh = x2 - x1, y2 - y1
            if not half_pixel:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / ph, rw / pw
            gh = ratio if ratio > 0 else int(np.ceil(rh / ph))
            gw = ratio if ratio > 0 else int(np.ceil(rw / pw))
            gh, gw = max(gh, 1), max(gw, 1)
            ys = y1 + (np.arange(ph)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh)  # (ph, gh)
            xs = x1 + (np.arange(pw)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw)  # (pw, gw)
            yl, yh, wyl, wyh, vy = _bilinear_weights(ys, height)
            xl, xh, wxl, wxh, vx = _bilinear_weights(xs, width)
            img = x[int(batch_idx[r])].astype(np.float64)  # (C, H, W)

            def corner(yi, xi, wy, wx):
                vals = img[:, yi[:, :, None, None], xi[None, None, :, :]]  # (C, ph, gh, pw, gw)
                w = (wy * vy)[:, :, None, None] * (wx * vx)[None, None, :, :]
                return vals * w

            parts = [corner(yl, xl, wyl, wxl), corner(yl, xh, wyl, wxh), corner(yh, xl, wyh, wxl),
                     corner(yh, xh, wyh, wxh)]
            if use_max:  # the ONNX definition takes the largest weighted corner of each sample
                out[r] = np.max(np.maximum.reduce(parts), axis=(2, 4))
            else:
                out[r] = np.sum(sum(parts), axis=(2, 4)) / (gh * gw)
        return [out]


@register_plugin
class AffineGridPlugin(Plugin):
    """Sampling grid for N 2-D (N,2,3) or 3-D (N,3,4) affine matrices over normalised [-1, 1] coordinates."""

    name = "AffineGrid"

    def enqueue(self, inputs, fields):
        theta, size = inputs[0], [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        align = int(fields.get("align_corners", 0))

        def axis(n):
            if align:
                return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
            return (2.0 * np.arange(n) + 1.0) / n - 1.0

        spatial = size[2:]
        coords = np.meshgrid(*[axis(n) for n in spatial], indexing="ij")  # D,H,W order
        base = np.stack(list(coords[::-1]) + [np.ones_like(coords[0])], axis=-1)  # (..., x, y[, z], 1)
        flat = base.reshape(-1, base.shape[-1]).astype(theta.dtype)
        grid = np.einsum("pk,nik->npi", flat, theta)
        return [grid.reshape([size[0]] + spatial + [len(spatial)]).astype(theta.dtype)]
