"""Reduce a failing model to a minimal subgraph that still fails (ddmin over node sets, branches included).

The check is either run's comparison in-process (our engine on the subgraph vs the values of one full ONNX Runtime
run, with run's --atol/--rtol/--compare options) or an external command: `--check CMD ...` (last option; `{model}`
and `{inputs}` are replaced by the subgraph's path and its HDF5 inputs file).
"""
from __future__ import annotations

import os
import time

from debugkit.cli import _search_args
from native.errors import InputFileError, UsageError
from native.logger import G_LOGGER


def register(subparsers):
    p = subparsers.add_parser("reduce", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("model", help="the failing ONNX model")
    from debugkit import options
    options.add_outputs(p, "output", output={"default": "reduced.onnx",
                                             "help": "the minimal failing model (default reduced.onnx)"})
    p.add_argument("--min-good", metavar="FILE.onnx", help="also write the largest passing subgraph seen")
    p.add_argument("--no-inline-if", action="store_true",
                   help="keep If nodes whole (default: each If is replaced by the branch it took on the captured "
                        "values, so the search can reach the nodes inside)")
    p.add_argument("--keep-loops", action="store_true",
                   help="do not search inside the body of a Loop/Scan node that the answer keeps (default: replay "
                        "the loop, take the first iteration whose body fails on its own and reduce that body too)")
    p.add_argument("--mode", choices=["graph-input", "fold"], default="graph-input",
                   help="cut float tensors become graph inputs fed with captured values (default) or constants "
                        "holding them; integer/bool tensors are always folded")
    options.add_groups(p, "data", "build", "compare")
    from debugkit.debug.checks import add_check_args
    _search_args.add_search_args(p, "reduce_probes.jsonl")
    _search_args.add_common(p)
    add_check_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backends.runners import load_onnx, model_sha256
    from debugkit.debug.checks import CompareOptions, command_check_from_args
    from debugkit.debug.executor import make_executor
    from debugkit.debug.probe_log import ProbeLog
    from debugkit.debug.reduce import ReductionError, finish, save_with_inputs

    _search_args.apply_common(args)
    from debugkit.cli._debug_common import refuse_replay_options
    from debugkit.options import Options
    opts = Options.from_args(args, "debug reduce")
    args._dk_build = opts.build
    refuse_replay_options(opts, "debug reduce", "a replay file names the whole model's layers, not a subgraph's")
    if opts.build.calibration_cache:
        raise UsageError("debug reduce calibrates each subgraph on the values captured at its inputs, so "
                         "--calibration-cache (the whole model's scales) cannot apply; drop it")
    if not os.path.exists(args.model):
        raise InputFileError(f"model file not found: {args.model}")
    check = command_check_from_args(args) or CompareOptions.from_options(opts.compare)
    model = load_onnx(args.model)
    feeds = _search_args.generated_feeds(args, model)
    from debugkit.debug.fingerprint import search_fingerprint
    meta = search_fingerprint("reduce", args, args.model, feeds,
                              check=" ".join(check.argv) if hasattr(check, "argv") else repr(check))
    log = ProbeLog(args.log, meta, resume=args.resume)
    t0 = time.perf_counter()
    from debugkit.debug.scratch import search_dir
    with search_dir("debugkit_reduce_") as workdir, _search_args.make_executor(args) as ex:
        sub, found, prober = _search(model, feeds, check, args, ex, log, workdir)
        if sub is None:
            raise ReductionError(f"the check passes on the whole model ({found} nodes), so there is "
                                 f"nothing to reduce ({prober})")
        if not found:
            raise ReductionError("the check fails even on an empty model (none of the model's nodes): it does "
                                 "not depend on the model — check the --check command or the comparison options")
        bodies = [] if args.keep_loops else _descend(sub, found, check, args, ex, workdir)
    items = sub.items
    model_out, feeds_out, _ = sub.build(found)
    finish(model_out)
    prov = {"model_path": os.path.abspath(args.model), "model_sha256": meta["model (sha256)"]}
    inputs_path = save_with_inputs(model_out, feeds_out, args.output, prov)
    prov_out = dict(prov, output=args.output)
    print(f"reduced {len(items)} nodes to {len(found)} in {prober.probes} probes "
          f"({prober.replayed} replayed from {args.log}), {time.perf_counter() - t0:.1f} s")
    print(f"nodes: {', '.join(found)}")
    from debugkit.debug.report_html import search_html
    report = os.path.splitext(args.output)[0] + ".html"
    from native.files import write_text
    write_text(report, search_html(f"debug reduce {os.path.basename(args.model)}",
                            {"nodes searched": len(items), "nodes kept": len(found), "probes": prober.probes,
                             **{f"inside {b['label']}": b["summary"] for b in bodies},
                             "replayed": prober.replayed, "mode": args.mode, "check": meta["check"],
                             "probe log": args.log, "seconds": round(time.perf_counter() - t0, 1)},
                            chosen=found, probes=log.records), "report")
    print(f"wrote {args.output}" + (f" and its inputs {inputs_path}" if inputs_path else "") + f", {report}")
    for b in bodies:
        _report_body(b, prov_out)
    if args.min_good:
        good = [r for r in log.records if not _fails(r["result"]) and r["artifact"]]
        if good:
            best = max(good, key=lambda r: len(r["artifact"]))["artifact"]
            m, f, _ = sub.build(best)
            finish(m)
            save_with_inputs(m, f, args.min_good, prov)
            print(f"wrote {args.min_good} (largest passing subgraph seen: {len(best)} nodes)")
        else:
            G_LOGGER.warning("--min-good: no probe passed, so there is no passing subgraph to write")
    from debugkit.verdict import search_verdict
    return search_verdict("debug reduce", True, f"{len(found)} of {len(items)} node(s) kept").exit_code


def _search(model, feeds, check, args, ex, log, workdir, what="the model"):
    """Capture, inline taken Ifs, check the whole, ddmin. (Subgraphs, answer, Prober), or (None, n_nodes, reason)
    when the whole passes the check."""
    from debugkit.debug.executor import InlineExecutor
    from debugkit.debug.reduce import ReduceProbe, Subgraphs, capture_values, inline_taken_ifs
    from debugkit.debug.strategies import Prober, ddmin

    G_LOGGER.info(f"capturing every tensor of {what} with ONNX Runtime")
    values = capture_values(model, feeds)
    for _ in range(0 if args.no_inline_if else 4):   # nested Ifs surface one level per round
        inlined, count = inline_taken_ifs(model, values)
        if not count:
            break
        G_LOGGER.info(f"replaced {count} If node(s) by the branch each took on these inputs")
        model = inlined
        values = capture_values(model, feeds)
    sub = Subgraphs(model, feeds, values, args.mode)
    items = sub.items
    bar = _search_args.Progress(None, "reduce")
    try:
        probe_fn = ReduceProbe(workdir, args.mode, check, (), subgraphs=sub, build=args._dk_build)
        if type(ex) is not InlineExecutor:
            probe_fn.ship(sub)
        prober = Prober(probe_fn, log=log, executor=ex, on_probe=bar)
        if not prober(items):
            rec = prober.known(items)[1]
            return None, len(items), rec.get("reason", "") if isinstance(rec, dict) else ""
        G_LOGGER.info(f"{what} fails the check; reducing {len(items)} nodes")
        return sub, ddmin(items, prober), prober
    finally:
        bar.close()


def _descend(sub, found, check, args, ex, workdir, depth=0):
    """For each Loop/Scan node the answer keeps: the first iteration whose body fails on its own, reduced."""
    from debugkit.debug.loop_body import LOOP_OPS, BodyIterations
    from debugkit.debug.probe_log import ProbeLog
    from native.errors import DebugkitError
    out = []
    for label in found:
        node = sub.by_label[label]
        if node.op_type not in LOOP_OPS or depth > 3:
            continue
        try:
            iters = BodyIterations(sub.model, node, sub.values)
        except DebugkitError as e:
            G_LOGGER.warning(f"cannot replay the body of {node.op_type} '{label}' ({str(e).splitlines()[0]}); "
                             f"it is kept whole")
            continue
        G_LOGGER.info(f"the answer keeps {node.op_type} '{label}': looking for the fault inside its body "
                      f"({len(iters.feeds)} iteration(s) replayed)")
        entry = {"label": label, "op": node.op_type, "iterations": len(iters.feeds), "iteration": None}
        for i in range(len(iters.feeds)):
            model, feeds = iters.iteration_model(i)
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)
            log_path = f"{os.path.splitext(args.log)[0]}_{safe}_body.jsonl"
            from debugkit.debug.fingerprint import options_record
            meta = {**options_record(args), "search": "reduce-body", "loop": label, "iteration": i,
                    "check": " ".join(check.argv) if hasattr(check, "argv") else repr(check)}
            log = ProbeLog(log_path, meta, resume=args.resume and os.path.exists(log_path))
            body_dir = os.path.join(workdir, f"body{depth}_{safe}_{i}")
            os.makedirs(body_dir, exist_ok=True)
            bsub, bfound, prober = _search(model, feeds, check, args, ex, log, body_dir,
                                           f"iteration {i} of the body of '{label}'")
            if bsub is None:
                continue
            entry.update(iteration=i, sub=bsub, found=bfound, probes=prober.probes, log=log_path,
                         nodes=len(bsub.items), safe=safe)
            if bfound:
                entry["inner"] = _descend(bsub, bfound, check, args, ex, workdir, depth + 1)
            break
        if entry["iteration"] is None:
            entry["summary"] = (f"no single iteration of its body fails on its own (first {entry['iterations']} "
                                f"tried): the error builds up over the iterations; the loop is kept whole")
        elif not entry["found"]:
            entry["summary"] = f"iteration {entry['iteration']} of its body fails even with none of its nodes"
        else:
            entry["summary"] = (f"iteration {entry['iteration']} of its body fails on its own; its "
                                f"{entry['nodes']} nodes reduced to {len(entry['found'])} in {entry['probes']} probes: "
                                f"{', '.join(entry['found'])}")
        out.append(entry)
    return out


def _report_body(b, prov, prefix=""):
    """Print what was found inside one loop body and write the reduced body model beside the output."""
    from debugkit.debug.reduce import finish, save_with_inputs
    print(f"{prefix}the fault is inside the body of {b['op']} '{b['label']}': {b['summary']}")
    if b.get("found"):
        path = f"{os.path.splitext(prov['output'])[0]}_{b['safe']}_body.onnx"
        model, feeds, _ = b["sub"].build(b["found"])
        finish(model)
        inputs = save_with_inputs(model, feeds, path, {k: v for k, v in prov.items() if k != "output"})
        print(f"{prefix}wrote {path}" + (f" and its inputs {inputs}" if inputs else "") +
              f" (probe log {b['log']})")
        for inner in b.get("inner", []):
            _report_body(inner, dict(prov, output=path), prefix + "  ")


def _fails(result):
    return bool(result.get("fails")) if isinstance(result, dict) else bool(result)
