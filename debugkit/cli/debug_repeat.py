"""Run a check repeatedly and sort the artifacts of passing and failing runs (flaky builds, nondeterminism).

Without --check each iteration builds a fresh engine from MODEL (fresh tactic timing), runs it on the same feeds and
compares with ONNX Runtime using run's comparison options; plans go to ART_DIR/good and ART_DIR/bad. With
`--check CMD ...` (last option; `{model}` is replaced by MODEL) the command runs each time and the files named by
--artifacts are moved there instead.
"""
from __future__ import annotations

import os
import time

from debugkit.cli import _search_args
from native.errors import InputFileError, UsageError
from native.logger import G_LOGGER


def register(subparsers):
    p = subparsers.add_parser("repeat", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="the ONNX model")
    p.add_argument("--until", default="10", metavar="N|good|bad",
                   help="N iterations (default 10), or stop at the first passing (good) / failing (bad) run "
                        "(at most --max-iterations)")
    p.add_argument("--max-iterations", type=int, default=100)
    p.add_argument("--artifacts", nargs="+", default=[], metavar="FILE",
                   help="files the --check command writes, moved into good/ or bad/ after each run")
    from debugkit import options
    options.add_outputs(p, "artifacts_dir", artifacts_dir={
        "default": "repeat_artifacts", "help": "where good/ and bad/ go (default repeat_artifacts)"})
    options.add_groups(p, "data", "build", "compare")
    from debugkit.debug.checks import add_check_args
    _search_args.add_search_args(p, "repeat_probes.jsonl")
    _search_args.add_common(p)
    add_check_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backends.runners import OnnxrtRunner, load_onnx, model_sha256
    from debugkit.debug.checks import CompareOptions, ReferenceFailedError, command_check_from_args
    from debugkit.debug.executor import make_executor
    from debugkit.debug.probe_log import ProbeLog
    from debugkit.debug.repeat import RepeatProbe, land_artifacts, tactic_culprits
    from native.errors import DebugkitError

    _search_args.apply_common(args)
    from debugkit.options import Options
    from debugkit.verdict import Verdict, combine
    opts = Options.from_args(args, "debug repeat")
    args.art_dir = args.artifacts_dir
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    until = args.until
    if until not in ("good", "bad"):
        try:
            count = int(until)
        except ValueError:
            raise UsageError(f"--until expects a number, good or bad; got '{until}'") from None
        if count < 1:
            raise UsageError("--until N needs N >= 1")
    else:
        count = args.max_iterations
    check = command_check_from_args(args)
    model = None
    if check is None:
        model = load_onnx(args.model)
        feeds = _search_args.generated_feeds(args, model)
        try:
            with OnnxrtRunner(model) as r:
                expected = r.infer(feeds)
        except DebugkitError as e:
            raise ReferenceFailedError(f"the reference (ONNX Runtime) fails on {args.model}: "
                                       f"{str(e).splitlines()[0]}") from None
        from debugkit.debug.checks import reduced_precision_default
        criterion = reduced_precision_default(args)
        if criterion is not None:
            print(f"check: {criterion.describe()}", flush=True)
        probe_fn = RepeatProbe(criterion or CompareOptions.from_options(opts.compare), os.path.abspath(args.model),
                               feeds, expected, opts.build, args.art_dir, data=opts.data)
    else:
        probe_fn = RepeatProbe(check, args.model, art_dir=args.art_dir, artifacts=args.artifacts)
    from debugkit.debug.fingerprint import search_fingerprint
    meta = search_fingerprint("repeat", args, args.model, feeds if check is None else None,
                              exclude=("until", "max_iterations"),
                              check=" ".join(check.argv) if check else "in-process")
    log = ProbeLog(args.log, meta, resume=args.resume)
    done = {r["artifact"]: r for r in log.records}
    t0 = time.perf_counter()
    bar = _search_args.Progress(count, "repeat")
    try:
        with _search_args.make_executor(args) as ex:
            if ex.remote:   # Ray: the model's bytes go along, the artifacts come back (no shared filesystem)
                probe_fn.ship(model if model is not None else load_onnx(args.model))
            i = 0
            while i < count:
                batch = [k for k in range(i, min(count, i + max(1, ex.workers))) if k not in done]
                for k, res in zip(batch, ex.map(probe_fn, batch) if len(batch) > 1 else map(probe_fn, batch)):
                    rec = log.record(k, land_artifacts(res, args.art_dir))
                    done[k] = rec
                    bar(rec, k)
                    G_LOGGER.info(f"iteration {k}: {'FAILED' if res['fails'] else 'passed'}"
                                  f"{' (' + res['reason'] + ')' if res.get('reason') else ''}")
                i += max(1, ex.workers)
                hits = [done[k]["result"]["fails"] for k in range(min(i, count)) if k in done]
                if (until == "bad" and any(hits)) or (until == "good" and not all(hits)):
                    break
    finally:
        bar.close()
    records = [done[k] for k in sorted(done)]
    bad = sum(1 for r in records if r["result"]["fails"])
    print(f"{len(records)} run(s): {len(records) - bad} passed, {bad} failed ({time.perf_counter() - t0:.1f} s)")
    if args.art_dir and any(r["result"].get("artifacts") for r in records):
        print(f"artifacts sorted into {os.path.join(args.art_dir, 'good')} and {os.path.join(args.art_dir, 'bad')}")
    if args.art_dir:
        from debugkit.debug.report_html import search_html
        os.makedirs(args.art_dir, exist_ok=True)
        from native.files import write_text
        write_text(os.path.join(args.art_dir, "report.html"),
                   search_html(f"debug repeat {os.path.basename(args.model)}",
                               {"runs": len(records), "failed": bad, "check": meta["check"], "probe log": args.log},
                               probes=records), "report")
    culprits = tactic_culprits(records)
    for layer, t in sorted(culprits.items()):
        print(f"layer {layer}: tactic {t['good']} in every passing build, {t['bad']} in every failing one")
    verdict = combine([Verdict.from_json(r["result"]["verdict"]) if "verdict" in r["result"] else
                       Verdict.from_exit_code(1 if r["result"]["fails"] else 0, r["result"].get("reason", ""))
                       for r in records], "debug repeat", label=lambda i: f"run {records[i]['artifact']}")
    verdict.fingerprint = opts.fingerprint()
    print(verdict.headline())
    return verdict.exit_code   # one rule for debug build and repeat: 0 only when every run passed (docs/run.md)
