"""NonMaxSuppression: the clustered, blocked greedy pass equals the textbook one-box-at-a-time greedy pass."""
import numpy as np
import pytest

from native.plugins import find_plugin


def textbook_nms(boxes, scores, max_out, iou_thr, score_thr):
    lo = np.minimum(boxes[:, :2], boxes[:, 2:])
    hi = np.maximum(boxes[:, :2], boxes[:, 2:])
    area = np.prod(hi - lo, axis=1)
    order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > score_thr]
    keep = []
    for i in order:
        ok = True
        for j in keep:
            wh = np.clip(np.minimum(hi[i], hi[j]) - np.maximum(lo[i], lo[j]), 0, None)
            inter = wh[0] * wh[1]
            union = area[i] + area[j] - inter
            if union > 0 and inter / union > iou_thr:
                ok = False
                break
        if ok:
            keep.append(i)
        if len(keep) == max_out:
            break
    return keep


@pytest.mark.parametrize("n, offset", [(50, 0.0), (700, 0.0), (900, 1000.0)])
def test_matches_textbook_greedy(n, offset):
    rng = np.random.default_rng(n)
    xy = rng.uniform(0, 100, (n, 2))
    wh = rng.uniform(5, 40, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1)
    # torchvision-style class offsets: shift groups of boxes far apart
    boxes += (np.arange(n) % 3)[:, None] * offset
    scores = rng.uniform(0, 1, n).astype(np.float32)
    got = find_plugin("NonMaxSuppression").enqueue(
        [boxes[None].astype(np.float32), scores[None, None], np.array([400]), np.array([0.5], np.float32),
         np.array([0.05], np.float32)], {})[0]
    want = textbook_nms(boxes.astype(np.float32).astype(np.float64), scores, 400, 0.5, 0.05)
    assert got[:, 2].tolist() == want
    assert (got[:, :2] == 0).all()
