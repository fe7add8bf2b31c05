"""`inspect tactics F` (a replay file's layers and tactics) and `inspect diff-tactics --good DIR --bad DIR`
(which layers' tactic choices separate good builds from bad ones)."""
from __future__ import annotations

import glob
import os

from native.errors import InputFileError


def register(subs):
    from debugkit.cli import _args
    t = subs.add_parser("tactics", help="the layers and tactics of a tactic replay file (--save-tactics)")
    t.add_argument("path", help="replay file")
    _args.add_common_args(t)
    t.set_defaults(func=run_tactics)
    d = subs.add_parser("diff-tactics", help="which layers' tactics separate good builds from bad ones")
    d.add_argument("--good", required=True, metavar="DIR|FILE", help="replay files of passing builds")
    d.add_argument("--bad", required=True, metavar="DIR|FILE", help="replay files of failing builds")
    _args.add_common_args(d)
    d.set_defaults(func=run_diff)


def run_tactics(args) -> int:
    from backends.engine.builder.tactic_replay import load_replay
    from debugkit.cli import _args
    _args.apply_common_args(args)
    doc = load_replay(args.path)
    layers = doc["layers"]
    print(f"==== Tactic replay {args.path} (version {doc['version']}, device {doc.get('device')}, model "
          f"fingerprint {doc.get('model', {}).get('fingerprint')}) ====")
    print(f"---- {len(layers)} Layer(s) ----")
    for name, e in layers.items():
        t = f" | {e['timing_ms']:.3f} ms" if e.get("timing_ms") is not None else ""
        print(f"  {name} [{e.get('kind')}] tactic={e['tactic']} (id {e['tactic_id']}){t}")
    return 0


def _replays(where) -> list:
    from backends.engine.builder.tactic_replay import load_replay
    if os.path.isdir(where):
        paths = sorted(glob.glob(os.path.join(where, "*.json")))
    elif os.path.exists(where):
        paths = [where]
    else:
        raise InputFileError(f"no such replay file or directory: {where}")
    if not paths:
        raise InputFileError(f"{where} holds no replay files (*.json)")
    return [load_replay(p) for p in paths]


def diff_tactics(good: list, bad: list) -> dict:
    """{layer: {"bad_only": [tactics], "good": [tactics]}} for layers where some failing build used a tactic no
    passing build used (Polygraphy's rule: those tactics are the suspects)."""
    out = {}
    names = dict.fromkeys(n for d in good + bad for n in d["layers"])
    for name in names:
        g = {d["layers"][name]["tactic"] for d in good if name in d["layers"]}
        b = {d["layers"][name]["tactic"] for d in bad if name in d["layers"]}
        suspects = sorted(b - g)
        if suspects:
            hits = sum(d["layers"].get(name, {}).get("tactic") in suspects for d in bad)
            out[name] = {"bad_only": suspects, "good": sorted(g), "bad_builds": hits,
                         "onnx_nodes": next(d["layers"][name].get("onnx_nodes") for d in bad if name in d["layers"])}
    # strongest suspects first: a bad-only tactic present in every bad build explains all of them
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bad_builds"]))


def run_diff(args) -> int:
    from debugkit.cli import _args
    _args.apply_common_args(args)
    good, bad = _replays(args.good), _replays(args.bad)
    diff = diff_tactics(good, bad)
    print(f"{len(good)} good and {len(bad)} bad build(s) compared")
    if not diff:
        print("no layer used a tactic in a bad build that no good build used: the failure is not explained by "
              "tactic choice alone")
        return 0
    every = [n for n, d in diff.items() if d["bad_builds"] == len(bad)]
    print(f"---- {len(diff)} layer(s) with tactics seen only in bad builds; {len(every)} of them in every bad "
          f"build (listed first: the likely culprits) ----")
    for name, d in diff.items():
        print(f"  {name}\n      bad-only tactics: {', '.join(d['bad_only'])} (in {d['bad_builds']}/{len(bad)} bad "
              f"builds) | good builds used: {', '.join(d['good']) or '-'}\n"
              f"      ONNX nodes: {', '.join(d['onnx_nodes'] or [])}")
    return 0
