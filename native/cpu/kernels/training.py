"""Built-in plugins for the ai.onnx.preview.training optimiser steps: Momentum, Adagrad, Adam.

Each op updates several tensors at once: inputs are (R, T, X_1..X_k, G_1..G_k, <state>_1..k ...) and outputs
(X_new_1..k, <state>_new_1..k ...); k follows from the input count. R (learning rate) and T (update count) are
scalars. Plugins (not ElementWise chains) because one node fans out to 2-3 results per tensor and the formulas
are short; every step is elementwise numpy. Fields carry the attributes with their defaults filled in.
"""
import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def _split(inputs, groups, op):
    rest = list(inputs[2:])
    if not rest or len(rest) % groups:
        raise ExecutionError(f"{op}: expected R, T and {groups} groups of equally many tensors, got "
                             f"{len(inputs)} inputs")
    k = len(rest) // groups
    r = np.asarray(inputs[0]).reshape(()).astype(np.float64)
    t = np.asarray(inputs[1]).reshape(()).astype(np.int64)
    return r, t, [rest[i * k:(i + 1) * k] for i in range(groups)]


@register_plugin
class MomentumPlugin(Plugin):
    """SGD with standard or Nesterov momentum; beta is replaced by 1 on the first step (T == 0)."""

    name = "Momentum"

    def enqueue(self, inputs, fields):
        r, t, (xs, gs, vs) = _split(inputs, 3, "Momentum")
        alpha, beta, norm = float(fields["alpha"]), float(fields["beta"]), float(fields["norm_coefficient"])
        beta = beta if t > 0 else 1.0
        nesterov = fields.get("mode", "standard") == "nesterov"
        x_new, v_new = [], []
        for x, g, v in zip(xs, gs, vs):
            g_reg = norm * x + g
            v1 = alpha * v + beta * g_reg
            step = g_reg + alpha * v1 if nesterov else v1
            x_new.append((x - r * step).astype(x.dtype))
            v_new.append(v1.astype(v.dtype))
        return x_new + v_new


@register_plugin
class AdagradPlugin(Plugin):
    """Adagrad with learning-rate decay r = R / (1 + T * decay_factor)."""

    name = "Adagrad"

    @np.errstate(invalid="ignore", divide="ignore")
    def enqueue(self, inputs, fields):
        r, t, (xs, gs, hs) = _split(inputs, 3, "Adagrad")
        norm, decay, eps = float(fields["norm_coefficient"]), float(fields["decay_factor"]), float(fields["epsilon"])
        rate = r / (1.0 + t * decay)
        x_new, h_new = [], []
        for x, g, h in zip(xs, gs, hs):
            g_reg = norm * x + g
            h1 = h + g_reg * g_reg
            x_new.append((x - rate * g_reg / (np.sqrt(h1) + eps)).astype(x.dtype))
            h_new.append(h1.astype(h.dtype))
        return x_new + h_new


@register_plugin
class AdamPlugin(Plugin):
    """Adam with bias-corrected learning rate (when T > 0) and optional post-update weight decay."""

    name = "Adam"

    @np.errstate(invalid="ignore", divide="ignore")
    def enqueue(self, inputs, fields):
        r, t, (xs, gs, vs, hs) = _split(inputs, 4, "Adam")
        alpha, beta = float(fields["alpha"]), float(fields["beta"])
        norm, post, eps = float(fields["norm_coefficient"]), float(fields["norm_coefficient_post"]), \
            float(fields["epsilon"])
        rate = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
        x_new, v_new, h_new = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs):
            g_reg = norm * x + g
            v1 = alpha * v + (1 - alpha) * g_reg
            h1 = beta * h + (1 - beta) * g_reg * g_reg
            x1 = x - rate * v1 / (np.sqrt(h1) + eps)
            x_new.append(((1 - post) * x1).astype(x.dtype))
            v_new.append(v1.astype(v.dtype))
            h_new.append(h1.astype(h.dtype))
        return x_new + v_new + h_new
