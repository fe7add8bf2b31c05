"""Per-layer tactic selection: time every supporting candidate on real inputs at the profile's opt shapes,
consult the timing cache, let the algorithm selector restrict or replay, and record the winner's id."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from backends.engine.builder.algorithm_selector import (algorithm, algorithm_context,
    checked_selection)
from backends.engine.builder.config import BuilderFlag, MemoryPoolType, TimingCache
from backends.engine.builder.tactic_sources import allowed, normalise
from backends.engine.runtime.executor import node_op
from native.device import get_device
from native.errors import BuildError, UsageError
from native.logger import G_LOGGER
from native.tactics import (LayerContext, TacticRefusal, accepting, all_tactic_names, precisions_for,
    tactics_for)


def _key(node, inputs, device):
    def desc(a):
        return [list(np.shape(a)) if hasattr(a, "shape") else None, str(getattr(a, "dtype", type(a).__name__))]
    wdesc = {k: desc(v) for k, v in node.weights.items()}
    math = (node.meta or {}).get("math")     # TF32 GEMMs time differently from FP32 ones (absent: keys as before)
    raw = json.dumps([str(device), node.kind, node.params, wdesc, [desc(a) for a in inputs], node.precision]
                     + ([math] if math else []), sort_keys=True, default=str)
    return hashlib.sha1(raw.encode()).hexdigest()


def in_share(key: str, share) -> bool:
    """Whether a timing key (sha1 hex) is this process's to time when one build's timing is spread over n workers
    (`TimingCache.share` = (i, n)); every key falls in exactly one share."""
    return share is None or int(key[:8], 16) % int(share[1]) == int(share[0])


def time_candidates(node, candidates, inputs, iterations, device=None, prep=None) -> dict:
    """{tactic id: best ms} for the candidates that run. Each candidate is warmed up first (pool threads, caches),
    then timed in rounds (timing_plan): each round runs every candidate in turn, in a block of `block` runs back to
    back, so a burst of load on a shared machine slows every candidate alike instead of disqualifying whichever
    was being timed. With blocks (the device's `timing_block` > 1, the CPU) a block's first run is not scored: it
    pays for what the candidates before it left behind (a pool worker gone back to sleep, their weights in the
    caches), which in the engine, where a layer runs right after the layers before it, its own runs do not; a
    score is the fastest of the later runs. The CPU's timed runs wait out its pool's back-off (`_rounds`), and on a
    host-memory device the near-ties then run off (`runoff`). The device runs and times them (a clock on the CPU,
    events on a GPU)."""
    dev = get_device(device or "cpu")
    if not dev.host_memory:   # time device tactics on device-resident inputs (uploaded once, not per run)
        inputs = [dev.copy_to_device(x) if isinstance(x, np.ndarray) else x for x in inputs]
    live = []
    for t in candidates:
        try:
            prepared = node_op(node)
            # weights in the layer's precision, then packed (kept in `prep`, the winner's is not redone)
            prepared.weights = prep.prepare(dev, t, prepared, final=False) if prep is not None else \
                dev.prepare(t, prepared)
            ws = _workspace(dev, t, prepared, inputs)
            dev.run(t, prepared, inputs, None, ws)  # warm up
            live.append((t, prepared, ws))
        except TacticRefusal as e:     # the build decides: a refusal only drops the candidate
            G_LOGGER.verbose(f"tactic {t.name} refused layer '{node.name}' at these inputs ({e}); not a candidate")
        except Exception as e:   # a failure, not a refusal: said apart in the verbose log
            G_LOGGER.verbose(f"tactic {t.name} failed on layer '{node.name}' while timed "
                             f"({type(e).__name__}: {str(e)[:300]}); not a candidate")
    rounds, block = timing_plan(iterations, dev.timing_block, len(live))
    best = {t.id: float("inf") for t, _, _ in live}
    _rounds(dev, live, inputs, best, range(rounds), block, rotate=False)
    finalists = runoff(live, best) if dev.host_memory else []   # (a GPU's events do not share the host's CPUs)
    if finalists:
        _rounds(dev, finalists, inputs, best, range(RUNOFF_ROUNDS * rounds), block, rotate=True)
    return best


# The runoff: after the first rounds, the candidates within RUNOFF_MARGIN of the fastest are timed RUNOFF_ROUNDS times
# as many rounds again among themselves, each scored on the fastest of all its runs. On a shared (or merely busy)
# machine a candidate's few first blocks can all land while its pool worker waits for a CPU: yolov8n's near-tie
# layers read 0.09-0.16 ms for the same tactic from build to build (h84), so the pick among tactics a few percent
# apart was a draw, and two builds of the same code differed by +-10%. The far slower ones are not timed again.
RUNOFF_MARGIN = 0.25
RUNOFF_ROUNDS = 3


def runoff(live, best) -> list:
    """The entries of `live` ((tactic, prepared, workspace)) to time again: those within RUNOFF_MARGIN of the
    fastest, when there are two or more (a clear winner needs no more runs)."""
    ran = [x for x in live if best[x[0].id] < float("inf")]
    if len(ran) < 2 or RUNOFF_ROUNDS <= 0:
        return []
    fastest_ms = min(best[x[0].id] for x in ran)
    near = [x for x in ran if best[x[0].id] <= fastest_ms * (1 + RUNOFF_MARGIN)]
    return near if len(near) > 1 else []


def _rounds(dev, live, inputs, best, rounds, block, rotate):
    """Time `live` in rounds (each candidate a block of `block` runs, the first not scored when block > 1), keeping
    each one's fastest run in `best`; `rotate`: each round starts one candidate later, so none always runs right
    after the same other one. Where the device has it (the CPU), `before_timed_run` lets the pool's back-off pass
    first: a tactic that splits over the pool is timed split, as the engine runs it on a quiet machine."""
    before = getattr(dev, "before_timed_run", None)
    n = len(live)
    for r in rounds:
        order = live[r % n:] + live[:r % n] if rotate else live
        for t, prepared, ws in order:
            for i in range(block):
                if before is not None and before():
                    dev.run(t, prepared, inputs, None, ws)    # it waited: this run wakes the pool, unscored
                ms = dev.time(lambda: dev.run(t, prepared, inputs, None, ws))
                if i or block == 1:
                    best[t.id] = min(best[t.id], ms)


def timing_plan(iterations, block, candidates):
    """(rounds, runs per block) that score each candidate on about `iterations` runs: blocks of `block` runs (the
    first of each not scored) where there is more than one candidate to alternate with, else one run a round, the
    candidates taking turns (A B C A B C ...)."""
    iterations = max(1, int(iterations))
    if block <= 1 or candidates < 2:
        return iterations, 1
    return -(-iterations // (block - 1)), block


def _recorded_context(graph, node):
    """The LayerContext the graph's tensor info gives a layer that the timing run did not reach (a subgraph body, a
    failed run): the shapes recorded on the node, else none (an empty context: shape checks see nothing), and each
    input's type as the model declares it, so a float-only kernel is not handed integers."""
    shapes = node.meta.get("input_shapes")
    info = graph.tensor_info
    dtypes = [info[i].dtype if i in info else None for i in node.inputs]
    if shapes is None and not any(dtypes):
        return None
    return LayerContext(shapes or [], dtypes)


