"""The inputs of the builder's runs of the graph (the timing run, the probes that choose layout and precision by
timing, the DLA pass's shape run): at the profile's opt shapes, seeded random values, the user's feeds where given.
A leaf module: the passes that run the graph import it without importing the builder or the pipeline."""
from __future__ import annotations

import numpy as np

from native.errors import BuildError


def opt_feeds(graph, profile, seed=0, feeds=None) -> dict:
    """Inputs at the profile's opt shapes for the timing run (user feeds win where given)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in graph.inputs:
        if feeds and t.name in feeds:
            out[t.name] = feeds[t.name]
            continue
        shape = None
        if profile is not None and profile.get_shape(t.name) is not None:
            shape = profile.get_shape(t.name)[1]
        elif t.shape is not None and all(d >= 0 for d in t.shape):
            shape = tuple(t.shape)
        if shape is None or t.kind != "tensor":
            raise BuildError(f"input '{t.name}' has dynamic shape {t.shape} but no optimization profile gives its "
                             f"shapes; add one with profile.set_shape('{t.name}', min, opt, max)")
        dtype = np.dtype(t.dtype or "float32") if t.dtype != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
        if dtype.kind == "f":
            out[t.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype.kind == "b":
            out[t.name] = np.ones(shape, dtype=bool)
        elif dtype.kind in "OUS":
            out[t.name] = np.full(shape, "", dtype=object)
        else:
            out[t.name] = np.zeros(shape, dtype=dtype)
    return out




def timing_feeds(graph, ctx) -> dict:
    """opt_feeds for a pass: the first profile of the pass context's config and its timing feeds."""
    profile = ctx.config.profiles[0] if ctx.config.profiles else None
    return opt_feeds(graph, profile, feeds=ctx.timing_feeds)
