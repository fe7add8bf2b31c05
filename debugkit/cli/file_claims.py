"""Which files a command reads and writes, checked before it does any work (native/files/claims.py).

`claimed_files(args)` sorts the parsed options into inputs (read), outputs (written) and updates (caches read and
rewritten); `claim(args)` refuses an output that is an input (or another output, or a cache), an output path that
cannot be written (missing folder, a directory, a device for a format that needs a file), and takes an advisory lock
on every output for the whole command, so a second run writing the same file is refused at once.
"""
from __future__ import annotations

import contextlib
import os

from native.errors import OutputFileError
from native.files import OutputLocks, check_side_file, refuse_overwriting_inputs, resolve_output

# option dest -> (flag shown in messages, may be a stream such as /dev/null or '-')
OUTPUTS = {
    "output": ("-o", True), "save_engine": ("--save-engine", True), "save_inputs": ("--save-inputs", False),
    "save_outputs": ("--save-outputs", False), "json": ("--json", True), "report": ("--report", True),
    "save_tactics": ("--save-tactics", True), "dump_profile": ("--dump-profile", True),
    "min_good": ("--min-good", True), "timeline": ("--timeline", True),
}
OUTPUT_DIRS = {"art_dir": "--art-dir", "artifacts_dir": "--artifacts-dir", "output_dir": "-o",
               "save_subgraphs": "--save-subgraphs"}
UPDATES = {"timing_cache": "--timing-cache", "calibration_cache": "--calibration-cache", "log": "--log"}
FOLDER_OUTPUT_COMMANDS = {"sweep"}   # their -o names a folder (options.py declares -o once for every command)
APPENDS = {"log_file": "--log-file"}   # appended to, by any number of runs: never an input, not locked
INPUTS = {"model": "model", "models": "model", "path": "input", "load_inputs": "--load-inputs",
          "load_outputs": "--load-outputs", "load_tactics": "--load-tactics", "load_engine": "--load-engine",
          "data_loader_script": "--data-loader-script", "tactics_module": "--tactics-module",
          "models_file": "--models-file", "good": "--good", "bad": "--bad", "artifacts": "--artifacts",
          "layer_precisions": "--layer-precisions", "layer_output_types": "--layer-output-types"}


# side files checked (regular file, size limit of their kind) before any work: a FIFO or /dev/zero given as a
# cache is refused at once instead of blocking or filling memory once the build reaches it
SIDE_FILE_KINDS = {"--load-inputs": "data file", "--load-outputs": "data file", "--load-tactics": "tactic replay file",
                   "--timing-cache": "timing cache", "--calibration-cache": "calibration cache",
                   "--data-loader-script": "data loader script"}


def _values(v):
    if v is None or isinstance(v, bool):
        return []
    return [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, (str, os.PathLike)) and x]


def _script_path(spec):
    """'loader.py:func' -> 'loader.py' (the file part of a data loader script spec)."""
    spec = os.fspath(spec)
    if os.path.exists(spec) or ":" not in spec:
        return spec
    return spec.rsplit(":", 1)[0]


def claimed_files(args) -> dict:
    """{"inputs": [(flag, path)], "outputs": [(flag, path, streamable)], "dirs": [(flag, path)],
    "updates": [(flag, path)], "appends": [(flag, path)]} of a parsed command line."""
    ns = vars(args)
    ins, outs, dirs, upd = [], [], [], []
    for dest, role in INPUTS.items():
        for p in _values(ns.get(dest)):
            if dest in ("layer_precisions", "layer_output_types") and not str(p).endswith(".json"):
                continue
            ins.append((role, _script_path(p) if dest == "data_loader_script" else p))
    for dest, (flag, streamable) in OUTPUTS.items():
        if dest == "output" and ns.get("subtool") in FOLDER_OUTPUT_COMMANDS:
            dirs += [(flag, p) for p in _values(ns.get(dest))]
            continue
        for p in _values(ns.get(dest)):
            if not (dest == "json" and p == "-"):   # data files stream only as Polygraphy JSON (HDF5 seeks)
                outs.append((flag, p, streamable or str(p).endswith(".json")))
    for dest, flag in OUTPUT_DIRS.items():
        dirs += [(flag, p) for p in _values(ns.get(dest))]
    for dest, flag in UPDATES.items():
        upd += [(flag, p) for p in _values(ns.get(dest))]
    appends = [(flag, p) for dest, flag in APPENDS.items() for p in _values(ns.get(dest))]
    for flag, p, _ in list(outs):   # files a command writes beside its main output
        stem = os.path.splitext(os.fspath(p))[0]
        if flag == "-o" and ns.get("subtool") == "debug" and p != "-":
            outs.append(("report", stem + ".html", True))
    ins += _external_data(ns, [p for _, p, _ in outs])
    return {"inputs": ins, "outputs": outs, "dirs": dirs, "updates": upd, "appends": appends}


def _external_data(ns, outputs):
    """The model's external weight files, when an existing output sits where one could be (parsing the model
    costs time, so only then)."""
    model = ns.get("model")
    if not isinstance(model, str) or not model.endswith(".onnx") or not os.path.isfile(model):
        return []
    folder = os.path.realpath(ns.get("external_data_dir") or os.path.dirname(os.path.abspath(model)))
    if not any(os.path.exists(p) and os.path.realpath(p).startswith(folder + os.sep) for p in outputs):
        return []
    try:
        import onnx
        from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors
        m = onnx.load(model, load_external_data=False)
        files = {ExternalDataInfo(t).location for t in _get_all_tensors(m)
                 if t.data_location == onnx.TensorProto.EXTERNAL}
    except Exception:   # the command's own loader reports a bad model properly
        return []
    return [("model's external data", os.path.join(folder, f)) for f in sorted(files) if f]


@contextlib.contextmanager
def claim(args):
    """Check the command's files (see the module docstring) and hold locks on its outputs for the block."""
    files = claimed_files(args)
    outs = [(flag, p) for flag, p, _ in files["outputs"]]
    for flag, p, streamable in files["outputs"]:
        if p == "-" or os.path.isdir(os.path.dirname(os.path.realpath(p))):   # a missing folder: the writer's call
            resolve_output(p, flag, streamable)
    for flag, p in files["dirs"]:
        if os.path.exists(p) and not os.path.isdir(p):
            raise OutputFileError(f"{flag} {p} exists and is not a directory")
    refuse_overwriting_inputs(outs + files["dirs"] + files["updates"] + files["appends"], files["inputs"])
    _refuse_duplicates(outs + files["updates"])
    for flag, p in files["inputs"] + files["updates"]:
        kind = SIDE_FILE_KINDS.get(flag)
        if kind and p != "-" and (flag not in UPDATES.values() or os.path.lexists(p)):
            check_side_file(p, kind)
    with OutputLocks(outs + files["updates"]):
        yield files


def _refuse_duplicates(outputs):
    seen = {}
    for flag, p in outputs:
        if p in ("-",):
            continue
        real = os.path.realpath(p)
        if not os.path.exists(real) or os.path.isfile(real):
            if real in seen and seen[real][0] != flag:
                raise OutputFileError(f"{flag} {p} and {seen[real][0]} {seen[real][1]} are the same file; give "
                                      f"each output its own path")
            seen.setdefault(real, (flag, p))
