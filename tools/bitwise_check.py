"""FP32 outputs bit for bit, before and after a change, wherever the tactic did not change.

    python tools/bitwise_check.py record DIR [--models a,b] [--tree OLD_CHECKOUT]   (before: the old code)
    python tools/bitwise_check.py check DIR [--models a,b]                           (after: this code)

`record` builds every available corpus model (tests/corpus/models.json; exported ones from DEBUGKIT_CORPUS, shipped
ones from the model cache) in FP32 at its corpus feeds, records the tactic of every layer (a tactic replay file),
runs it once and saves the feeds and every engine tensor (outputs and each layer's outputs, as `--mark-all` taps
them). `--tree` imports the engine from another checkout (e.g. `git worktree add OLD_DIR main~5`), so the old
code records and this tool compares.

`check` rebuilds each model with the recorded tactics (a non-strict replay: a layer whose tactic is gone, renamed or
re-fused is left to timing and counted as changed), runs the recorded feeds and compares every tensor present in
both runs as bytes. A layer is *comparable* when its tactic was replayed and every input it reads was identical;
a comparable layer whose output differs is a violation. Per model it prints identical/differs counts and the first
differing layer with the reason (its tactic changed, an input differed, or VIOLATION).
A model whose graph changed so much that fewer than half of the recorded layers remain (a restructuring pass: an
If inlined, plugins turned into reshapes) cannot be replayed; it is rebuilt with timed tactics and only its outputs
are compared, reported as "restructured" (bit-identical or the largest difference), never as a violation.

Exit status: 0 no violation, 1 at least one violation (or nothing compared), 2 bad usage / no record.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_paths(tree):
    for p in (REPO, tree):   # the tree's packages win; the corpus helpers come from it too when it has them
        if p and p not in sys.path:
            sys.path.insert(0, p)
    import backends  # noqa: F401  (bound now: later imports of their modules come from the same tree)
    import native  # noqa: F401
    import tests.corpus.corpus  # noqa: F401


def _build(path, feeds, selector):
    from backends.engine import BuilderConfig, Runtime, parse_onnx
    from backends.engine.build import profile_from_shapes
    from backends.engine.builder import Builder
    from backends.engine.plan import serialize_plan
    net, _ = parse_onnx(path)
    cfg = BuilderConfig()
    cfg.algorithm_selector = selector
    profile = profile_from_shapes(net, {k: v.shape for k, v in feeds.items()})
    if profile is not None:
        cfg.add_optimization_profile(profile)
    graph = Builder().build_graph(net, cfg, timing_feeds=feeds)
    engine = Runtime().deserialize_engine(serialize_plan(graph, cfg))
    return engine


def _run_all(engine, feeds) -> dict:
    """Every engine tensor (inputs excluded) of one execute, as numpy arrays."""
    ctx = engine.create_execution_context()
    names = [n for n in engine.tensor_names() if n not in set(engine.graph.input_names)]
    out = ctx.execute(dict(feeds), taps=names)
    return {k: np.asarray(v) for k, v in out.items() if isinstance(v, np.ndarray) or np.isscalar(v)}


def _restructured(name, path, feeds, old, n_old):
    """A model whose graph changed too much for its replay file (fewer than half of the recorded layers remain):
    built with timed tactics, only its outputs are compared, and nothing counts as a violation (no layer kept
    its tactic and its inputs)."""
    engine = _build(path, feeds, None)
    ctx = engine.create_execution_context()
    out = ctx.execute(dict(feeds))
    same = [k for k, v in out.items() if k in old and np.asarray(v).tobytes() == old[k].tobytes()
            and np.shape(v) == old[k].shape]
    diff = max((float(np.max(np.abs(np.asarray(v, np.float64) - old[k]))) for k, v in out.items()
                if k in old and k not in same and np.shape(v) == old[k].shape), default=0.0)
    print(f"| {name} | {len(engine.graph.nodes)} (was {n_old}): restructured, tactics timed, outputs only: "
          f"{len(same)} of {len(out)} bit-identical{f', max |diff| {diff:.3g}' if len(same) < len(out) else ''} "
          f"| | | | | 0 |")
    return len(out)


def _layers(engine) -> list:
    return [{"name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs), "tactic": n.tactic_name,
             **({"body_tactics": _body_tactics(n)} if n.subgraphs else {})}
            for n in engine.graph.nodes]


def _body_tactics(node) -> list:
    """'body/layer: tactic' for every layer inside an If / Loop / Scan layer's bodies (nested ones too): the replay
    file pins top-level layers only, so a body whose layers run other tactics counts as a changed tactic."""
    out = []
    for key, sub in sorted(node.subgraphs.items()):
        for n in sub.nodes:
            out.append(f"{key}/{n.name}: {n.tactic_name}")
            out += [f"{key}/{n.name}/{t}" for t in _body_tactics(n)] if n.subgraphs else []
    return out


def _models(only):
    from tests.corpus.corpus import CorpusUnavailable, find_path, manifest
    entries = manifest()
    names = [m["name"] for m in entries]
    unknown = [m for m in only if m not in names]
    if unknown:
        raise SystemExit(f"bitwise_check: unknown --models {unknown}; choose from {names}")
    for e in entries:
        if only and e["name"] not in only:
            continue
        try:
            yield e, find_path(e), None
        except CorpusUnavailable as why:
            yield e, None, str(why)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


def record(directory, only):
    from backends.engine.builder.tactic_replay import TacticRecorder, save_replay
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from benchmark import make_feeds
    os.makedirs(directory, exist_ok=True)
    done = 0
    for e, path, why in _models(only):
        if path is None:
            print(f"{e['name']}: skipped ({why[:100]})")
            continue
        feeds = make_feeds(e["feeds"])
        rec = TacticRecorder()
        try:
            engine = _build(path, feeds, rec)
            values = _run_all(engine, feeds)
        except Exception as ex:   # one model this tree cannot build or run should not hide the others
            print(f"{e['name']}: not recorded ({type(ex).__name__}: {str(ex)[:160]})")
            continue
        base = os.path.join(directory, e["name"])
        save_replay(rec.document, base + ".replay.json")
        np.savez(base + ".npz", **{f"feed:{k}": v for k, v in feeds.items()},
                 **{f"t:{k}": v for k, v in values.items()})
        with open(base + ".layers.json", "w") as f:
            json.dump(_layers(engine), f, indent=1)
        print(f"{e['name']}: recorded {len(engine.graph.nodes)} layers, {len(values)} tensors")
        done += 1
    return 0 if done else 1


def compare_layers(layers, old: dict, new: dict, replayed: set) -> dict:
    """Walk the layers in execution order: per layer 'identical', 'tactic changed', 'input differed' or
    'VIOLATION' (tactic replayed, inputs identical, output differs). Tensors absent from either run are skipped."""
    equal = {}
    for name in set(old) & set(new):
        equal[name] = _same(old[name], new[name])
    rows = []
    for lay in layers:
        outs = [o for o in lay["outputs"] if o in equal]
        if not outs:
            continue
        if all(equal[o] for o in outs):
            rows.append((lay["name"], "identical"))
        elif lay["name"] not in replayed:
            rows.append((lay["name"], "tactic changed"))
        elif not all(equal.get(i, True) for i in lay["inputs"] if i):
            rows.append((lay["name"], "input differed"))
        else:
            rows.append((lay["name"], "VIOLATION"))
    return {"rows": rows, "tensors": len(equal), "identical_tensors": sum(equal.values())}


def _load_layers(base) -> list:
    try:
        with open(base + ".layers.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def check(directory, only):
    from backends.engine.builder.tactic_replay import TacticReplayer, load_replay
    if not os.path.isdir(directory):
        print(f"bitwise_check: {directory} is not a directory recorded with `record`", file=sys.stderr)
        return 2
    violations = compared = 0
    print("| model | layers | replayed | identical | tactic changed | input differed | violations |")
    print("|---|---|---|---|---|---|---|")
    firsts = []
    for e, path, why in _models(only):
        base = os.path.join(directory, e["name"])
        if path is None or not os.path.exists(base + ".npz"):
            continue
        data = np.load(base + ".npz")
        feeds = {k[5:]: data[k] for k in data.files if k.startswith("feed:")}
        old = {k[2:]: data[k] for k in data.files if k.startswith("t:")}
        rep = TacticReplayer(load_replay(base + ".replay.json"), strict=False, source=base + ".replay.json")
        try:
            try:
                engine = _build(path, feeds, rep)
            except Exception as ex:   # the graph was restructured (most layers renamed or folded away)
                if "recorded for another model" not in str(ex):
                    raise
                compared += _restructured(e["name"], path, feeds, old, len(_load_layers(base)))
                continue
            new = _run_all(engine, feeds)
        except Exception as ex:   # a model that no longer builds or runs is a failure, named, not a crash
            print(f"| {e['name']} | failed: {type(ex).__name__}: {str(ex)[:120]} | | | | | |")
            violations += 1
            continue
        layers = _layers(engine)
        recorded = {lay["name"]: lay.get("body_tactics") for lay in _load_layers(base)}
        replayed = {lay["name"] for lay in layers if lay["name"] in rep.seen and lay["name"] not in rep.stale
                    and (lay.get("body_tactics") is None or recorded.get(lay["name"]) is None
                         or lay["body_tactics"] == recorded[lay["name"]])}
        res = compare_layers(layers, old, new, replayed)
        counts = {k: sum(1 for _, s in res["rows"] if s == k)
                  for k in ("identical", "tactic changed", "input differed", "VIOLATION")}
        violations += counts["VIOLATION"]
        compared += len(res["rows"])
        print(f"| {e['name']} | {len(layers)} | {len(replayed)} | {counts['identical']} | {counts['tactic changed']} "
              f"| {counts['input differed']} | {counts['VIOLATION']} |")
        first = next(((n, s) for n, s in res["rows"] if s != "identical"), None)
        if first is not None:
            firsts.append(f"{e['name']}: first differing layer '{first[0]}' ({first[1]}"
                          + (f"; tactic {rep.stale.get(first[0])}" if first[0] in rep.stale else "") + ")")
    for line in firsts:
        print(line)
    if not compared:
        print("bitwise_check: nothing compared (record first, with the same --models)")
        return 1
    print(f"{violations} violation(s): "
          + ("FP32 outputs are bit-identical wherever the tactic and the inputs were the same" if not violations
             else "a layer with its recorded tactic and identical inputs gave different bits"))
    return 1 if violations else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("directory")
    ap.add_argument("--models", default="", help="only these corpus models (comma-separated)")
    ap.add_argument("--tree", default=None, help="import the engine from this checkout (record with old code)")
    a = ap.parse_args(argv)
    _import_paths(a.tree)
    from native import config
    config.cli_defaults()   # as the CLI and the benchmark tools run engines
    only = [m for m in a.models.split(",") if m]
    return record(a.directory, only) if a.mode == "record" else check(a.directory, only)


if __name__ == "__main__":
    sys.exit(main())
