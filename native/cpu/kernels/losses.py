"""Built-in plugins for the ONNX loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Why plugins and not a composition of Softmax(log) + Gather ELEMENT + ElementWise + Reduce layers: the masked,
weighted mean (`sum(w * loss) / sum(w)` over the samples whose target is not `ignore_index`, where an ignored
target may be any value, negative or out of range) needs a Where, two Gathers, two Reduces and a Div; one
vectorised kernel states that rule once, keeps the whole reduction in float64 and leaves nothing for the
builder to fuse. TensorRT also has no loss layer, so a plugin is the honest mapping.

Shapes: input (N, C, d1..dk) and target (N, d1..dk) with k >= 0; optional weight (C,). Fields: `reduction`
(none | sum | mean), `ignore_index` (int or None).
"""
import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def log_softmax(x, axis=1):
    """Numerically stable log(softmax(x)) along `axis`, in x's dtype."""
    x64 = np.asarray(x, np.float64)
    shifted = x64 - np.max(x64, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(np.asarray(x).dtype)


def nll_loss(log_prob, target, weight=None, reduction="mean", ignore_index=None):
    """Negative log likelihood of `target` classes under `log_prob` (class axis 1), weighted, masked, reduced."""
    log_prob = np.asarray(log_prob)
    target = np.asarray(target).astype(np.int64)
    if log_prob.ndim < 2 or target.shape != log_prob.shape[:1] + log_prob.shape[2:]:
        raise ExecutionError(f"loss: input shape {log_prob.shape} and target shape {target.shape} do not match "
                             f"(expected input (N, C, d1..dk) and target (N, d1..dk))")
    keep = np.ones(target.shape, bool) if ignore_index is None else target != int(ignore_index)
    safe = np.where(keep, target, 0)
    num_classes = log_prob.shape[1]
    if safe.size and (safe.min() < 0 or safe.max() >= num_classes):
        raise ExecutionError(f"loss: target values must lie in [0, {num_classes}) or equal ignore_index "
                             f"({ignore_index}); got range [{safe.min()}, {safe.max()}]")
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0].astype(np.float64)
    w = keep.astype(np.float64)
    if weight is not None:
        w = w * np.asarray(weight, np.float64)[safe]
    loss = -picked * w
    dtype = log_prob.dtype
    if reduction == "none":
        return loss.astype(dtype)
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(loss.sum() / w.sum(), dtype)
    raise ExecutionError(f"loss: unknown reduction '{reduction}' (expected none, sum or mean)")


def _weight(inputs):
    return inputs[2] if len(inputs) > 2 and inputs[2] is not None else None


@register_plugin
class NegativeLogLikelihoodLossPlugin(Plugin):
    """loss = -input[n, target[n, ...], ...] * weight[target], reduced; inputs (input, target[, weight])."""

    name = "NegativeLogLikelihoodLoss"

    def enqueue(self, inputs, fields):
        return [nll_loss(inputs[0], inputs[1], _weight(inputs), fields.get("reduction", "mean"),
                         fields.get("ignore_index"))]


@register_plugin
class SoftmaxCrossEntropyLossPlugin(Plugin):
    """NLL of log_softmax(scores, axis=1); outputs (loss[, log_prob]) — `with_log_prob` says whether the second
    output is wanted."""

    name = "SoftmaxCrossEntropyLoss"

    def enqueue(self, inputs, fields):
        log_prob = log_softmax(inputs[0], axis=1)
        loss = nll_loss(log_prob, inputs[1], _weight(inputs), fields.get("reduction", "mean"),
                        fields.get("ignore_index"))
        return [loss, log_prob] if fields.get("with_log_prob") else [loss]
