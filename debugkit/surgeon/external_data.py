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


def save_model(model, path, external_data=None, size_threshold=1024, all_in_one_file=True, what="ONNX model"):
    """Save `model` by the output rules of native/files (whole files or nothing; old files intact on failure);
    weights go to an external file `external_data` (a name next to `path`) when given, or automatically
    (`<name>.data`) when the model would not fit protobuf's 2 GB limit."""
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
        raise OutputFileError(f"--external-data {external_data} must be a name inside the folder of {path}")
    _save_with_external_data(model, path, folder, location, size_threshold, all_in_one_file)
    return path


def _save_with_external_data(model, path, folder, location, size_threshold, all_in_one_file):
    """onnx.save_model into a temporary folder beside `path`, then each file renamed into place (weights first,
    the model last): a failure leaves the old model and weights as they were."""
    import shutil
    import tempfile
    try:
        tmpdir = tempfile.mkdtemp(prefix=".debugkit-save-", dir=folder)
    except OSError as e:
        raise OutputFileError(f"could not write {path}: {e.strerror or e}; {path} is unchanged") from None
    try:
        tmp_model = os.path.join(tmpdir, os.path.basename(path))
        os.makedirs(os.path.dirname(os.path.join(tmpdir, location)), exist_ok=True)
        try:
            onnx.save_model(model, tmp_model, save_as_external_data=True, all_tensors_to_one_file=all_in_one_file,
                            location=location, size_threshold=size_threshold)
            made = [os.path.relpath(os.path.join(r, f), tmpdir) for r, _, fs in os.walk(tmpdir) for f in fs]
            for rel in sorted(made, key=lambda r: r == os.path.basename(path)):
                src = os.path.join(tmpdir, rel)
                _fsync(src)
                dest = os.path.realpath(path) if rel == os.path.basename(path) else os.path.join(folder, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.replace(src, dest)
        except OSError as e:
            from native.files.output import _full_disk_error
            raise _full_disk_error(path, e, os.path.exists(path)) from None
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _fsync(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
