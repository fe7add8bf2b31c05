"""Born there, or carried in? Split the error of the first diverging tensor into the part its own node made and the
part its inputs brought.

With y_src the compared runner's value of tensor T, y_ref the reference's, and f the ONNX node(s) that make T
(its fused region), re-run f in the reference's precision (onnx's reference evaluator) twice:
- from the compared runner's own input values: y_rep = f(x_src). y_src - y_rep is the error T's node introduced
  itself (local: what running this node in full precision would remove); y_rep - y_ref is the error its inputs
  carried in, passed through f (carried).
- from the reference's input values: f(x_ref) must reproduce y_ref, or the replay says nothing about this pair
  (another model's golden file, an operator the evaluator computes differently) and the split is not used.
Both parts are measured as multiples of T's tolerance (OutputResult.level), so they are comparable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ErrorSplit:
    local: float        # error T's own node made, x tolerance
    carried: float      # error carried in by its inputs, x tolerance
    replay_error: float  # how far f(x_ref) is from y_ref, x tolerance (<= 1: the replay reproduces the reference)

    @property
    def valid(self) -> bool:
        return self.replay_error <= 1.0


def split_error(model, tensor, nodes, boundary, src_values: dict, ref_values: dict, compare) -> ErrorSplit | None:
    """`src_values`/`ref_values`: {name: array} holding `tensor` and the non-constant `boundary` tensors of each
    side; compare(name, actual, expected) -> OutputResult with T's tolerance. None when the replay cannot run."""
    from debugkit.compare import replay
    if tensor not in src_values or tensor not in ref_values or not nodes:
        return None
    consts = replay.constants(model, boundary)
    const_nodes = [n for n in model.graph.node if n.op_type == "Constant" and any(o in boundary for o in n.output)]
    if const_nodes:
        consts = replay.evaluate(model, const_nodes, consts) or consts
    outs = []
    for values in (src_values, ref_values):
        env = dict(consts)
        for t in boundary:
            if t in env:
                continue
            if t not in values:
                return None
            v = np.asarray(values[t])
            ref = ref_values.get(t)
            if v.dtype.kind == "f" and ref is not None and np.asarray(ref).dtype != v.dtype:
                v = v.astype(np.asarray(ref).dtype)      # replay in the reference's precision
            env[t] = v
        try:
            env = replay.evaluate(model, nodes, env)
        except Exception:   # an operator the reference evaluator cannot run: no split, the caller falls back
            return None
        if env is None or tensor not in env:
            return None
        outs.append(np.asarray(env[tensor]))
    rep_src, rep_ref = outs
    y_src, y_ref = np.asarray(src_values[tensor]), np.asarray(ref_values[tensor])
    if rep_src.shape != y_ref.shape or rep_ref.shape != y_ref.shape:
        return None
    level = lambda a, e: _level(compare(tensor, a, e))  # noqa: E731
    return ErrorSplit(local=level(y_src, rep_src), carried=level(rep_src, y_ref), replay_error=level(rep_ref, y_ref))


def _level(r) -> float:
    lv = r.metrics.get("level")
    if lv is None:
        return 0.0 if r.passed else float("inf")
    return float(lv)
