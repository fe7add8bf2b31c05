"""Built-in plugins for random generators: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial.

With a `seed` field every run draws the same numbers (a fresh generator seeded per call, so a plan replays
exactly); without one, numbers differ per run. `dtype` is a numpy name filled in by the importer.
"""
import numpy as np

from native.plugins import Plugin, register_plugin


def _rng(fields):
    seed = fields.get("seed")
    return np.random.default_rng(None if seed is None else int(np.float32(seed).view(np.uint32)))


def _dtype(fields, like=None):
    return np.dtype(fields.get("dtype") or (like.dtype if like is not None else "float32"))


@register_plugin
class RandomUniformPlugin(Plugin):
    name = "RandomUniform"

    def enqueue(self, inputs, fields):
        shape = [int(s) for s in fields.get("shape", [])]
        return [_uniform(fields, shape, _dtype(fields))]


@register_plugin
class RandomUniformLikePlugin(Plugin):
    name = "RandomUniformLike"

    def enqueue(self, inputs, fields):
        return [_uniform(fields, inputs[0].shape, _dtype(fields, inputs[0]))]


def _uniform(fields, shape, dtype):
    lo, hi = float(fields.get("low", 0.0)), float(fields.get("high", 1.0))
    return _rng(fields).uniform(lo, hi, size=shape).astype(dtype)


@register_plugin
class RandomNormalPlugin(Plugin):
    name = "RandomNormal"

    def enqueue(self, inputs, fields):
        shape = [int(s) for s in fields.get("shape", [])]
        return [_normal(fields, shape, _dtype(fields))]


@register_plugin
class RandomNormalLikePlugin(Plugin):
    name = "RandomNormalLike"

    def enqueue(self, inputs, fields):
        return [_normal(fields, inputs[0].shape, _dtype(fields, inputs[0]))]


def _normal(fields, shape, dtype):
    mean, scale = float(fields.get("mean", 0.0)), float(fields.get("scale", 1.0))
    return _rng(fields).normal(mean, scale, size=shape).astype(dtype)


@register_plugin
class BernoulliPlugin(Plugin):
    """1 with probability p (the input), else 0, in `dtype` (default: the input's)."""

    name = "Bernoulli"

    def enqueue(self, inputs, fields):
        p = inputs[0]
        return [(_rng(fields).random(p.shape) < p).astype(_dtype(fields, p))]


@register_plugin
class MultinomialPlugin(Plugin):
    """`sample_size` class indices per batch row, drawn from softmax of the row's unnormalised log-probs."""

    name = "Multinomial"

    def enqueue(self, inputs, fields):
        logits = inputs[0].astype(np.float64)
        n = int(fields.get("sample_size", 1))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)  # (B, C)
        u = _rng(fields).random((logits.shape[0], n))
        idx = np.sum(u[:, :, None] >= cdf[:, None, :-1], axis=-1)  # count of classes whose cdf is passed
        return [idx.astype(fields.get("dtype") or "int32")]