def _workspace(dev, tactic, op, inputs):
    size = getattr(tactic, "workspace_size", None)    # (a bare object in the timing tests has none)
    need = int(size(op, _shapes(inputs)) or 0) if size is not None else 0
    return dev.allocate(need) if need > 0 else None


def _shapes(inputs):
    return [list(np.shape(a)) if hasattr(a, "shape") else None for a in inputs]


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


def _named(node, config, device, log, said):
    """The tactics of this node's kind that `config.tactic_sources` leaves (builder/tactic_sources.py)."""
    kept, note = allowed(node.kind, tactics_for(node.kind, device), config.tactic_sources)
    if note and node.kind not in said:
        said.add(node.kind)
        log.verbose(note)
    return kept


def check_tactic_sources(config, device):
    """A tactic_sources name that matches no tactic of any layer kind is a typo, not a preference."""
    if config.tactic_sources is None:
        return
    normalise(config.tactic_sources, all_tactic_names(device), what=f"tactic_sources on device '{device}'")


@dataclass
class Candidates:
    """What enumeration found for a layer: the tactics that run it as it stands, each refused one's reason, and
    `fp32_only` when none computes in the layer's precision but some would in float32."""
    ok: list
    reasons: dict
    fp32_only: bool = False


def enumerate_candidates(node, ctx, config, device, log=G_LOGGER, said=None) -> Candidates:
    """The tactics that can run `node` as it stands (precision, format, fused params, the LayerContext `ctx`:
    shapes and storage types, workspace), after tactic_sources. Pure: reads the node, changes nothing (the
    precision and layout passes time variants through it)."""
    limit = config.get_memory_pool_limit(MemoryPoolType.WORKSPACE)
    pool = _named(node, config, device, log, said if said is not None else set())
    refused = node.meta.get("refused_at_build") or {}   # candidates that refused the build's runs (executor.py)
    ok, ran, reasons = accepting(pool, node_op(node), ctx, workspace_limit=limit, refused=refused)
    found = Candidates(ok, reasons, fp32_only=ran.precision != node.precision)
    return found


