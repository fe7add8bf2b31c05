"""Which files a command reads and writes, checked before it does any work (native/files/claims.py).

`claimed_files(args)` sorts the parsed options into inputs (read), outputs (written), updates (caches read and
rewritten), appends and folders by the roles debugkit/options.py declares for every option (PATH_OPTIONS: one
table, so a new flag cannot escape the check); `claim(args)` refuses an output that is an input (or another
output, or a cache), an output path that cannot be written (missing folder, a directory, a device for a format that
needs a file), checks side files (regular, within their size limit), and takes an advisory lock on every output for
the whole command, so a second run writing the same file is refused at once.
"""
from __future__ import annotations

import contextlib
import os

from debugkit.options import declared_paths, path_role, script_file
from native.errors import OutputFileError
from native.files import OutputLocks, check_side_file, refuse_overwriting_inputs, resolve_output

SUBCOMMAND_DESTS = ("debug_cmd", "surgeon_cmd", "check_cmd", "what", "template_cmd")


def command_name(args) -> str:
    """"debug reduce", "surgeon sanitize", "run", ... of a parsed command line."""
    ns = vars(args)
    sub = next((ns[d] for d in SUBCOMMAND_DESTS if isinstance(ns.get(d), str)), None)
    return " ".join(x for x in (ns.get("subtool"), sub) if x)


def claimed_files(args) -> dict:
    """{"inputs": [(flag, path)], "outputs": [(flag, path, streamable)], "dirs": [(flag, path)],
    "updates": [(flag, path)], "appends": [(flag, path)], "read_dirs": [(flag, path)]} of a parsed command line,
    by the roles debugkit/options.py declares (PATH_OPTIONS), plus the model's external weights."""
    ns = vars(args)
    files = declared_paths(ns, command_name(args))
    files["inputs"] += _external_data(ns, [p for _, p, _ in files["outputs"]])
    return files


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
    for flag, p, kind in _side_files(args):
        check_side_file(p, kind)
    with OutputLocks(outs + files["updates"]):
        yield files


def _side_files(args):
    """(flag, path, kind) of the side files to check before any work: inputs of a kind with a size limit, and
    caches that exist (a missing cache is made by the command)."""
    command = command_name(args)
    for dest, v in vars(args).items():
        role = path_role(dest, command)
        if role is None or role.side_kind is None:
            continue
        for p in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(p, str) and p and p != "-" and (role.role != "update" or os.path.lexists(p)):
                yield role.flag, script_file(p) if dest == "data_loader_script" else p, role.side_kind


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
