"""Per-layer tactic selection: time every supporting candidate on real inputs at the profile's opt shapes,
consult the timing cache, let the algorithm selector restrict or replay, and record the winner's id."""
from __future__ import annotations

import hashlib
import json
import time

import numpy as np

from backends.engine.runtime.executor import node_op
from native.errors import BuildError
from native.logger import G_LOGGER
from native.tactics import tactics_for


def _key(node, inputs, device):
    def desc(a):
        return [list(np.shape(a)) if hasattr(a, "shape") else None, str(getattr(a, "dtype", type(a).__name__))]
    wdesc = {k: desc(v) for k, v in node.weights.items()}
    raw = json.dumps([device, node.kind, node.params, wdesc, [desc(a) for a in inputs], node.precision],
                     sort_keys=True, default=str)
    return hashlib.sha1(raw.encode()).hexdigest()


def time_tactic(tactic, op, inputs, iterations) -> float:
    tactic.run(op, inputs)  # warm up
    best = float("inf")
    for _ in range(max(1, iterations)):
        t0 = time.perf_counter()
        tactic.run(op, inputs)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def time_candidates(node, candidates, inputs, iterations) -> dict:
    """{tactic id: best ms} for the candidates that run. Runs are interleaved round-robin (A B C A B C ...) so a
    burst of load on a shared machine slows every candidate alike instead of disqualifying whichever was being
    timed; each candidate is warmed up first (pool threads, caches) and scored by its fastest run."""
    live = []
    for t in candidates:
        try:
            prepared = node_op(node)
            prepared.weights = t.prepare(prepared)
            t.run(prepared, inputs)  # warm up
            live.append((t, prepared))
        except Exception as e:
            G_LOGGER.verbose(f"tactic {t.name} failed on layer '{node.name}': {e}; skipped")
    best = {t.id: float("inf") for t, _ in live}
    for _ in range(max(1, iterations)):
        for t, prepared in live:
            t0 = time.perf_counter()
            t.run(prepared, inputs)
            best[t.id] = min(best[t.id], time.perf_counter() - t0)
    return {k: v * 1e3 for k, v in best.items()}


# candidates timed within this fraction of the fastest count as tied; the earliest registered of them wins
TIE_MARGIN = 0.03


def pick_fastest(ranked, timings):
    """The fastest of `ranked` (in registration order), breaking near-ties by that order: on a shared machine two
    tactics a few percent apart swap places from build to build, and engines that differ only by such a coin
    toss make every A/B comparison (fusion on/off, FP32 vs FP16, before/after a change) noisier."""
    if not ranked:
        return None
    best = min(timings[t.id] for t in ranked)
    return next(t for t in ranked if timings[t.id] <= best * (1 + TIE_MARGIN))


def algorithm_context(node, inputs):
    return {"name": node.name, "kind": node.kind, "source_nodes": list(node.source_nodes),
            "input_shapes": [list(np.shape(a)) if hasattr(a, "shape") else None for a in inputs]}


def select_tactics(graph, env, config, device="cpu"):
    """Choose a tactic for every node (recursing into subgraphs with default choices). `env` holds each
    tensor's value from the timing run (None when that run failed); returns per-node timing records."""
    if device == "cpu":  # time candidates under the runtime's BLAS threading (the pool turns BLAS threads off)
        from native.cpu import threads
        threads.init()
    cache = config.timing_cache
    use_cache = cache is not None and not config.get_flag("disable_timing_cache")
    selector = config.algorithm_selector
    reports = []
    for node in graph.nodes:
        op = node_op(node)
        inputs = [env.get(i) if (env is not None and i is not None) else None for i in node.inputs]
        have_inputs = env is not None and all(i is None or i in env for i in node.inputs)
        shapes = [list(np.shape(a)) if hasattr(a, "shape") else None for a in inputs] if have_inputs else None
        candidates = [t for t in tactics_for(node.kind, device) if t.supports(op, shapes)]
        if config.tactic_sources is not None:
            allowed = [t for t in candidates if t.name in config.tactic_sources]
            candidates = allowed or candidates
        if not candidates:
            raise BuildError(f"could not find any implementation for layer '{node.name}' (kind {node.kind}, ONNX "
                             f"nodes {node.source_nodes}) on device '{device}'")
        if selector is not None:
            choices = [{"tactic_id": t.id, "tactic_name": t.name} for t in candidates]
            picked = list(selector.select_algorithms(algorithm_context(node, inputs), choices))
            if not picked and config.get_flag("reject_empty_algorithms"):
                raise BuildError(f"algorithm selector returned no choice for layer '{node.name}'")
            if picked:
                bad = [i for i in picked if not 0 <= int(i) < len(candidates)]
                if bad:
                    raise BuildError(f"algorithm selector returned invalid indices {bad} for layer '{node.name}' "
                                     f"({len(candidates)} choices)")
                candidates = [candidates[int(i)] for i in picked]
        timings = {}
        if len(candidates) > 1 and have_inputs:
            key = _key(node, inputs, device)
            cached = cache.get(key) if use_cache else None
            if cached:
                timings = {int(k): v for k, v in cached.items()}
            else:
                timings = time_candidates(node, candidates, inputs, config.avg_timing_iterations)
                if use_cache and timings:
                    cache.put(key, {str(k): v for k, v in timings.items()})
            chosen = pick_fastest([t for t in candidates if t.id in timings], timings) or candidates[0]
        else:
            chosen = candidates[0]
        node.tactic_id, node.tactic_name = chosen.id, chosen.name
        if timings:
            node.meta["timings_ms"] = {t.name: round(timings[t.id], 4) for t in candidates if t.id in timings}
            G_LOGGER.verbose(f"layer '{node.name}': tactic {chosen.name} from "
                             + ", ".join(f"{k}={v:.3f}ms" for k, v in node.meta["timings_ms"].items()))
        node.weights = chosen.prepare(node_op(node))
        reports.append(({"name": node.name, "kind": node.kind}, {"tactic_id": chosen.id, "tactic_name": chosen.name}))
        for sub in node.subgraphs.values():
            reports += select_tactics(sub, None, config, device)
    if selector is not None:
        selector.report_algorithms([r[0] for r in reports], [r[1] for r in reports])
    return reports