def candidates(node, shapes, config, device, log=G_LOGGER, said=None):
    """The tactics tactic selection chooses among (enumerate_candidates). A precision no tactic computes in is a
    warning naming the layer (an error under OBEY_PRECISION_CONSTRAINTS) and the layer falls back to FP32, so
    what the engine reports is what runs."""
    found = enumerate_candidates(node, shapes, config, device, log, said)
    ok, reasons = found.ok, found.reasons
    if found.fp32_only:
        wanted = node.precision
        asked = node.meta.get("precision_constraint") == wanted
        msg = (f"layer '{node.name}' ({node.kind}) asks for {wanted}, but no {node.kind} tactic on device "
               f"'{device}' computes in it (they offer {sorted(precisions_for(node.kind, device))})")
        if asked and config.get_flag(BuilderFlag.OBEY_PRECISION_CONSTRAINTS):
            raise BuildError(msg + "; OBEY_PRECISION_CONSTRAINTS forbids running it in another precision: "
                                   "drop the constraint or the flag")
        (log.warning if asked else log.verbose)(msg + "; it runs in float32")
        node.precision = "float32"
        node.meta["precision_fallback"] = wanted
    pinned = node.meta.get("tactics_allowed")   # a pass restricted this layer (it says why in the verbose log)
    if pinned and any(t.name in pinned for t in ok):
        ok = [t for t in ok if t.name in pinned]
    if not ok:
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items()) or "no tactics registered for this kind"
        hint = ""
        if node.precision == "float32" and not config.get_flag(BuilderFlag.FP16) and \
                precisions_for(node.kind, device) and "float32" not in precisions_for(node.kind, device):
            hint = (f"; device '{device}' computes {node.kind} in {'/'.join(sorted(precisions_for(node.kind, device)))}"
                    f" only: enable --fp16 (BuilderFlag.FP16) so the layers INT8 does not cover run in float16")
        raise BuildError(f"could not find any implementation for layer '{node.name}' (kind {node.kind}, ONNX "
                         f"nodes {node.source_nodes}) on device '{device}' ({why}){hint}")
    return ok


class _Said(set):
    """Per-build state shared with subgraph recursion: kinds already logged about, the timing cache."""
    cache = None


