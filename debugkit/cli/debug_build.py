"""Rebuild the engine repeatedly, check each build, and sort the tactic replays into good/ and bad/.

The check is an in-process comparison against ONNX Runtime (--compare-onnxrt, the default) or a command
(--check CMD, exit 0 = good; {plan} and {tactics} in CMD become the artifact paths). Then
`debugkit inspect diff-tactics --good DIR/good --bad DIR/bad` names the layers whose tactics separate them.
"""
from __future__ import annotations

import os

from debugkit.cli import _debug_common as common
from native.errors import UsageError


def register(subparsers):
    p = subparsers.add_parser("build", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="ONNX model")
    p.add_argument("--until", default="bad", metavar="good|bad|N",
                   help="stop at the first good build, the first bad one (default), or after N builds")
    p.add_argument("--max-iterations", type=int, default=30, help="give up after this many builds (default 30)")
    chk = p.add_mutually_exclusive_group()
    chk.add_argument("--check", metavar="CMD", help="a command that checks {plan}; exit status 0 means good")
    chk.add_argument("--compare-onnxrt", action="store_true",
                     help="compare against ONNX Runtime in process (the default)")
    from debugkit import options
    options.add_outputs(p, "artifacts_dir", artifacts_dir={
        "default": "debug_build_artifacts", "help": "where good/ and bad/ go (default debug_build_artifacts)"})
    p.add_argument("--save-plans", action="store_true", help="keep every build's plan beside its replay file")
    from debugkit.cli import _search_args
    _search_args.add_executor_args(p.add_argument_group("workers"), "the builds (each builds and checks one)")
    common.add_check_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from debugkit.cli import _args
    from debugkit.debug.build import BuildLoop, GraphCheck, command_check
    from debugkit.debug.checks import CompareOptions
    from debugkit.debug.tactics import TacticBuilds, onnxrt_outputs
    from debugkit.verdict import Verdict, combine
    _args.apply_common_args(args)
    opts = common.options(args, "debug build")
    common.refuse_replay_options(opts, "debug build", f"each build's replay file goes to {args.artifacts_dir}")
    common.check_model(args.model)
    until = str(args.until)
    if until not in ("good", "bad") and not (until.isdigit() and int(until) > 0):
        raise UsageError(f"--until expects good, bad or a positive number of builds, got '{args.until}'")
    feeds = common.feeds_from_args(args, args.model)
    make_config = common.config_factory(args)
    if not args.timing_cache:
        make_config.cache.entries.clear()
    builds = TacticBuilds(args.model, lambda unrestricted: _fresh(make_config, args), feeds[0],
                          opts.build.shape_ranges())
    need_plan = bool(args.check) or args.save_plans

    def build(i):
        graph, doc = builds.build()
        plan = None
        if need_plan:
            from backends.engine.plan import serialize_plan
            plan = serialize_plan(graph, make_config())
        return graph, doc, plan

    compare = None
    if args.check:
        check = command_check(args.check)
    else:
        from debugkit.debug.checks import reduced_precision_default
        criterion = reduced_precision_default(args)   # a reduced-precision build given no comparison: the default
        if criterion is not None:
            from debugkit.debug.tactics import OutputCheck
            print(f"check: {criterion.describe()}", flush=True)
            compare = OutputCheck(feeds, onnxrt_outputs(args.model, feeds), criterion, args.device)

            def check(graph, plan_path, replay_path):
                return compare(graph)
        else:
            check = compare = GraphCheck(feeds, onnxrt_outputs(args.model, feeds),
                                         CompareOptions.from_options(opts.compare), args.device)
    loop = BuildLoop(build, check, args.artifacts_dir, until, args.save_plans)
    if args.timing_cache:   # the workers' builds time what the file lacked: saved with the rest below
        loop.on_timings = lambda timings: [make_config.cache.entries.setdefault(k, v) for k, v in timings.items()]
    from debugkit.cli import _search_args
    with _search_args.make_executor(args) as ex:
        if type(ex).__name__ == "InlineExecutor":
            results = loop.run(args.max_iterations)
        else:
            results = loop.run_on(ex, _iteration(args, opts, feeds, ex, compare if not args.check else None,
                                                 make_config), args.max_iterations)
    make_config.save()
    good = sum(r["result"] == "good" for r in results)
    bad = len(results) - good
    print(f"{len(results)} build(s): {good} good, {bad} bad -> {args.artifacts_dir}/good, {args.artifacts_dir}/bad")
    if good and bad:
        print(f"next: debugkit inspect diff-tactics --good {args.artifacts_dir}/good --bad {args.artifacts_dir}/bad")
    verdict = combine([Verdict.from_json(r["verdict"]) if "verdict" in r else
                       Verdict.from_exit_code(0 if r["result"] == "good" else 1, r["detail"]) for r in results],
                      "debug build", label=lambda i: f"build {results[i]['iteration']}")
    verdict.fingerprint = opts.fingerprint()
    print(verdict.headline())
    return verdict.exit_code   # one rule for debug build and repeat: 0 only when every build passed (docs/run.md)


def _iteration(args, opts, feeds, ex, compare, make_config):
    """The picklable iteration the workers run (debugkit.debug.build.BuildIteration): the build options without
    the replay files (the search makes its own), the --timing-cache file's timings when one was given (each build
    starts from them; what the builds time is merged back and saved), the model's bytes when the workers may not
    see this machine's files (Ray)."""
    from debugkit.debug.build import BuildIteration
    timings = dict(make_config.cache.entries) if args.timing_cache else None
    it = BuildIteration(os.path.abspath(args.model),
                        opts.build.replace(load_tactics=None, save_tactics=None, timing_cache=None), opts.data,
                        opts.fingerprint(), feeds, check=compare, check_cmd=args.check,
                        save_plans=args.save_plans, timings=timings)
    if getattr(ex, "remote", False):
        from backends.runners import load_onnx
        it.ship(load_onnx(args.model))
    return it


def _fresh(make_config, args):
    """Each iteration a fresh build: timings are measured again unless --timing-cache was given."""
    config = make_config(False)
    if not args.timing_cache:
        from backends.engine.builder import TimingCache
        config.timing_cache = TimingCache()
    return config
