"""INT8 parameters both devices compute the same way."""
from __future__ import annotations


def leading_biases(op):
    """The post-ops that are per-column biases ahead of everything else (folded into the int32 accumulator)."""
    post = list(op.params.get("post_ops") or ())
    n = 0
    while n < len(post) and post[n]["op"] == "bias" and post[n].get("axis", -1) in (-1,):
        n += 1
    return post[:n], post[n:]
