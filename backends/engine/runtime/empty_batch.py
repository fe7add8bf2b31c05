"""A batch of 0 through layers whose kernels assume at least one sample.

ONNX allows a batch dimension of 0 (ONNX Runtime runs Conv on a (0, C, H, W) input and returns (0, M, H', W')).
Convolution tactics compute tile counts, thread splits and GEMM shapes from the batch and divide by it, so each
would need its own empty-input branch. Instead, the call of every tactic of these kinds is wrapped once, when the
executor binds it: an input whose leading dim is 0 runs the tactic on one sample of zeros to learn the output's
shape and dtype, and the layer returns an empty array of that shape with a leading 0. Samples are independent in
these kinds, so the output of a batch of 0 is exactly that. Other layer kinds handle empty tensors in their kernels.
"""
from __future__ import annotations

import numpy as np

KINDS = frozenset({"Convolution", "Deconvolution"})


def guard(kind: str, call):
    """`call` = (fn, full) from Device.bind, wrapped for an empty batch when `kind` needs it."""
    if kind not in KINDS:
        return call
    fn, full = call

    def run(op, args, outputs=None, workspace=None, stream=None):
        x = args[0] if args else None
        if getattr(x, "ndim", 0) >= 1 and x.shape[0] == 0:
            return _one_sample(fn, full, op, args, workspace, stream)
        return fn(op, args, outputs, workspace, stream) if full else fn(op, args)
    run._guarded = (fn, full)   # what it guards: a compiled plan tests the batch inline and calls it (compiled.py)
    return run, True


def _one_sample(fn, full, op, args, workspace, stream):
    x = args[0]
    ones = [np.zeros((1,) + tuple(a.shape[1:]), a.dtype)
            if isinstance(a, np.ndarray) and a.ndim == x.ndim and a.shape[0] == 0 else a for a in args]
    outs = fn(op, ones, None, workspace, stream) if full else fn(op, ones)
    return [np.empty((0,) + tuple(np.shape(o)[1:]), getattr(o, "dtype", np.float32)) for o in outs]
