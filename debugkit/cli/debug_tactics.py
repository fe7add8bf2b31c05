"""Find the layers whose tactic makes the engine fail, and write a replay file that avoids them.

Starts from a failing tactic assignment (--bad-tactics, or the default build) and a passing one (--good-tactics,
or a build restricted to the reference tactics), then searches the layers whose tactics differ: each probe is an
engine assembled from the two builds and checked against ONNX Runtime in process. Exit 0 when culprits were found.
"""
from __future__ import annotations

import os

from debugkit.cli import _debug_common as common


def register(subparsers):
    p = subparsers.add_parser("tactics", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="ONNX model")
    p.add_argument("--bad-tactics", metavar="B.json", help="replay file of a failing build (default: build one)")
    p.add_argument("--good-tactics", metavar="G.json",
                   help="replay file of a passing build (default: build with the reference tactics)")
    from debugkit import options
    options.add_outputs(p, "output", "json", output={
        "metavar": "F.json", "default": "fixed_tactics.json",
        "help": "replay file that avoids the guilty tactics (default fixed_tactics.json)"},
        json={"metavar": "R.json", "help": "write the result (culprits, probes, budget) as JSON"})
    p.add_argument("--log", metavar="F.jsonl", default="debug_tactics_log.jsonl",
                   help="probe log, one JSON line per probe (default debug_tactics_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the search recorded in --log")
    common.add_check_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backends.engine.builder.tactic_replay import load_replay
    from debugkit.cli import _args
    from debugkit.debug.build import GraphCheck
    from debugkit.debug.checks import CompareOptions
    from debugkit.debug.tactics import (TacticBuilds, TacticSearch, model_hash, onnxrt_outputs, save_fixed_replay,
                                        write_report)
    _args.apply_common_args(args)
    opts = common.options(args, "debug tactics")
    common.refuse_replay_options(opts, "debug tactics", "give the failing and passing assignments with --bad-tactics "
                                                        "and --good-tactics")
    common.check_model(args.model)
    bad = load_replay(args.bad_tactics) if args.bad_tactics else None
    good = load_replay(args.good_tactics) if args.good_tactics else None
    make_config = common.config_factory(args)
    feeds = common.feeds_from_args(args, args.model)
    from debugkit.debug.checks import reduced_precision_default
    criterion = reduced_precision_default(args)   # a reduced-precision build given no comparison: the default check
    if criterion is not None:
        from debugkit.debug.tactics import OutputCheck
        print(f"check: {criterion.describe()}", flush=True)
        check = OutputCheck(feeds, onnxrt_outputs(args.model, feeds), criterion, args.device)
    else:
        check = GraphCheck(feeds, onnxrt_outputs(args.model, feeds), CompareOptions.from_options(opts.compare),
                           args.device)
    from debugkit.debug.fingerprint import search_fingerprint
    meta = search_fingerprint("debug tactics", args, args.model, feeds)
    search = TacticSearch(TacticBuilds(args.model, make_config, feeds[0], opts.build.shape_ranges()), check, bad=bad, good=good,
                          log_path=args.log, resume=args.resume, meta=meta)
    from native.progress import search_scope
    with search_scope():   # the builds and probes say what they do in the log (-v), not one line each
        report = search.run()
    make_config.save()
    save_fixed_replay(report, args.output)
    from debugkit.verdict import search_verdict
    verdict = search_verdict("debug tactics", bool(report["guilty"]), f"{len(report['guilty'])} guilty layer(s)",
                             "no culprit found", fingerprint=opts.fingerprint())
    report["verdict"] = verdict.to_json()
    if args.json:
        write_report(report, args.json, args.output)
    print(f"{report['differing_layers']} layer(s) differ in tactic; {report['probes']} probe(s) "
          f"(+{report['end_point_checks']} end-point checks), budget 2*log2(L)+4 = {report['probe_budget']}")
    if not report["guilty"]:
        print("no culprit found")
        return verdict.exit_code
    print(f"guilty ({len(report['guilty'])}):")
    for g in report["guilty"]:
        print(f"  layer '{g['layer']}' [{g['kind']}] tactic {g['tactic']} (reference {g['reference_tactic']})")
        print(f"      ONNX nodes: {', '.join(g['onnx_nodes'])}")
    print(f"wrote {args.output}: the failing build's tactics with the guilty layers on their reference tactics "
          f"(use it with --load-tactics)")
    return verdict.exit_code
