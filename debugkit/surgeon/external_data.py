"""Loading and saving models, including weights kept in external data files (needed past protobuf's 2 GB)."""
from __future__ import annotations

import os

import onnx

from native.errors import InputFileError, ModelError, OutputFileError
from native.files import resolve_output, write_bytes
from native.logger import G_LOGGER

PROTO_LIMIT = 2**31 - 2**20  # protobuf's 2 GB limit, with room for the graph itself


def load_model(path, external_data_dir=None) -> onnx.ModelProto:
    """Load a model and its external weights (from `external_data_dir`, default: the model's folder)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputFileError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise InputFileError(f"model path is a directory, not an ONNX file: {path}")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise ModelError(f"{path} is not a readable ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
    if not model.graph.node and not model.graph.output and not model.graph.input:
        raise ModelError(f"{path} holds no ONNX graph (is it an ONNX file?)")
    if uses_external_data(model):
        base = external_data_dir or os.path.dirname(os.path.abspath(path))
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base)
        except Exception as e:
            raise InputFileError(f"cannot read the external weights of {path} from '{base}' ({e}); pass the folder "
                                 f"that holds them with --external-data-dir") from None
    return model


def uses_external_data(model) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_tensors(model))


def _all_tensors(model):
    yield from onnx.external_data_helper._get_all_tensors(model)


def _initializers(graph):
    """Every initializer of `graph` and of the subgraphs in its nodes' attributes (what moves to an external data
    file, as onnx.save does by default; tensors inside attributes, e.g. Constant values, stay in the model)."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _initializers(g)


def save_model(model, path, external_data=None, size_threshold=1024, what="ONNX model"):
    """Save `model` by the output rules of native/files (whole files or nothing; old files intact on failure);
    weights go to an external file `external_data` (a name next to `path`) when given, or automatically
    (`<name>.data`) when the model would not fit protobuf's 2 GB limit. The model and its weights file replace the
    old ones as a pair (`_replace_together`). `model` itself is not changed."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)   # surgeon -o makes its folder
    if external_data is None and model.ByteSize() > PROTO_LIMIT:
        external_data = os.path.basename(path) + ".data"
        G_LOGGER.warning(f"model is over 2 GB: saving its weights to {external_data} beside {path}")
    if not external_data:
        write_bytes(path, model.SerializeToString(), what)
        return path
    folder = os.path.dirname(os.path.abspath(path))
    resolve_output(path, what, streamable=False)
    location = os.path.relpath(os.path.abspath(os.path.join(folder, external_data)), folder)
    if location.startswith(os.pardir):
        raise OutputFileError(f"--save-external-data {external_data} must be a name inside the folder of {path}")
    if os.path.realpath(os.path.join(folder, location)) == os.path.realpath(path):
        raise OutputFileError(f"--save-external-data {external_data} is the model {path} itself; give the weights "
                              f"file another name")
    os.makedirs(os.path.dirname(os.path.join(folder, location)), exist_ok=True)
    _save_with_external_data(model, path, os.path.join(folder, location), location, size_threshold, what)
    return path


def _save_with_external_data(model, path, data_path, location, size_threshold, what):
    """The weights (raw initializers of at least `size_threshold` bytes) into a temporary file beside `data_path`, the
    model into one beside `path`, both fsync'd, then renamed together. Written here rather than by
    onnx.save_model, which refuses a `location` that exists relative to the current directory."""
    from native.files import PendingOutput
    data = PendingOutput(data_path, "external data file")
    out = PendingOutput(path, what)
    moved = []   # (tensor, its raw bytes): put back afterwards, so `model` is as it was
    try:
        try:
            with open(data.tmp, "wb") as f:
                offset = 0
                for t in _initializers(model.graph):
                    if t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data") or \
                            len(t.raw_data) < size_threshold:
                        continue
                    raw = t.raw_data
                    f.write(raw)
                    moved.append((t, raw))
                    onnx.external_data_helper.set_external_data(t, location, offset, len(raw))
                    offset += len(raw)
                    t.ClearField("raw_data")
            text = model.SerializeToString()
            _restore(moved)
            with open(out.tmp, "wb") as f:
                f.write(text)
            del text
            for tmp in (data.tmp, out.tmp):
                _fsync(tmp)
            _replace_together([(data.tmp, data.target.real), (out.tmp, out.target.real)])
            data.done = out.done = True
        except OSError as e:
            raise out.error(e) from None
    finally:
        _restore(moved)
        data.abort()
        out.abort()


def _restore(moved):
    while moved:
        t, raw = moved.pop()
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = raw


def _replace_together(moves):
    """Rename each (new file, target) pair in order; each old target is kept beside itself (a hard link, or a copy
    where the filesystem has none) until the last rename is done, then dropped. On any exception, KeyboardInterrupt
    included, every target already replaced gets its old file back (or is removed when it was new) before the error
    goes on: the targets change together or not at all (short of the machine stopping mid-way)."""
    import shutil
    import tempfile
    done = []   # (target, backup or None)
    try:
        for src, dest in moves:
            backup = None
            if os.path.lexists(dest):
                fd, backup = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", suffix=".old",
                                              dir=os.path.dirname(dest))
                os.close(fd)
                os.remove(backup)
                try:
                    os.link(dest, backup)
                except OSError:
                    shutil.copy2(dest, backup)
            try:
                os.replace(src, dest)
            except BaseException:
                if backup is not None:
                    os.remove(backup)
                raise
            done.append((dest, backup))
    except BaseException:
        for dest, backup in reversed(done):
            try:
                if backup is None:
                    os.remove(dest)
                else:
                    os.replace(backup, dest)
            except OSError:
                G_LOGGER.error(f"could not restore {dest} after a failed save" +
                               (f"; its old content is in {backup}" if backup else ""))
        raise
    for _, backup in done:
        if backup is not None:
            try:
                os.remove(backup)
            except OSError:
                pass


def _fsync(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
