"""Polygraphy's flags, one table: each `polygraphy run|convert|inspect|surgeon|debug` flag is accepted as it is, accepted
as an alias of ours (rewritten before parsing), or explained ("not applicable, because ...") when given.

`translate(argv, parser)` rewrites a command line written for Polygraphy into ours (`--trt` → `--engine`,
`--onnx-outputs mark all` → `--mark-all`, `-p float16` → `--higher fp16`, ...); `explain(command, flag)` is the one
line the parser prints for a Polygraphy flag that has no counterpart, instead of a did-you-mean that would send the
user to a flag with another meaning. docs/migrating-from-polygraphy.md is rendered from this table
(`python tools/polygraphy_flags_table.py`), and tests walk it against Polygraphy 0.53.6's own list of flags.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    """kind: "same" (our flag has this spelling and meaning), "alias" (rewritten to the first of `targets` this
    command has), "drop" (our default already does it), "special" (rewritten by `rewrite`), "na" (explained by
    `reason`). `reason` also explains an alias whose target this command lacks."""
    kind: str
    targets: tuple = ()
    reason: str = ""
    values: dict = field(default_factory=dict)   # value translation for the flag's arguments
    rewrite: object = None                       # fn(values) -> tokens, for "special"


def same(reason=""):
    return Entry("same", reason=reason)


def alias(*targets, reason="", values=None):
    return Entry("alias", targets, reason, values or {})


def na(reason):
    return Entry("na", reason=reason)


def _mark(values):
    """--onnx-outputs / --trt-outputs: `mark all` is --mark-all, names are --mark NAME ..."""
    return ["--mark-all"] if [v.lower() for v in values] == ["mark", "all"] else ["--mark", *values]


def _replay_load(values):
    return ["--log", *values, "--resume"]


# reasons shared by many flags
TF = "TensorFlow is not a debugkit backend: convert the model to ONNX first (e.g. tf2onnx)"
TRT = "a TensorRT-specific setting with no counterpart in debugkit's builder"
PARSER = "TensorRT ONNX-parser flags: debugkit's parser has one behaviour (unsupported nodes are listed by name)"
NO_ONNX_WRITE = "this command writes no ONNX model; surgeon sanitize/extract/insert do (with --save-external-data)"
EXT_DATA = "external weights are found beside the model, as ONNX's loader finds them; surgeon takes --external-data-dir"
SHAPES = "shapes come from debugkit's own shape inference (with runtime values where needed), never ONNX Runtime's"
PROFILE = ("one option for a shape range: convert --profile NAME:MIN:OPT:MAX; run and the searches build for the "
           "shapes of their inputs (--input-shapes)")
NO_DATA = "surgeon folds with debugkit's own kernels and generates no inputs"
REPLAY = "each probe's artifact and result are kept in the probe log (--log FILE.jsonl; --resume reads it)"
PLOTS = "run --report FILE.html draws the per-layer error chart and an error histogram per output"
PRECISION_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "int8", "fp8": "fp8"}

FLAGS = {
    # logging
    "-v": same(), "--verbose": same(), "-q": same(), "--quiet": same(), "--log-file": same(),
    "--verbosity": na("verbosity is -v/-vv and -q/-qq (one logger, TensorRT's severities; no per-module levels)"),
    "--silent": alias("-qq"),
    "--log-format": na("log lines are '[I] message'; timestamps and line info are not offered"),
    # runners and model loading
    "--onnxrt": same(), "--trt": alias("--engine"), "--tf": na(TF),
    "--pluginref": na("Polygraphy's plugin reference runner: debugkit's engine runs numpy reference kernels itself; "
                      "--reference fp64 adds the float64 oracle"),
    "--model-type": na("debugkit reads ONNX models and its own plans, told apart by their content"),
    "--input-shapes": same(), "--inputs": alias("--input-shapes"),
    **{f: na(TF) for f in ("--tftrt", "--use-tftrt", "--minimum-segment-size", "--dynamic-op", "--ckpt", "--tf-outputs",
                           "--save-pb", "--save-tensorboard", "--freeze-graph", "--gpu-memory-fraction",
                           "--allow-growth", "--xla", "--save-timeline", "--opset", "--save-onnx")},
    "--save-external-data": same(reason=NO_ONNX_WRITE),
    "--external-data-path": alias("--save-external-data", reason=NO_ONNX_WRITE),
    "--external-data-size-threshold": same(reason=NO_ONNX_WRITE),
    "--no-save-all-tensors-to-one-file": na("surgeon writes external weights to one file"),
    "--shape-inference": na(SHAPES), "--do-shape-inference": na(SHAPES),
    "--no-onnxruntime-shape-inference": na(SHAPES), "--force-fallback-shape-inference": na(SHAPES),
    "--external-data-dir": same(reason=EXT_DATA), "--load-external-data": alias("--external-data-dir", reason=EXT_DATA),
    "--ext": alias("--external-data-dir", reason=EXT_DATA),
    "--ignore-external-data": na("commands that need weights load them; inspect model shows the structure anyway"),
    "--onnx-outputs": Entry("special", rewrite=_mark, reason="convert builds the model's own outputs; mark tensors "
                                                             "to compare with run --mark / --mark-all"),
    "--trt-outputs": Entry("special", rewrite=_mark, reason="only run marks tensors (--mark / --mark-all)"),
    "--onnx-exclude-outputs": alias("--exclude-outputs", reason="only run compares outputs (--exclude-outputs)"),
    "--trt-exclude-outputs": alias("--exclude-outputs", reason="only run compares outputs (--exclude-outputs)"),
    "--onnx-outputs-by-type": na("mark tensors by name or fnmatch pattern: run --mark 'pattern*'"),
    "--trt-outputs-by-type": na("mark tensors by name or fnmatch pattern: run --mark 'pattern*'"),
    "--fp-to-fp16": na("the ONNX model stays FP32; build FP16 engines with --fp16 (per layer: --layer-precisions)"),
    "--providers": na("ONNX Runtime is the reference and runs on its CPU provider"),
    "--execution-providers": na("ONNX Runtime is the reference and runs on its CPU provider"),
    "--graph-optimization-level": na("ONNX Runtime runs with all graph optimisations, as the reference"),
    # the builder
    "--trt-min-shapes": na(PROFILE), "--trt-opt-shapes": na(PROFILE), "--trt-max-shapes": na(PROFILE),
    "--tf32": same(reason="debug precision searches one low precision (--fp16/--bf16/--int8/--fp8)"),
    "--fp16": same(), "--bf16": same(), "--fp8": same(), "--int8": same(),
    "--precision-constraints": same(reason="the search constrains the layers it keeps itself (prefer)"),
    "--layer-precisions": Entry("same", reason="the search chooses the layer precisions",
                                values={f":{k}": f":{v}" for k, v in PRECISION_NAMES.items()}),
    "--sparse-weights": na("no sparse tactics: 2:4 structured sparsity is a tensor-core feature debugkit does not "
                           "model"),
    "--version-compatible": na("a plan loads only in the debugkit version that wrote it, which it names"),
    "--exclude-lean-runtime": na("a plan loads only in the debugkit version that wrote it, which it names"),
    "--calibration-cache": same(reason="this command does not calibrate"),
    "--calib-base-cls": alias("--calibration-algorithm", values={
        "IInt8EntropyCalibrator2": "entropy2", "IInt8EntropyCalibrator": "entropy", "IInt8MinMaxCalibrator": "minmax"},
        reason="this command does not calibrate"),
    "--calibration-base-class": alias("--calibration-algorithm", values={
        "IInt8EntropyCalibrator2": "entropy2", "IInt8EntropyCalibrator": "entropy", "IInt8MinMaxCalibrator": "minmax"},
        reason="this command does not calibrate"),
    "--quantile": na("the legacy calibrator is not implemented; the closest: --calibration-algorithm percentile "
                     "--calibration-percentile P"),
    "--regression-cutoff": na("the legacy calibrator is not implemented; the closest: --calibration-algorithm "
                              "percentile --calibration-percentile P"),
    "--load-timing-cache": alias("--timing-cache", reason="this command builds nothing it could time"),
    "--save-timing-cache": alias("--timing-cache", reason="this command builds nothing it could time"),
    "--error-on-timing-cache-miss": na("a timing-cache miss is timed and added; --tactic-heuristic builds untimed"),
    "--disable-compilation-cache": na("no JIT compilation cache: CUDA kernels are compiled at build time into the "
                                      "plan"),
    "--save-tactics": same(reason="this command builds no engine"),
    "--save-tactic-replay": alias("--save-tactics", reason="this command builds no engine"),
    "--load-tactics": same(reason="this command builds no engine"),
    "--load-tactic-replay": alias("--load-tactics", reason="this command builds no engine"),
    "--tactic-sources": same(reason="this command builds no engine"),
    "--trt-config-script": na("build options are flags; in Python make a BuilderConfig (run --gen-script shows how)"),
    "--trt-config-postprocess-script": na("build options are flags; in Python edit the BuilderConfig"),
    "--trt-cpps": na("build options are flags; in Python edit the BuilderConfig"),
    "--trt-safety-restricted": na(TRT), "--engine-capability": na(TRT),
    "--refittable": na("plans are not refittable from the command line (BuilderFlag.REFIT is in the API)"),
    "--strip-plan": na("plans always carry their weights"),
    "--use-dla": Entry("special", rewrite=lambda values: ["--use-dla-core", "0", *values],
                       reason="this command builds no engine"),
    "--allow-gpu-fallback": same(reason="this command builds no engine"),
    "--pool-limit": na("one scratch limit: --workspace BYTES"), "--memory-pool-limit": na("one scratch limit: "
                                                                                         "--workspace BYTES"),
    **{f: na(TRT) for f in ("--preview-features", "--builder-optimization-level", "--hardware-compatibility-level",
                            "--max-aux-streams", "--quantization-flags", "--profiling-verbosity", "--weight-streaming",
                            "--runtime-platform", "--tiling-optimization-level", "--direct-io",
                            "--decomposable-attentions", "--weight-streaming-budget", "--load-runtime",
                            "--dla-workspace-allocation-strategy")},
    "--plugins": na("plugins are Python tactics: --tactics-module MODULE registers them"),
    "--onnx-flags": na(PARSER), "--plugin-instancenorm": na(PARSER),
    "--enable-uint8-asymmetric-quantization-dla": na(PARSER),
    "--tensor-dtypes": na("I/O tensors keep the model's dtypes; per-layer output types: --layer-output-types"),
    "--tensor-datatypes": na("I/O tensors keep the model's dtypes; per-layer output types: --layer-output-types"),
    "--all-tensor-dtypes": na("I/O tensors keep the model's dtypes; per-layer output types: --layer-output-types"),
    "--all-tensor-datatypes": na("I/O tensors keep the model's dtypes; per-layer output types: --layer-output-types"),
    "--tensor-formats": na("I/O tensors are linear (NCHW); the builder chooses formats inside"),
    "--all-tensor-formats": na("I/O tensors are linear (NCHW); the builder chooses formats inside"),
    "--trt-network-postprocess-script": na("edit the network in Python (NetworkDefinition) or the ONNX model "
                                           "(surgeon)"),
    "--trt-npps": na("edit the network in Python (NetworkDefinition) or the ONNX model (surgeon)"),
    "--strongly-typed": na("precisions come from the flags and --layer-precisions; no strongly typed mode"),
    "--mark-debug": na("run --mark NAME ... makes tensors observable without changing the engine's outputs"),
    "--mark-unfused-tensors-as-debug-tensors": na("run --mark-all compares every tensor a layer boundary exposes; "
                                                  "--disable-fusion exposes every node's"),
    "--save-engine": same(reason="this command builds no engine to save"),
    "--optimization-profile": na("the engine picks the profile that fits the inputs' shapes"),
    "--allocation-strategy": na("activation memory is planned at build time (one arena per context)"),
    # data
    "--seed": same(reason=NO_DATA), "--val-range": same(reason=NO_DATA), "--iterations": same(reason=NO_DATA),
    "--iters": alias("--iterations", reason=NO_DATA),
    "--data-loader-backend-module": na("inputs are numpy arrays"),
    "--load-inputs": same(reason=NO_DATA), "--load-input-data": alias("--load-inputs", reason=NO_DATA),
    "--data-loader-script": same(reason=NO_DATA),
    # run
    "--warm-up": same(), "--use-subprocess": na("runners run in this process; a crash is reported as an internal "
                                                "error naming where it happened"),
    "--save-inputs": same(), "--save-input-data": alias("--save-inputs"),
    "--save-input-blob": na("--save-inputs writes every input (HDF5, or Polygraphy's JSON for *.json)"),
    "--save-outputs": same(), "--save-results": alias("--save-outputs"),
    "--postprocess": same(reason="not in this version yet (issue 25, comparison parity)"),
    "--postprocess-func": alias("--postprocess", reason="not in this version yet (issue 25, comparison parity)"),
    "--postprocess-func-script": na("a custom comparison: the Python API (run --gen-script writes a starting point)"),
    "--no-shape-check": alias("--no-check-shapes", reason="not in this version yet (issue 25, comparison parity)"),
    "--validate": same(), "--fail-fast": same(),
    "--check-average": na("every iteration is judged on its own; --json carries each iteration's numbers"),
    "--sequential-runners": na("runners already run one after another on each feed"),
    "--compare": same(), "--compare-func": alias("--compare"),
    "--compare-func-script": na("a custom check: debug --check CMD, or the Python API (run --gen-script)"),
    "--load-outputs": same(), "--load-results": alias("--load-outputs"),
    "--save-accuracy-results": na("--json FILE writes the verdict with every output's numbers"),
    "--rtol": same(), "--rel-tol": alias("--rtol"), "--atol": same(), "--abs-tol": alias("--atol"),
    "--check-error-stat": same(), "--error-quantile": same(), "--index-tolerance": same(),
    "--infinities-compare-equal": Entry("drop", reason="matching infinities compare equal by default "
                                                       "(--strict-inf turns that off)"),
    "--save-heatmaps": na(PLOTS), "--show-heatmaps": na(PLOTS), "--save-error-metrics-plot": na(PLOTS),
    "--show-error-metrics-plot": na(PLOTS),
    "--l2-threshold": same(), "--l2-tolerance": alias("--l2-threshold"),
    "--cosine-similarity-threshold": alias("--cosine-threshold"),
    "--psnr-threshold": same(), "--psnr-tolerance": alias("--psnr-threshold"),
    "--snr-threshold": same(), "--snr-tolerance": alias("--snr-threshold"),
    "--lpips-threshold": na("LPIPS needs a neural network (torch); not offered"),
    "--lpips-tolerance": na("LPIPS needs a neural network (torch); not offered"),
    "--gen-script": same(), "--gen": alias("--gen-script"),
    # convert / inspect / surgeon
    "-o": same(), "--output": same(),
    "--convert-to": na("convert writes a debugkit plan; inspect model shows ONNX models and plans as they are"),
    "--display-as": na("inspect model shows ONNX models and plans as they are"),
    "--visual": na("no graph viewer; run --report draws the error along the network"),
    "--visual-port": na("no graph viewer"), "--save-visual": na("no graph viewer"),
    "--show": same(),
    "--list-unbounded-dds": na("data-dependent shapes are resolved at run time; no upper-bound analysis"),
    "--combine-tensor-info": na("inspect model prints what the model or plan holds"),
    "-a": same(), "--all": same(), "-s": same(), "--show-values": same(),
    "--histogram": na("inspect data prints mean/min/max; run --report draws error histograms"),
    "-n": na("--show-values prints numpy's summary of each array"),
    "--num-items": na("--show-values prints numpy's summary of each array"),
    "--line-width": na("--show-values prints numpy's summary of each array"),
    "--with-partitioning": na("inspect capability lists every node that does not parse or run, with the reason"),
    "--dir": na("give the replay files with --good and --bad"), "--good": same(), "--bad": same(),
    "--model-input-shapes": same(), "--model-inputs": alias("--model-input-shapes", "--input-shapes"),
    "--outputs": same(reason="sanitize keeps the model's outputs; cut a model with surgeon extract --outputs"),
    "--override-input-shapes": same(), "--override-inputs": alias("--override-input-shapes"),
    "--no-shape-inference": same(reason=SHAPES),
    "--exclude-outputs": same(reason="sanitize keeps the model's outputs; cut a model with surgeon extract --outputs"),
    "--outputs-by-type": na("cut a model by tensor names: surgeon extract --outputs"),
    "--set-unbounded-dds-upper-bound": na("data-dependent shapes are resolved at run time; no upper-bound analysis"),
    "--fold-constants": same(), "--num-passes": same(), "--num-const-fold-passes": alias("--num-passes"),
    "--partitioning": na("folding evaluates every foldable subgraph with our kernels; no partitioning needed"),
    "--no-fold-shapes": same(), "--no-per-pass-shape-inference": na(SHAPES),
    "--fold-size-threshold": same(), "--cleanup": same(), "--toposort": same(),
    "--op": same(), "--name": same(), "--attrs": same(),
    "--exclude-list": na("no weight stripping: plans always carry their weights"),
    # debug
    "--check": same(), "--check-inference": alias("--check"),
    "--fail-code": same(reason="debug build judges each build with run's comparison (--check for a command)"),
    "--fail-returncode": alias("--fail-code", reason="debug build judges each build with run's comparison"),
    "--ignore-fail-code": na("--fail-code lists the codes that fail; every other code passes"),
    "--ignore-fail-returncode": na("--fail-code lists the codes that fail; every other code passes"),
    "--fail-regex": same(reason="debug build judges each build with run's comparison (--check for a command)"),
    "--show-output": na("the check's last output line is in the probe log and the report"),
    "--hide-fail-output": na("the check's last output line is in the probe log and the report"),
    "--artifacts": same(reason=REPLAY), "--art-dir": alias("--artifacts-dir", "--art-dir", reason=REPLAY),
    "--artifacts-dir": alias("--artifacts-dir", "--art-dir", reason=REPLAY),
    "--iter-artifact": na(REPLAY), "--intermediate-artifact": na(REPLAY), "--no-remove-intermediate": na(REPLAY),
    "--iter-info": na(REPLAY), "--iteration-info": na(REPLAY),
    "--until": same(),
    "--load-debug-replay": Entry("special", rewrite=_replay_load, reason=REPLAY),
    "--save-debug-replay": alias("--log", reason=REPLAY),
    "--mode": same(),
    "--direction": same(),
    "-p": alias("--higher", values=PRECISION_NAMES), "--precision": alias("--higher", values=PRECISION_NAMES),
    "--min-good": same(), "--minimal-good": alias("--min-good"),
    "--no-reduce-inputs": na("debug reduce --mode chooses what is cut (nodes, or graph inputs too)"),
    "--no-reduce-outputs": na("debug reduce --mode chooses what is cut (nodes, or graph inputs too)"),
}

# where one Polygraphy flag means something else in one command
OVERRIDES = {
    ("debug reduce", "--mode"): na("Polygraphy's --mode picks the search (bisect|linear); debugkit's reduce always "
                                   "runs ddmin (a 1-minimal subgraph) and its --mode picks what is cut"),
    ("debug precision", "--dir"): alias("--direction"),
    ("inspect diff-tactics", "--dir"): na("give the replay files with --good and --bad"),
    ("debug reduce", "--model-input-shapes"): alias("--input-shapes"),
    ("debug reduce", "--model-inputs"): alias("--input-shapes"),
    ("surgeon extract", "--inputs"): same(), ("surgeon insert", "--inputs"): same(),
}

# Polygraphy commands debugkit does not have, and why
MISSING_COMMANDS = {
    "inspect sparsity": "no sparse tactics: 2:4 structured sparsity is a tensor-core feature debugkit does not model",
    "surgeon prune": "no sparse tactics: 2:4 structured sparsity is a tensor-core feature debugkit does not model",
    "surgeon weight-strip": "plans always carry their weights (no weightless engines to refit)",
    "surgeon weight-reconstruct": "plans always carry their weights (no weightless engines to refit)",
}


def entry(command: str, flag: str) -> Entry | None:
    return OVERRIDES.get((command, flag)) or FLAGS.get(flag)


def _subparser(parser, path):
    """The (sub)parser for `path` (["debug", "precision"]), or None."""
    for name in path:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or name not in subs[0].choices:
            return None
        parser = subs[0].choices[name]
    return parser


def command_of(argv, parser):
    """(command path, index of its first option) of an argv: 'run', 'debug precision', ..."""
    path = []
    p = parser
    for tok in argv:
        sub = _subparser(p, [tok])
        if sub is None:
            break
        path.append(tok)
        p = sub
    return path, len(path)


def options_of(parser) -> set:
    return {o for a in parser._actions for o in a.option_strings}


def resolve(command: str, flag: str, ours: set):
    """What this Polygraphy flag becomes in `command`: ("ok"|"rewrite"|"explain", Entry, target)."""
    e = entry(command, flag)
    if e is None:
        return None
    if e.kind == "na":
        return ("explain", e, None)
    if flag in ours:
        return ("ok", e, flag)
    if e.kind == "same":
        return ("explain", e, None)
    if e.kind == "alias":
        target = next((t for t in e.targets if t in ours or t.startswith("-q")), None)
        return ("rewrite", e, target) if target else ("explain", e, None)
    if e.kind == "special":
        first = e.rewrite(["x"])[0]
        return ("rewrite", e, None) if first in ours else ("explain", e, None)
    if e.kind == "drop":
        return ("rewrite", e, None)
    return ("explain", e, None)


def translate(argv, parser) -> list:
    """argv with Polygraphy spellings rewritten to ours (for the command argv names); everything else unchanged.
    The tokens after `--check` (a command line of its own) are left alone."""
    argv = list(argv)
    path, start = command_of(argv, parser)
    sub = _subparser(parser, path) if path else None
    if sub is None:
        return argv
    command, ours = " ".join(path), options_of(sub)
    out, i = argv[:start], start
    while i < len(argv):
        tok = argv[i]
        if tok == "--check":
            return out + argv[i:]
        flag, eq, inline = tok.partition("=")
        if tok.startswith("-") and flag in ours:   # ours: only Polygraphy's value names are translated
            e = entry(command, flag)
            out.append(tok)
            i += 1
            while e is not None and e.values and i < len(argv) and not argv[i].startswith("-"):
                out.append(_map_value(argv[i], e.values))
                i += 1
            continue
        r = resolve(command, flag, ours) if tok.startswith("-") else None
        if r is None or r[0] != "rewrite":
            out.append(tok)
            i += 1
            continue
        _, e, target = r
        values = [inline] if eq else []
        j = i + 1
        if not eq:
            while j < len(argv) and not (argv[j].startswith("-") and len(argv[j]) > 1 and not _number(argv[j])):
                values.append(argv[j])
                j += 1
            if e.kind == "alias" and not _takes_values(sub, target):
                values, j = [], i + 1
        values = [_map_value(v, e.values) for v in values]
        if e.kind == "special":
            out += e.rewrite(values)
        elif e.kind == "alias":
            out += [target, *values]
        i = j
    return out


def _number(tok) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _takes_values(parser, flag) -> bool:
    for a in parser._actions:
        if flag in a.option_strings:
            return a.nargs != 0
    return flag.startswith("-q") is False


def _map_value(v, table):
    if not table:
        return v
    if v in table:
        return table[v]
    for k, new in table.items():   # in-value names, e.g. --layer-precisions conv1:float16
        if k.startswith(":"):
            v = v.replace(k, new)
    return v


def explain(command: str, flag: str, parser=None) -> str | None:
    """The line for a Polygraphy flag this command does not take, or None when `flag` is not Polygraphy's."""
    flag = flag.partition("=")[0]
    e = entry(command, flag)
    if e is None:
        return None
    ours = options_of(_subparser(parser, command.split())) if parser is not None else set()
    r = resolve(command, flag, ours)
    if r is not None and r[0] != "explain":
        return None
    return f"{flag} is Polygraphy's; not applicable to debugkit {command}: {e.reason or 'no counterpart'}"


