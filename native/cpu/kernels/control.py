"""CPU kernels: If, Loop, Scan. `op.subgraphs[name](inputs) -> outputs` runs a body (bound by the executor to
the enclosing scope, so bodies read outer tensors by name)."""
import numpy as np

from native.errors import ExecutionError
from native.shared.loop import run_loop
from native.tactics import simple_tactic


def _scalar_bool(v):
    if type(v) is np.ndarray and v.size == 1:   # (a [1, 1] or 0-d condition: its one element, as below)
        return bool(v.item())
    return bool(np.asarray(v).reshape(-1)[0])


@simple_tactic("If")
def if_(op, inputs):
    return list(op.subgraphs["then" if _scalar_bool(inputs[0]) else "else"]([]))


@simple_tactic("Loop")
def loop(op, inputs):
    """Run the body while (i < max_trip_count) and cond; collect scan outputs per iteration."""
    return run_loop(op, inputs)


def _scan(body, states, xs, p, length=None):
    m = len(xs)
    in_axes = p.get("scan_input_axes") or [0] * m
    in_dirs = p.get("scan_input_directions") or [0] * m
    xs = [np.asarray(x) for x in xs]
    in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, xs)]
    steps = xs[0].shape[in_axes[0]] if length is None else length
    n = len(states)
    scans = None
    for t in range(steps):
        sl = [np.take(x, t if d == 0 else steps - 1 - t, axis=a) for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = body(list(states) + sl)
        states = list(outs[:n])
        if scans is None:
            scans = [[] for _ in outs[n:]]
        for k, v in enumerate(outs[n:]):
            scans[k].append(np.asarray(v))
    scans = scans or []
    k_out = len(scans)
    out_axes = p.get("scan_output_axes") or [0] * k_out
    out_dirs = p.get("scan_output_directions") or [0] * k_out
    result = []
    for s, a, d in zip(scans, out_axes, out_dirs):
        if d:
            s = s[::-1]
        y = np.stack(s)
        a = a + y.ndim if a < 0 else a
        result.append(np.moveaxis(y, 0, a))
    return states, result


@simple_tactic("Scan")
def scan(op, inputs):
    body, p = op.subgraphs["body"], op.params
    m = p["num_scan_inputs"]
    if not p.get("batched"):
        n = len(inputs) - m
        states, ys = _scan(body, inputs[:n], inputs[n:], p)
        return states + ys
    lens, rest = inputs[0], inputs[1:]
    n = len(rest) - m
    batch = np.asarray(rest[0] if rest else inputs[0]).shape[0]
    per = []
    for b in range(batch):
        st = [np.asarray(s)[b] for s in rest[:n]]
        xs = [np.asarray(x)[b] for x in rest[n:]]
        length = None if lens is None else int(np.asarray(lens)[b])
        if length is not None and length != xs[0].shape[0]:
            raise ExecutionError(f"Scan '{op.name}': sequence_lens shorter than the scan axis are not supported")
        per.append(_scan(body, st, xs, p, length))
    states = [np.stack([s[0][k] for s in per]) for k in range(n)]
    ys = [np.stack([s[1][k] for s in per]) for k in range(len(per[0][1]))] if per else []
    return states + ys