def measure(node, cands, inputs, config, device, cache, prep=None) -> dict:
    """{tactic id: ms} of `cands` running `node` on `inputs`: what `cache` holds (keyed by device, kind, params,
    weight and input shapes/dtypes and precision), and the rest timed on the device and stored. The device's
    preferred tactics are timed first; the others (host layers on a GPU) only when none of those runs. Only what
    the cache lacks is timed, so a rebuild with the cache times nothing and a new candidate (a user tactic) is
    timed alone. Tactic selection and the choices made by timing (precision, layout: builder/timed_choice.py)
    share it, so a layer variant timed for one is not timed again for the other."""
    use_cache = not config.get_flag("disable_timing_cache")
    key = _key(node, inputs, device)
    cached = (cache.get(key) if use_cache else None) or {}
    timings = {t.id: cached[str(t.id)] for t in cands if cached.get(str(t.id), -1.0) >= 0}
    first = get_device(device).preferred(cands) or cands
    tried = {}
    share = getattr(cache, "share", None) if use_cache else None
    for group in (first, [t for t in cands if t not in first]):
        if group is not first and any(t.id in timings for t in first):
            break     # a preferred tactic runs: the rest are not timed
        todo = [t for t in group if str(t.id) not in cached]
        if todo and not in_share(key, share):
            break     # another worker times this variant; this build goes on with what is known (or cands[0])
        if todo:
            got = time_candidates(node, todo, inputs, config.avg_timing_iterations, device, prep)
            timings.update(got)
            tried.update({str(t.id): got.get(t.id, -1.0) for t in todo})   # a failure is remembered as -1
    if use_cache and tried:
        cache.put(key, {**cached, **tried})
    return timings


def still_offered(node, cands, shapes, config, device, said=None):
    """`cands` less those the device stopped offering while they were timed, so the build chooses among what a
    rebuild with its timing cache will offer: a cuDNN compile class whose compiles turn out slow in the middle of
    a build withholds the plans it built (cudnn_conv.slow_compiles), also the one timed fastest a moment before
    (a rebuild then chose im2col where the cold build had chosen cuDNN plan 0). All of `cands` when none is left."""
    ok = {t.id for t in enumerate_candidates(node, shapes, config, device, said=said).ok}
    return [t for t in cands if t.id in ok] or cands


def fastest(cands, timings, device):
    """The tactic selection picks of `cands` given their timings (None when none ran)."""
    ranked = [t for t in cands if t.id in timings]
    return pick_fastest(get_device(device).preferred(ranked) or ranked, timings)


