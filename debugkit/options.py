"""Every command's options, declared once: build, data, comparison, logging and output groups, parsed into `Options`.

A command composes groups (`add_groups(parser, "build", "data", "compare")`, `add_outputs(parser, "output", ...)`)
and never declares a flag of its own that a group already has; `Options.from_args(args)` turns the parsed namespace
into typed, frozen dataclasses, and every command hands `options.build` to the builder unchanged
(`BuildOptions.builder_config()`), so a flag cannot be honoured by one command and dropped by another.

Spellings: each option is one row of a table (`BUILD`, `DATA`, `COMPARE`, `OUTPUTS`): its dest, its flags, its
argparse keywords. `ALIASES` maps other spellings (Polygraphy's, older ones of ours) to a dest; an alias marked
deprecated still works and says once which spelling replaced it. Adding an alias is one line there.

`Options.fingerprint()` is the hash of every value that can change an answer (all groups but logging and outputs)
plus the content of every file those values name (loaded inputs, loader scripts, precision files, replay files,
timing and calibration caches) and the source of every user module: what plans, probe logs and reports record, and
what `--resume` compares. `Options.describe()` is the same information as {option: value} for naming what differs.
`PATH_OPTIONS` declares what a command does with every option that names a file (read, write, update, append, a
folder); `declared_paths()` and `Options.paths()` list them: the one table of the output == input check
(debugkit/cli/file_claims.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field

from native.errors import UsageError


@dataclass(frozen=True)
class Opt:
    """One option: its dest, its flags (the first long one is the canonical spelling) and argparse keywords."""

    dest: str
    flags: tuple
    kwargs: dict = field(default_factory=dict)


def _device_arg(text):
    """--device NAME: the Device, resolved once (an unknown name is a usage error naming the known ones)."""
    from debugkit.cli._args import device_arg
    return device_arg(text)


class _GivenDevice(argparse.Action):
    """--device, remembering that it was given (a loaded plan's device must then match it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, "_device_given", True)


def _o(dest, *flags, **kw):
    return Opt(dest, tuple(flags), kw)


def _section(title):
    """A row that only starts a new section of --help."""
    return Opt("# " + title, ())


PRECISIONS = ("fp16", "bf16", "int8", "fp8")
CALIBRATION_ALGORITHMS = ("entropy2", "minmax", "entropy", "percentile")
COMPARE_FUNCS = ("simple", "indices", "l2", "cosine", "psnr", "snr")

# --- the build group: everything the builder sees ---------------------------------------------------------------
BUILD = [
    _o("fp16", "--fp16", action="store_true", help="allow FP16 layers (default: FP32 only)"),
    _o("bf16", "--bf16", action="store_true", help="allow BF16 layers"),
    _o("int8", "--int8", action="store_true", help="allow INT8 layers"),
    _o("fp8", "--fp8", action="store_true", help="allow FP8 (E4M3) conv/matmul, FP16 for the other layers"),
    _o("tf32", "--tf32", action="store_true", default=False,
       help="round conv/matmul operands to TF32 as tensor cores do (off by default, as in Polygraphy, so that an "
            "FP32 build compares as FP32)"),
    _o("tf32", "--no-tf32", action="store_false", help="FP32 conv/matmul without TF32 (default)"),
    _o("precision_constraints", "--precision-constraints", choices=["none", "prefer", "obey"], default=None,
       help="how layer precision constraints bind: obey (an impossible one is an error), prefer (a warning), none "
            "(honoured only where not slower); default prefer when --layer-precisions or --layer-output-types is "
            "given, else none"),
    _o("layer_precisions", "--layer-precisions", nargs="+", default=[], metavar="NAME:PREC[,...]|FILE.json",
       help="per-layer compute precision, e.g. '*:fp16,/conv1/Conv:fp32' (layer or ONNX node names, wildcards; left "
            "to right, later wins; fp32|fp16|bf16|int8|fp8), or a JSON file"),
    _o("layer_output_types", "--layer-output-types", nargs="+", default=[], metavar="NAME:TYPE[+TYPE][,...]|FILE.json",
       help="per-layer output storage types, e.g. '*:fp16,head:fp32' ('+' separates outputs)"),
    _o("reduced_probability_outputs", "--reduced-probability-outputs", action="store_true",
       help="let the layers that compute Sigmoid/Softmax/Exp network outputs run in FP16/BF16 too (by default they "
            "run in FP32: FP16 stores small probabilities as subnormals; docs/PRECISION.md)"),
    _o("disable_fusion", "--disable-fusion", action="store_true", help="keep every layer as parsed"),
    _o("device", "--device", default="cpu", type=_device_arg, action=_GivenDevice, metavar="{cpu,cuda,dla}",
       help="device to build for (default cpu); with a loaded plan, where it must have been built"),
    _o("shape_profiles", "--shape-profiles", nargs="+", default=[], metavar="NAME:[MIN]:[OPT]:[MAX]",
       help="an optimization profile (shape range) per dynamic input, e.g. "
            "x:[1,3,64,64]:[1,3,224,224]:[4,3,512,512]"),
    _section("INT8 calibration"),
    _o("calibration_cache", "--calibration-cache", metavar="FILE",
       help="INT8 calibration cache (TensorRT's text format): read when it exists (no calibration), written after "
            "calibrating otherwise"),
    _o("calibration_algorithm", "--calibration-algorithm", choices=CALIBRATION_ALGORITHMS, default="entropy2",
       help="how scales are derived from the calibration data (default entropy2, as TensorRT's "
            "IInt8EntropyCalibrator2)"),
    _o("calibration_percentile", "--calibration-percentile", type=float, default=99.99, metavar="P",
       help="for --calibration-algorithm percentile: the percentile of |x| kept (default 99.99)"),
    _o("qdq_emulation", "--qdq-emulation", choices=["onnxruntime-x86"], default=None,
       help="run a Q/DQ model as ONNX Runtime's x86-64 CPU EP does (the Q/DQ groups it keeps in FP32 stay FP32, "
            "summed in MLAS's order), to compare with it bit for bit; reproduces onnxruntime 1.30.0 and 1.32.0 "
            "(verified; other releases may differ by a rounding step); its fused integer kernels are not emulated "
            "(see docs/PRECISION.md); default: TensorRT's fusion, every group INT8"),
    _section("tactics and timing"),
    _o("tactics_module", "--tactics-module", action="append", default=[], metavar="FILE.py",
       help="import a Python file that registers Tactic subclasses (native.tactics.register_tactic); repeatable"),
    _o("tactic_sources", "--tactic-sources", metavar="[+-]NAME,...",
       help="NAME,...: restrict every layer kind that has a tactic of these names to them (e.g. im2col-gemm,blas); "
            "-NAME: never use NAME; +NAME: add NAME to the list (docs/tactics.md)"),
    _o("save_tactics", "--save-tactics", metavar="F.json", help="record every layer's tactic in a replay file"),
    _o("load_tactics", "--load-tactics", metavar="F.json", help="build with the tactics a replay file recorded"),
    _o("timing_cache", "--timing-cache", metavar="F",
       help="read tactic timings from F (when it exists) and write the updated cache back after the build"),
    _o("ignore_timing_cache_mismatch", "--ignore-timing-cache-mismatch", action="store_true",
       help="use a timing cache measured on another device or config anyway"),
    _o("avg_timing_iterations", "--avg-timing-iterations", type=int, default=None, metavar="N",
       help="timed runs per candidate tactic (default 4)"),
    _o("workspace", "--workspace", type=int, default=None, metavar="BYTES",
       help="workspace limit: tactics that need more scratch memory are not considered"),
    _o("tactic_heuristic", "--tactic-heuristic", action="store_true",
       help="pick tactics without timing (the first registered tactic that supports each layer)"),
    _section("the emulated DLA (docs/DLA.md)"),
    _o("use_dla_core", "--use-dla-core", type=int, metavar="N",
       help="run every layer the emulated DLA supports on DLA core N (FP16/INT8 only)"),
    _o("allow_gpu_fallback", "--allow-gpu-fallback", action="store_true",
       help="layers the DLA cannot run stay on the host device (else the build fails naming them)"),
    _o("layer_device_types", "--layer-device-types", nargs="+", default=[], metavar="NAME:dla|gpu[,...]",
       help="device type per layer (engine layer or ONNX node name)"),
    _o("dla_profile", "--dla-profile", default="orin", choices=["orin", "xavier"], help="DLA profile"),
]

# --- the data group: which inputs are fed -----------------------------------------------------------------------
DATA = [
    _o("seed", "--seed", type=int, default=1, help="seed for generated inputs (default 1)"),
    _o("val_range", "--val-range", nargs="+", default=[], metavar="[LO,HI]|NAME:[LO,HI]",
       help="value range of generated inputs, for all inputs or per input (default [0,1])"),
    _o("input_shapes", "--input-shapes", nargs="+", default=[], metavar="NAME:[D0,D1,...]",
       help="shapes for inputs with dynamic dims (dynamic dims default to 1)"),
    _o("iterations", "--iterations", type=int, default=1, help="number of generated feeds (default 1)"),
    _o("data_generator", "--data-generator", choices=["debugkit", "polygraphy"], default=None,
       help="how inputs are generated from --seed: debugkit (one stream per input) or polygraphy (the values "
            "Polygraphy's default data loader makes); default debugkit, polygraphy when --save-outputs/--save-inputs "
            "is a .json file"),
    _o("data_loader_script", "--data-loader-script", metavar="FILE.py[:FUNC]",
       help="a Python function that returns or yields {input: array} dicts (FUNC defaults to load_data)"),
    _o("load_inputs", "--load-inputs", metavar="FILE.h5|FILE.json",
       help="inputs saved by --save-inputs (ours, HDF5, or Polygraphy's JSON)"),
]

# --- the comparison group: how outputs are judged ---------------------------------------------------------------
class _Given(argparse.Action):
    """store, and remember that the option was given (for the warning about an option whose check is off)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "_given", None) or ())
        given.add(self.dest)
        setattr(namespace, "_given", given)


COMPARE = [
    _o("atol", "--atol", nargs="+", default=[], metavar="[NAME:]VALUE",
       help="absolute tolerance, global or per output (default by dtype: fp32 1e-5 x max|reference|; docs/run.md)"),
    _o("rtol", "--rtol", nargs="+", default=[], metavar="[NAME:]VALUE",
       help="relative tolerance, global or per output (default by dtype: fp32 1e-3)"),
    _o("check_error_stat", "--check-error-stat", nargs="+", default=[], metavar="[NAME:]STAT",
       help="elemwise (default), max, mean, median or quantile"),
    _o("error_quantile", "--error-quantile", nargs="+", default=[], metavar="[NAME:]Q",
       help="quantile for --check-error-stat quantile, global or per output (default 0.99)"),
    _o("compare", "--compare", nargs="+", default=[], choices=list(COMPARE_FUNCS),
       help="extra checks on the outputs besides simple (all must pass)"),
    _o("index_tolerance", "--index-tolerance", nargs="+", default=[], metavar="[NAME:]N",
       help="for --compare indices: how many positions an index may move, global or per output (the output's last "
            "N entries are not checked; default 0)"),
    _o("postprocess", "--postprocess", nargs="+", default=[], metavar="[NAME:]top-K[,axis=A]|[NAME:]argmax",
       help="applied to both sides' outputs before comparing (Polygraphy's spelling), e.g. top-5, "
            "logits:top-1,axis=1, argmax; with --compare indices the indices are checked with --index-tolerance "
            "instead of exactly"),
    _o("check_shapes", "--no-check-shapes", action="store_false", default=True,
       help="compare outputs whose shapes differ but whose element counts match (a (1, 4) output with a (4,) one), "
            "reshaped to the reference's shape"),
    _o("l2_threshold", "--l2-threshold", type=float, default=1e-2, action=_Given,
       help="for --compare l2 (default 1e-2)"),
    _o("cosine_threshold", "--cosine-threshold", type=float, default=0.999, action=_Given,
       help="for --compare cosine (default 0.999)"),
    _o("psnr_threshold", "--psnr-threshold", type=float, default=30.0, action=_Given,
       help="for --compare psnr (default 30)"),
    _o("snr_threshold", "--snr-threshold", type=float, default=20.0, action=_Given,
       help="for --compare snr (default 20)"),
    _o("allow_nan", "--allow-nan", action="store_true", help="NaNs in the same place on both sides compare equal"),
    _o("strict_inf", "--strict-inf", action="store_true",
       help="matching infinities compare unequal (default: equal)"),
    _o("validate", "--validate", action="store_true",
       help="fail on NaN/Inf in any output; with --mark-all, name the first tensor and node that made one"),
]
# option -> the --compare check it configures (Polygraphy warns about such an option when its check is not selected)
OPTION_OF_CHECK = {"index_tolerance": "indices", "l2_threshold": "l2", "cosine_threshold": "cosine",
                   "psnr_threshold": "psnr", "snr_threshold": "snr"}

# --- output options: each command picks the ones it writes (and may set its own default/help) -------------------
OUTPUTS = {
    "output": _o("output", "-o", "--output", metavar="FILE", help="the command's main output"),
    "gen_script": _o("gen_script", "--gen-script", metavar="FILE.py",
                     help="write a Python script that does what this command does, with debugkit's API, instead of "
                          "running it (as Polygraphy's --gen-script)"),
    "artifacts_dir": _o("artifacts_dir", "--artifacts-dir", metavar="DIR", help="where artifacts go"),
    "json": _o("json", "--json", metavar="FILE|-",
               help="write the verdict as JSON; '-' for stdout (the report then goes to stderr)"),
    "save_engine": _o("save_engine", "--save-engine", metavar="FILE.plan", help="save the built plan"),
    "save_inputs": _o("save_inputs", "--save-inputs", metavar="FILE.h5", help="save the inputs fed"),
    "save_outputs": _o("save_outputs", "--save-outputs", metavar="FILE.h5",
                       help="outputs (and layerwise tensors) of every runner"),
    "timeline": _o("timeline", "--timeline", metavar="FILE.json",
                   help="write a timeline of executions (layers, copies, host syncs) as a Chrome trace JSON "
                        "(chrome://tracing, ui.perfetto.dev)"),
}

# --- bench's throughput options (trtexec's --streams) -------------------------------------------------------------
BENCH = [
    _o("streams", "--streams", type=int, default=1, metavar="N",
       help="N execution contexts in flight at once, each on its own host thread (and stream, on a device that "
            "has several); throughput is the aggregate of all of them (default 1)"),
]

# other spellings -> (dest, deprecated?). Polygraphy's spellings that mean the same thing belong here too.
ALIASES = {
    "--art-dir": ("artifacts_dir", False),           # Polygraphy's spelling
    "--report": ("json", True),                      # debug tactics --report R.json: the verdict as JSON
}
# spellings that stay deprecated aliases inside one command only (their meaning there was unambiguous)
COMMAND_ALIASES = {
    "convert": {"--profile": ("shape_profiles", True)},
    "run": {"--profile": ("profile_layers", True)},
    "inspect capability": {"--profile": ("dla_profile", True)},
    "sweep": {"--output-dir": ("output", False)},
}

GROUPS = {"build": BUILD, "data": DATA, "compare": COMPARE, "bench": BENCH}
GROUP_TITLES = {"build": "engine build", "data": "data loader", "compare": "comparison", "bench": "throughput"}


class _DeprecatedAlias(argparse.Action):
    """An old spelling: does what the new one does, and says once which spelling replaced it."""

    def __init__(self, option_strings, dest, real=None, **kw):
        self.real = real
        if real is not None:
            kw.setdefault("nargs", real.nargs)
            for k in ("const", "type", "choices", "metavar"):
                kw.setdefault(k, getattr(real, k))
        kw["help"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from native.logger import G_LOGGER
        new = next((o for o in self.real.option_strings if o.startswith("--")), self.real.option_strings[0])
        G_LOGGER.warning(f"{option_string} is deprecated; use {new} (same meaning)")
        self.real(parser, namespace, values, new)


def _add(group, opt: Opt, *, existing: set, overrides=None):
    kw = dict(opt.kwargs)
    kw.update(overrides or {})
    flags = [f for f in opt.flags if f not in existing]
    if not flags:
        return None
    action = group.add_argument(*flags, dest=opt.dest, **kw)
    existing.update(flags)
    return action


def add_groups(parser, *names, defaults=None, omit=()):
    """Add the named option groups ("build", "data", "compare", "logging") to `parser`; `defaults` overrides a
    dest's default for this command, `omit` leaves dests out (a command that has no use for them)."""
    existing = set(parser._option_string_actions)
    for name in names:
        if name == "logging":
            from debugkit.cli._args import add_common_args
            add_common_args(parser)
            continue
        g = parser.add_argument_group(GROUP_TITLES[name])
        for opt in GROUPS[name]:
            if opt.dest.startswith("#"):
                g = parser.add_argument_group(opt.dest[1:].strip())
                continue
            if opt.dest in omit:
                continue
            over = {"default": defaults[opt.dest]} if defaults and opt.dest in defaults and "default" in opt.kwargs \
                else None
            _add(g, opt, existing=existing, overrides=over)
        if name == "build":
            g.add_argument("--ignore-fingerprint", action=_IgnoreFingerprint, nargs=0,
                           help="load a plan built on another machine (its recorded device fingerprint differs); "
                                "safe for CPU plans moved between machines of one architecture family")
    _add_aliases(parser)
    return parser


def add_outputs(parser, *names, **per_name):
    """Add output options by name; per_name["output"] = {"default": ..., "help": ..., "required": ...}."""
    existing = set(parser._option_string_actions)
    g = parser.add_argument_group("outputs")
    for name in names:
        _add(g, OUTPUTS[name], existing=existing, overrides=per_name.get(name))
    _add_aliases(parser)
    return g


def add_option(parser, dest, **overrides):
    """Add one option of a group (by dest) to a command that takes only that one, e.g. `template data-loader`'s
    --input-shapes: the same flags, help and parsing as everywhere else."""
    opt = next(o for g in GROUPS.values() for o in g if o.dest == dest)
    return _add(parser, opt, existing=set(parser._option_string_actions), overrides=overrides)


def add_aliases(parser, command: str | None = None):
    """The aliases of ALIASES (and COMMAND_ALIASES[command]) whose dest this parser has."""
    _add_aliases(parser, command)


def _add_aliases(parser, command=None):
    table = dict(ALIASES)
    table.update(COMMAND_ALIASES.get(command or "", {}))
    by_dest = {}
    for a in parser._actions:
        if a.option_strings and not isinstance(a, _DeprecatedAlias):
            by_dest.setdefault(a.dest, a)
    for flag, (dest, deprecated) in table.items():
        if flag in parser._option_string_actions or dest not in by_dest:
            continue
        real = by_dest[dest]
        if deprecated:
            parser.add_argument(flag, dest=dest, action=_DeprecatedAlias, real=real, default=real.default)
        else:
            real.option_strings.append(flag)
            parser._option_string_actions[flag] = real


class _IgnoreFingerprint(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        from native.config import settings
        settings().check_fingerprint = False
        setattr(namespace, "ignore_fingerprint", True)


# --- the files options name, and what the command does with them -------------------------------------------------
@dataclass(frozen=True)
class PathRole:
    """What a command does with the path(s) an option names.

    role: "read" (an input), "write" (an output file, replaced whole), "update" (a cache read when it exists and
    rewritten), "append" (a log any number of runs add to), "write-dir" (a folder the command fills), "read-dir"
    (a folder it reads from). `flag` names the option in messages; `streamable`: a write that may go to stdout, a
    device or a FIFO; `side_kind`: the side-file kind (native/files/side_input.py) checked before any work."""

    role: str
    flag: str
    streamable: bool = False
    side_kind: str | None = None


def _r(flag, side_kind=None):
    return PathRole("read", flag, side_kind=side_kind)


def _w(flag, streamable=True):
    return PathRole("write", flag, streamable)


# every option (of every command) that names a file or folder, by dest: the one table that the output == input
# check (debugkit/cli/file_claims.py) and Options.paths() read. An option that names no file is in VALUE_OPTIONS;
# tests/debugkit/test_file_claims_matrix.py fails for a flag that is in neither.
PATH_OPTIONS = {
    "model": _r("model"), "models": _r("model"), "path": _r("input"),
    "load_inputs": _r("--load-inputs", "data file"), "load_outputs": _r("--load-outputs", "data file"),
    "load_tactics": _r("--load-tactics", "tactic replay file"), "load_engine": _r("--load-engine"),
    "data_loader_script": _r("--data-loader-script", "data loader script"), "tactics_module": _r("--tactics-module"),
    "models_file": _r("--models-file"), "good": _r("--good"), "bad": _r("--bad"), "artifacts": _r("--artifacts"),
    "good_tactics": _r("--good-tactics"), "bad_tactics": _r("--bad-tactics"),
    "layer_precisions": _r("--layer-precisions"), "layer_output_types": _r("--layer-output-types"),
    "external_data_dir": PathRole("read-dir", "--external-data-dir"),
    "output": _w("-o"), "save_engine": _w("--save-engine"), "save_inputs": _w("--save-inputs", False),
    "save_outputs": _w("--save-outputs", False), "json": _w("--json"), "report": _w("--report"),
    "save_tactics": _w("--save-tactics"), "dump_profile": _w("--dump-profile"), "min_good": _w("--min-good"),
    "gen_script": _w("--gen-script"), "save_external_data": _w("--save-external-data", False),
    "timeline": _w("--timeline"),
    "artifacts_dir": PathRole("write-dir", "--artifacts-dir"), "save_subgraphs": PathRole("write-dir",
                                                                                         "--save-subgraphs"),
    "timing_cache": PathRole("update", "--timing-cache", side_kind="timing cache"),
    "calibration_cache": PathRole("update", "--calibration-cache", side_kind="calibration cache"),
    "log": PathRole("update", "--log"),
    "log_file": PathRole("append", "--log-file"),
}
# a command whose option means another kind of path there
COMMAND_PATH_OPTIONS = {"sweep": {"output": PathRole("write-dir", "-o")}}
# the options that name no file (checked by the same test: every option is in exactly one of the two)
VALUE_OPTIONS = {
    "fp16", "bf16", "int8", "fp8", "tf32", "precision_constraints", "reduced_probability_outputs", "disable_fusion",
    "device", "shape_profiles", "calibration_algorithm", "calibration_percentile", "qdq_emulation",
    "tactic_sources", "ignore_timing_cache_mismatch", "avg_timing_iterations", "workspace", "tactic_heuristic",
    "use_dla_core", "allow_gpu_fallback", "layer_device_types", "dla_profile", "ignore_fingerprint", "streams",
    "seed", "val_range", "input_shapes", "iterations", "data_generator",
    "atol", "rtol", "check_error_stat", "error_quantile", "compare", "index_tolerance", "postprocess",
    "check_shapes", "l2_threshold", "cosine_threshold", "psnr_threshold", "snr_threshold", "allow_nan",
    "strict_inf", "validate",
    # command-specific
    "attrs", "check", "check_timeout", "direction", "domain", "duration", "exclude_outputs",
    "external_data_size_threshold", "fail_code", "fail_regex", "fold_size_threshold", "higher", "inputs",
    "layer_scale_tol", "mark", "max_iterations", "mode", "model_input_shapes", "name", "num_passes", "op", "outputs",
    "override_input_shapes", "ray", "reference", "show", "task", "task_args", "until", "warm_up", "workers",
}


def script_file(spec):
    """'loader.py:func' -> 'loader.py' (the file part of a data loader script spec)."""
    spec = os.fspath(spec)
    if os.path.exists(spec) or ":" not in spec:
        return spec
    return spec.rsplit(":", 1)[0]


def _path_values(dest, v):
    """The paths an option's value names: lists flattened, flags and empty values dropped, a loader script's
    ':func' cut off, and only the .json entries of the precision specs (the others are NAME:PREC text)."""
    if v is None or isinstance(v, bool):
        return []
    items = [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, (str, os.PathLike)) and x]
    if dest in ("layer_precisions", "layer_output_types"):
        items = [x for x in items if str(x).endswith(".json")]
    if dest == "data_loader_script":
        items = [script_file(x) for x in items]
    return items


def path_role(dest, command=""):
    """The PathRole of `dest` in `command` ("sweep", "debug reduce", ...), or None for a value option."""
    top = (command or "").split(" ")[0]
    return COMMAND_PATH_OPTIONS.get(command, COMMAND_PATH_OPTIONS.get(top, {})).get(dest) or PATH_OPTIONS.get(dest)


def declared_paths(values: dict, command: str = "") -> dict:
    """{"inputs", "outputs", "dirs", "updates", "appends", "read_dirs"}: (flag, path) pairs (outputs:
    (flag, path, streamable)) of every option in `values` (dest -> parsed value) by its PathRole, plus the files a
    command writes beside its main output (`companion_outputs`)."""
    out = {k: [] for k in ("inputs", "outputs", "dirs", "updates", "appends", "read_dirs")}
    key = {"read": "inputs", "write": "outputs", "write-dir": "dirs", "update": "updates", "append": "appends",
           "read-dir": "read_dirs"}
    for dest, v in values.items():
        role = path_role(dest, command)
        if role is None or dest == "save_external_data":   # a name in -o's folder: companion_outputs
            continue
        for p in _path_values(dest, v):
            if dest == "log" and "<output>" in str(p) and isinstance(values.get("output"), str):
                p = str(p).replace("<output>", os.path.splitext(values["output"])[0])   # debug precision's default
            if role.role == "write":
                if dest == "json" and p == "-":
                    continue   # stdout: nothing on disk to protect
                out["outputs"].append((role.flag, p, role.streamable or str(p).endswith(".json")))
            else:
                out[key[role.role]].append((role.flag, p))
    out["outputs"] += companion_outputs(values, command)
    o = values.get("output")
    if command == "debug precision" and values.get("int8") and not values.get("calibration_cache") and \
            isinstance(o, str) and o:   # its calibration cache, made beside -o when none is given
        out["updates"].append(("-o's calibration cache", os.path.splitext(o)[0] + "_calibration.cache"))
    return out


def companion_outputs(values: dict, command: str = "") -> list:
    """Files a command writes beside its main output: the debug searches' HTML report (-o x.json -> x.html),
    debug precision's sensitivity table (x_sensitivity.json/.svg), debug reduce's inputs file (-o m.onnx -> m_inputs.h5, --min-good likewise), surgeon's external weights
    (--save-external-data NAME, a name in -o's folder; empty: <-o>.data)."""
    out = []
    top = (command or "").split(" ")[0]
    o = values.get("output")
    if top == "debug" and isinstance(o, str) and o and o != "-":
        out.append(("report", os.path.splitext(o)[0] + ".html", True))
    if command == "debug precision" and isinstance(o, str) and o and o != "-":
        out += [("-o's sensitivity table", os.path.splitext(o)[0] + "_sensitivity" + ext, True)
                for ext in (".json", ".svg")]
    if command == "debug reduce":
        for flag, p in (("-o", o), ("--min-good", values.get("min_good"))):
            if isinstance(p, str) and p and p != "-":
                out.append((f"{flag}'s inputs file", os.path.splitext(p)[0] + "_inputs.h5", False))
    ext = values.get("save_external_data")
    if top == "surgeon" and ext is not None and isinstance(o, str) and o:
        name = ext or os.path.basename(o) + ".data"
        out.append(("--save-external-data", os.path.join(os.path.dirname(os.path.abspath(o)), name), False))
    return out


# --- typed values --------------------------------------------------------------------------------------------------

def _fields_from(cls, args, **extra):
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in extra:
            kw[f.name] = extra[f.name]
            continue
        if not hasattr(args, f.name):
            if f.default is not dataclasses.MISSING:
                v = f.default
            elif f.default_factory is not dataclasses.MISSING:   # type: ignore[misc]
                v = f.default_factory()
        else:
            v = getattr(args, f.name)
        kw[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kw)


def file_digest(path) -> str | None:
    """sha256 of a regular file's bytes (None when it does not exist or is not a regular file)."""
    try:
        if not os.path.isfile(path):
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def _spec_files(items) -> list:
    """Files named by NAME:VALUE-or-FILE lists (--layer-precisions p.json)."""
    return [x for x in items or () if isinstance(x, str) and x.endswith(".json") and os.path.isfile(x)]


@dataclass(frozen=True)
class BuildOptions:
    """The build group, as the builder gets it (`builder_config()`); picklable, so probes in workers build alike."""

    fp16: bool = False
    bf16: bool = False
    int8: bool = False
    fp8: bool = False
    tf32: bool = False
    precision_constraints: str | None = None
    layer_precisions: tuple = ()
    layer_output_types: tuple = ()
    reduced_probability_outputs: bool = False
    disable_fusion: bool = False
    device: str | None = "cpu"
    shape_profiles: tuple = ()
    calibration_cache: str | None = None
    calibration_algorithm: str = "entropy2"
    calibration_percentile: float = 99.99
    qdq_emulation: str | None = None
    tactics_module: tuple = ()
    tactic_sources: str | None = None
    save_tactics: str | None = None
    load_tactics: str | None = None
    timing_cache: str | None = None
    ignore_timing_cache_mismatch: bool = False
    avg_timing_iterations: int | None = None
    workspace: int | None = None
    tactic_heuristic: bool = False
    use_dla_core: int | None = None
    allow_gpu_fallback: bool = False
    layer_device_types: tuple = ()
    dla_profile: str = "orin"

    @classmethod
    def from_args(cls, args) -> "BuildOptions":
        return _fields_from(cls, args)

    def replace(self, **changes) -> "BuildOptions":
        return dataclasses.replace(self, **changes)

    def flags(self) -> list:
        """The BuilderFlag values the precision options turn on (fp16, int8, ..., disable_fusion)."""
        return [n for n in ("fp16", "bf16", "int8", "fp8", "tf32", "reduced_probability_outputs", "disable_fusion")
                if getattr(self, n)]

    def precisions(self) -> list:
        return [p for p in PRECISIONS if getattr(self, p)]

    def shape_ranges(self) -> dict:
        """--shape-profiles as {input: (min, opt, max)}."""
        return parse_profiles(self.shape_profiles)

    def load_modules(self):
        from native.tactic_modules import load_tactics_module
        for path in self.tactics_module:
            load_tactics_module(path)

    def builder_config(self, *, data: "DataOptions | None" = None, model_path=None, fingerprint=None):
        """A fresh BuilderConfig with every build option applied (tactics modules are imported first).
        data/model_path: what INT8 calibration reads when it must calibrate (run's feeds)."""
        from backends.engine.builder import BuilderConfig, BuilderFlag, MemoryPoolType
        from backends.engine.builder.algorithm_selector import SelectorChain
        from backends.engine.builder.precision_spec import parse_layer_output_types, parse_layer_precisions
        from backends.engine.builder.tactic_replay import TacticRecorder, TacticReplayer
        from backends.engine.builder.timing_cache_file import load_timing_cache
        self.load_modules()
        config = BuilderConfig()
        for f in self.flags():
            config.set_flag(BuilderFlag(f))
        config.layer_precisions = parse_layer_precisions(list(self.layer_precisions) or None)
        config.layer_output_types = parse_layer_output_types(list(self.layer_output_types) or None)
        mode = self.precision_constraints
        if mode is None and (config.layer_precisions or config.layer_output_types):
            mode = "prefer"
        if mode == "prefer":
            config.set_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
        elif mode == "obey":
            config.set_flag(BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        config.device = self.device or config.device
        config.tactic_sources = _parse_sources(self.tactic_sources, config.device)
        if self.avg_timing_iterations is not None:
            if self.avg_timing_iterations < 1:
                raise UsageError("--avg-timing-iterations must be >= 1")
            config.avg_timing_iterations = self.avg_timing_iterations
        if self.workspace is not None:
            config.set_memory_pool_limit(MemoryPoolType.WORKSPACE, self.workspace)
        if self.tactic_heuristic:
            config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
        selectors = []
        if self.load_tactics:
            selectors.append(TacticReplayer(self.load_tactics))
        if self.save_tactics:
            selectors.append(TacticRecorder(self.save_tactics, config.device))
        if self.timing_cache:
            config.timing_cache = load_timing_cache(self.timing_cache, config, self.ignore_timing_cache_mismatch)
            selectors.append(_SaveTimingCache(config, self.timing_cache))
        if selectors:
            config.algorithm_selector = SelectorChain(selectors + [config.algorithm_selector])
        self._apply_dla(config)
        self._apply_calibration(config, data, model_path)
        if fingerprint is not None:
            config.options_fingerprint = fingerprint
        return config

    def _apply_dla(self, config):
        from backends.engine.builder.config import BuilderFlag, DeviceType
        specs = [s for item in self.layer_device_types for s in item.split(",") if s]
        if self.use_dla_core is None and not specs:
            return
        config.dla_profile = self.dla_profile
        if self.use_dla_core is not None:
            config.default_device_type = DeviceType.DLA
            config.dla_core = self.use_dla_core
        for spec in specs:
            name, sep, dev = spec.rpartition(":")
            if not sep or dev.lower() not in ("dla", "gpu"):
                raise UsageError(f"--layer-device-types takes NAME:dla or NAME:gpu, got '{spec}'")
            config.set_device_type(name, DeviceType.DLA if dev.lower() == "dla" else DeviceType.GPU)
        if self.allow_gpu_fallback:
            config.set_flag(BuilderFlag.GPU_FALLBACK)

    def _apply_calibration(self, config, data, model_path):
        config.qdq_emulation = self.qdq_emulation
        if not self.int8:
            if self.calibration_cache:
                from native.logger import G_LOGGER
                G_LOGGER.warning("--calibration-cache has no effect without --int8")
            return
        from backends.engine import Calibrator
        config.int8_calibrator = Calibrator(_CalibrationBatches(data or DataOptions(), model_path),
                                            algorithm=self.calibration_algorithm, cache=self.calibration_cache,
                                            percentile=self.calibration_percentile)


class _SaveTimingCache:
    """Writes the timing cache file when the build reports its choices (the end of tactic selection)."""

    def __init__(self, config, path):
        self.config, self.path = config, path

    def select_algorithms(self, context, choices):
        return []

    def report_algorithms(self, contexts, choices):
        # merged under a lock: parallel search workers (and other runs) add to one file instead of overwriting
        from backends.engine.builder.timing_cache_file import merge_timing_cache
        if self.config.timing_cache is not None:
            merge_timing_cache(self.config.timing_cache, self.path, self.config)


class _CalibrationBatches:
    """The calibration batches, made only when the builder asks for them (never when a cache is read)."""

    def __init__(self, data, model_path):
        self.data, self.model_path = data, model_path

    def __iter__(self):
        from backends.runners import load_onnx
        from backends.runners.model import onnx_input_metadata
        from debugkit.data_loader import DataLoader, coerce_feeds
        if self.model_path is None:
            raise UsageError("INT8 calibration needs the ONNX model (give a calibration cache for a plan)")
        metadata = onnx_input_metadata(load_onnx(self.model_path))
        loader = self.data.loader(metadata)
        if isinstance(loader, DataLoader):
            from native.logger import G_LOGGER
            G_LOGGER.warning("INT8 calibration on seeded random data: the scales fit that data, not your inputs. "
                             "Pass real samples with --data-loader-script or --load-inputs (and more with "
                             "--iterations)")
        for feed in loader:
            yield coerce_feeds(feed, metadata)


def _parse_sources(text, device="cpu"):
    """--tactic-sources as the config holds it, its names checked against the tactics of the build's device (a CUDA
    build's `cublas` or `host:numpy`, a DLA build's `dla:*`: not only the CPU's)."""
    if text is None:
        return None
    from backends.engine.builder.tactic_sources import normalise
    from native.tactic_modules import known_tactic_names
    return normalise(str(text), known_tactic_names(str(device or "cpu")))


def parse_profiles(items) -> dict:
    """["x:[1,3,64,64]:[1,3,224,224]:[4,3,512,512]"] or "x:1x3x64x64:1x3x224x224:4x3x512x512" -> {x: (min, opt, max)}."""
    from debugkit.cli._args import parse_dims
    out = {}
    for item in items or ():
        if ":[" in item:
            name, _, rest = item.partition(":[")
            parts = ["[" + p if not p.startswith("[") else p for p in ("[" + rest).split(":")]
        else:
            name, *parts = item.rsplit(":", 3)
        if len(parts) != 3 or not name:
            raise UsageError(f"--shape-profiles expects NAME:[min]:[opt]:[max] or NAME:MINx..:OPTx..:MAXx.., got "
                             f"'{item}'")
        out[name] = tuple(parse_dims(p, what="--shape-profiles") for p in parts)
    return out


@dataclass(frozen=True)
class DataOptions:
    """The data group: seeded random feeds shaped and ranged, a loader script, or saved inputs."""

    seed: int = 1
    val_range: tuple = ()
    input_shapes: tuple = ()
    iterations: int = 1
    data_generator: str | None = None
    data_loader_script: str | None = None
    load_inputs: str | None = None

    @classmethod
    def from_args(cls, args) -> "DataOptions":
        return _fields_from(cls, args)

    def replace(self, **changes) -> "DataOptions":
        return dataclasses.replace(self, **changes)

    def shapes(self) -> dict:
        from debugkit.cli._args import parse_shape_list
        return parse_shape_list(list(self.input_shapes))

    def ranges(self) -> dict:
        from debugkit.cli._args import parse_ranges
        return parse_ranges(list(self.val_range))

    def loader(self, metadata, iterations=None):
        """The inputs these options describe: saved inputs, a loader script, or `iterations` (default --iterations)
        seeded random feeds. One place for run, bench, calibration and the debug searches."""
        from debugkit.data_loader import DataLoader, SavedDataLoader, ScriptDataLoader
        if self.load_inputs and self.data_loader_script:
            raise UsageError("use either --load-inputs or --data-loader-script, not both")
        if self.load_inputs:
            return SavedDataLoader(self.load_inputs)
        if self.data_loader_script:
            return ScriptDataLoader(self.data_loader_script)
        n = self.iterations if iterations is None else iterations
        if n < 0:
            raise UsageError("--iterations must be >= 0")
        dl = DataLoader(self.seed, n, self.ranges(), self.shapes(), generator=self.data_generator or "debugkit")
        dl.input_metadata = metadata
        dl.check_names(metadata)
        return dl

    def feeds(self, metadata, *, at_least_one=True, limit=None) -> list:
        """Every feed, coerced to the inputs' dtypes; a loader that yields nothing is bad input (exit 2)."""
        from debugkit.data_loader import coerce_feeds
        out = []
        for f in self.loader(metadata):
            out.append(coerce_feeds(f, metadata))
            if limit is not None and len(out) >= limit:
                break
        if at_least_one and not out:
            raise UsageError(f"{self.describe_source()} produced no feed: nothing to run or compare")
        return out

    def first_feed(self, metadata) -> dict:
        from debugkit.data_loader import coerce_feeds
        for feeds in self.loader(metadata, iterations=1):
            return coerce_feeds(feeds, metadata)
        raise UsageError(f"{self.describe_source()} produced no feed")

    def describe_source(self) -> str:
        if self.load_inputs:
            return f"--load-inputs {self.load_inputs}"
        if self.data_loader_script:
            return f"--data-loader-script {self.data_loader_script}"
        return f"the data loader (--iterations {self.iterations})"


@dataclass(frozen=True)
class CompareOptions:
    """The comparison group (Polygraphy's spellings): tolerances, the error statistic, extra compare funcs,
    post-processing. Per-output values stay as given ("[NAME:]VALUE" strings) until `tolerances()` parses them."""

    atol: tuple = ()
    rtol: tuple = ()
    check_error_stat: tuple = ()
    error_quantile: tuple = ()
    compare: tuple = ()
    index_tolerance: tuple = ()
    postprocess: tuple = ()
    check_shapes: bool = True
    l2_threshold: float = 1e-2
    cosine_threshold: float = 0.999
    psnr_threshold: float = 30.0
    snr_threshold: float = 20.0
    allow_nan: bool = False
    strict_inf: bool = False
    validate: bool = False
    given: frozenset = frozenset()   # threshold options given on the command line (for warn_unused)

    @classmethod
    def from_args(cls, args) -> "CompareOptions":
        return _fields_from(cls, args, given=frozenset(getattr(args, "_given", None) or ()))

    def tolerances(self):
        """The Tolerances these options describe (per-output name:value everywhere, as in Polygraphy)."""
        from debugkit.cli._args import parse_per_output
        from debugkit.compare.funcs import Tolerances
        quantiles = parse_per_output(list(self.error_quantile), "--error-quantile")
        quantiles.setdefault("", 0.99)
        itol = parse_per_output(list(self.index_tolerance), "--index-tolerance", int)
        return Tolerances(parse_per_output(list(self.atol), "--atol"), parse_per_output(list(self.rtol), "--rtol"),
                          parse_per_output(list(self.check_error_stat), "--check-error-stat", str), quantiles, itol)

    def extra_funcs(self, tol=None) -> dict:
        """{name: fn(output, actual, expected) -> OutputResult} for --compare (besides simple)."""
        from debugkit.compare import funcs
        tol = tol or self.tolerances()
        return funcs.make_checks(self.compare, index_tolerance=tol.index_tolerance, l2_threshold=self.l2_threshold,
                                 cosine_threshold=self.cosine_threshold, psnr_threshold=self.psnr_threshold,
                                 snr_threshold=self.snr_threshold, check_shapes=self.check_shapes)

    def postprocessing(self) -> dict:
        from debugkit.compare.postprocess import parse_postprocess
        return parse_postprocess(list(self.postprocess))

    def warn_unused(self):
        """Warn about an option that configures a --compare check that is not selected (Polygraphy does)."""
        from native.logger import G_LOGGER
        given = set(self.given) | ({"index_tolerance"} if self.index_tolerance else set())
        for dest, check in OPTION_OF_CHECK.items():
            if dest in given and check not in self.compare:
                G_LOGGER.warning(f"--{dest.replace('_', '-')} is only used by --compare {check}, which is not "
                                 f"selected (--compare {' '.join(self.compare) if self.compare else 'is not given'}): "
                                 f"it is ignored")


@dataclass(frozen=True)
class Options:
    """Everything a command was told, typed: model, build, data, comparison, outputs (dest -> path) and the
    command-specific rest (`extra`, e.g. run's --mark-all). Built once by `from_args`; every part is picklable."""

    command: str = ""
    model: str | None = None
    build: BuildOptions = field(default_factory=BuildOptions)
    data: DataOptions = field(default_factory=DataOptions)
    compare: CompareOptions = field(default_factory=CompareOptions)
    outputs: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_args(cls, args, command: str = "") -> "Options":
        outs = {k: getattr(args, k) for k in OUTPUTS if getattr(args, k, None) is not None}
        mine = {o.dest for group in GROUPS.values() for o in group if not o.dest.startswith("#")} | set(OUTPUTS) | \
            {"model", "func", "subtool"}
        extra = {k: v for k, v in vars(args).items() if k not in mine and not k.startswith("_")
                 and k not in ("verbose", "quiet", "no_color", "debug_cmd")}
        return cls(command or getattr(args, "subtool", "") or "", getattr(args, "model", None),
                   BuildOptions.from_args(args), DataOptions.from_args(args), CompareOptions.from_args(args),
                   outs, extra)

    def builder_config(self):
        """The build group as a BuilderConfig (calibrating on this command's data), stamped with the fingerprint."""
        return self.build.builder_config(data=self.data, model_path=self.model if self.model and
                                         not _is_plan(self.model) else None, fingerprint=self.fingerprint())

    # --- what the options depend on -------------------------------------------------------------------------------
    def describe(self, groups=("build", "data", "compare")) -> dict:
        """{--flag: value} for every option of these groups, with files as "path (sha256 …)" and user modules by
        their source's hash, plus "model". Two describe() dicts differ exactly where two runs were told different
        things (a changed loader script with the same path included)."""
        out = {}
        if self.model:
            out["model"] = _with_digest(self.model)
        for g in groups:
            values = getattr(self, g)
            for opt in GROUPS[g]:
                if opt.dest.startswith("#"):
                    continue
                flag = next(f for f in opt.flags if f.startswith("--"))
                if (opt.dest == "tf32" and flag == "--no-tf32") or opt.dest in _NOT_DESCRIBED:
                    continue
                v = getattr(values, opt.dest)
                out[flag] = _describe_value(opt.dest, v)
        return out

    def fingerprint(self, groups=("build", "data", "compare")) -> str:
        """sha256 (hex) of `describe(groups)`: every value of those groups, the content of every file they name,
        and the source of user modules (tactics modules, loader scripts). Plans, probe logs and reports record it;
        a resumed search compares it (and names the differing option from `describe`)."""
        text = json.dumps(self.describe(groups), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def paths(self) -> dict:
        """{"inputs", "outputs", "dirs", "updates", "appends", "read_dirs"}: (option, path) pairs of every file the
        options name, by the roles PATH_OPTIONS declares (the table the output == input check reads)."""
        values = {"model": self.model, **self.outputs, **self.extra}
        for group in (self.build, self.data):
            values.update({f.name: getattr(group, f.name) for f in dataclasses.fields(group)})
        files = declared_paths(values, self.command)
        files["outputs"] = [(flag, p) for flag, p, _ in files["outputs"]]
        return files


def _is_plan(path) -> bool:
    try:
        from backends.runners.engine import is_plan
        return is_plan(path)
    except Exception:
        return False


def _with_digest(path):
    digest = file_digest(path)
    return f"{path} (sha256 {digest})" if digest else f"{path} (missing)"


# files whose content decides answers (hashed); caches the build itself rewrites are named by path only, and
# --save-tactics is an output
_FILE_DESTS = {"load_tactics", "load_inputs", "tactics_module"}
_NOT_DESCRIBED = {"save_tactics"}


def _describe_value(dest, v):
    if dest == "device" and v is not None and not isinstance(v, str):   # a resolved Device: its name
        return getattr(v, "name", str(v))
    if dest == "data_loader_script" and v:
        path = v if os.path.exists(v) else v.rsplit(":", 1)[0]
        return f"{v} (sha256 {file_digest(path)})"
    if dest in _FILE_DESTS and v:
        return [_with_digest(p) for p in v] if isinstance(v, tuple) else _with_digest(v)
    if dest in ("layer_precisions", "layer_output_types") and v:
        return [_with_digest(x) if x in _spec_files([x]) else x for x in v]
    return list(v) if isinstance(v, tuple) else v