def markdown(polygraphy_flags: dict, parser) -> str:
    """The migration table: every Polygraphy (command, flag) with what it is here."""
    rows = []
    for command, flags in polygraphy_flags.items():
        if command in MISSING_COMMANDS:
            rows.append((command, "(the command)", f"not applicable, because {MISSING_COMMANDS[command]}"))
            continue
        sub = _subparser(parser, command.split())
        ours = options_of(sub) if sub is not None else set()
        for opts in flags:
            cells = []
            for flag in opts:
                r = resolve(command, flag, ours)
                if r is None:
                    cells.append("**missing from the table**")
                    continue
                kind, e, target = r
                if kind == "ok":
                    cells.append("same")
                elif kind == "rewrite" and e.kind == "drop":
                    cells.append(f"accepted; {e.reason}")
                elif kind == "rewrite" and e.kind == "special":
                    cells.append("`" + " ".join(e.rewrite(["VALUE"])).replace("VALUE", "...") + "`"
                                 + (" (`mark all` → `--mark-all`)" if e.rewrite is _mark else ""))
                elif kind == "rewrite":
                    vals = f" (values: {', '.join(f'{k} → {v}' for k, v in e.values.items())})" if e.values else ""
                    cells.append(f"`{target}`{vals}")
                else:
                    cells.append(f"not applicable, because {e.reason or 'no counterpart'}")
            what = cells[0] if len(set(cells)) == 1 else "; ".join(f"{o}: {c}" for o, c in zip(opts, cells))
            rows.append((command, ", ".join(f"`{o}`" for o in opts), what))
    lines = ["| polygraphy | flag | debugkit |", "|---|---|---|"]
    lines += [f"| {c} | {f} | {w} |" for c, f, w in rows]
    return "\n".join(lines)
