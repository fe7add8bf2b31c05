"""Loading and saving models, including weights kept in external data files (needed past protobuf's 2 GB)."""
from __future__ import annotations

import os

import onnx

from native.errors import InputFileError, ModelError
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


def save_model(model, path, external_data=None, size_threshold=1024, all_in_one_file=True):
    """Save `model`; weights go to an external file `external_data` (a name next to `path`) when given, or
    automatically (`<name>.data`) when the model would not fit protobuf's 2 GB limit."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    if external_data is None and model.ByteSize() > PROTO_LIMIT:
        external_data = os.path.basename(path) + ".data"
        G_LOGGER.warning(f"model is over 2 GB: saving its weights to {os.path.join(folder, external_data)}")
    if external_data:
        location = os.path.relpath(os.path.abspath(os.path.join(folder, external_data)), folder)
        target = os.path.join(folder, location)
        if os.path.exists(target):
            os.remove(target)  # onnx appends to an existing data file
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=all_in_one_file,
                        location=location, size_threshold=size_threshold)
    else:
        onnx.save_model(model, path)
    return path