def select_tactics(graph, env, config, device="cpu", _said=None, cache=None, body_envs=None):
    """Choose a tactic for every node, recursing into If / Loop / Scan bodies. `env` holds each tensor's value
    from the timing run (None when that run failed); `body_envs` {id(body graph): its tensors from that run}
    (GraphExecutor.body_envs), so body layers are timed too (a body that did not run takes default choices);
    returns per-node timing records. The
    cache is `config.timing_cache` when the caller gave one (it is filled in), else `cache` (the build's private
    one, shared with the passes that chose by timing), else a new private one."""
    said = _Said() if _said is None else _said
    if said.cache is None:
        said.cache = config.timing_cache if config.timing_cache is not None else \
            cache if cache is not None else TimingCache()
    if _said is None:
        check_tactic_sources(config, device)
    # the caller's cache is filled in; without one a private cache (identical layers, such as repeated blocks,
    # are timed once) leaves the config untouched
    cache = said.cache
    use_cache = not config.get_flag("disable_timing_cache")
    # tactic preparations are kept with a timing cache the caller gave (reused by the next build that gets it)
    prep = None
    if use_cache and config.timing_cache is not None:
        from backends.engine.builder.prep_cache import PrepCache
        if getattr(cache, "prepared", None) is None:
            cache.prepared = PrepCache()
        prep = cache.prepared
        if _said is None:
            prep.start_build()
    selector = config.algorithm_selector
    # the layers an earlier build of this timing cache selected for, unchanged, are copied (selection_memo.py)
    # (host memory only: a GPU tactic's prepared weights are device buffers an engine may own and free; not for
    # INT8 and DLA builds, whose choices also read tensor scales and placement the key does not hold)
    memo, build_key = None, None
    if prep is not None and _said is None and get_device(device).host_memory and \
            not config.get_flag(BuilderFlag.INT8) and not config.uses_dla() and config.reuse_selections:
        from backends.engine.builder.selection_memo import SelectionMemo
        build_key = SelectionMemo.build_key(config, device, selector)
        if build_key is not None:
            if getattr(cache, "selections", None) is None:
                cache.selections = SelectionMemo()
            memo = cache.selections
    reports = []
    from native.progress import progress  # a bar on a terminal while layers are timed; silent otherwise
    for node in (progress(graph.nodes, desc="timing tactics", unit="layer") if _said is None else graph.nodes):
        have_inputs = env is not None and all(i is None or i in env for i in node.inputs)
        key = memo.key(build_key, node, env, have_inputs) if memo is not None else None
        hit = memo.get(key) if key is not None else None
        if hit is not None:
            reports.append(memo.apply(hit, node))
            if hit["prep_key"]:
                prep.used.add(hit["prep_key"])
            continue
        inputs = [env.get(i) if (env is not None and i is not None) else None for i in node.inputs]
        # what the runtime will hand the tactic: shapes and storage types (from the timing run, else the graph's
        # recorded tensor info), so a tactic that cannot take them is no candidate (build decides, runtime obeys)
        shapes = LayerContext.of(inputs) if have_inputs else _recorded_context(graph, node)
        cands = candidates(node, shapes, config, device, said=said)
        context = algorithm_context(node, inputs)
        if selector is not None:
            op = node_op(node)
            choices = [algorithm(t, op, context) for t in cands]
            picked = checked_selection(selector.select_algorithms(context, choices), choices, context,
                                       config.get_flag("reject_empty_algorithms"))
            if picked:
                cands = [cands[i] for i in picked]
        timings = {}
        if len(cands) > 1 and have_inputs and not config.get_flag("enable_tactic_heuristic"):
            timings = measure(node, cands, inputs, config, device, cache, prep)
            chosen = fastest(still_offered(node, cands, shapes, config, device, said), timings, device) or cands[0]
        else:
            chosen = cands[0]
        node.tactic_id, node.tactic_name = chosen.id, chosen.name
        node.meta.pop("refused_at_build", None)   # build-time evidence only: not part of the plan
        inside = chosen.config(node_op(node), shapes) if have_inputs else ""
        if inside:      # what the tactic timed inside (a cuDNN engine config): the loaded engine runs that one
            node.meta["tactic_config"] = inside
        else:
            node.meta.pop("tactic_config", None)
        ws = int(chosen.workspace_size(node_op(node), shapes) or 0)
        if ws:
            node.meta["workspace_bytes"] = ws
        if timings:
            node.meta["timings_ms"] = {t.name: round(timings[t.id], 4) for t in cands if t.id in timings}
            G_LOGGER.verbose(f"layer '{node.name}': tactic {chosen.name} from "
                             + ", ".join(f"{k}={v:.3f}ms" for k, v in node.meta["timings_ms"].items()))
        node.weights = prep.prepare(get_device(device), chosen, node_op(node)) if prep is not None else \
            get_device(device).prepare(chosen, node_op(node))
        reports.append((context, algorithm(chosen, node_op(node), context, timings.get(chosen.id))))
        if key is not None:
            memo.put(key, node, reports[-1], prep.last_key)
        for sub in node.subgraphs.values():
            reports += select_tactics(sub, (body_envs or {}).get(id(sub)), config, chosen.subgraph_device or device,
                                      said, body_envs=body_envs)
    if selector is not None and _said is None:
        selector.report_algorithms([r[0] for r in reports], [r[1] for r in reports])
    return reports
