"""Models the installed onnx and onnxruntime can both take, whatever their releases (a shared test helper).

`onnx.helper.make_model` stamps every model with the installed onnx's newest IR version, and with its newest opset
when none is given. A newer onnx than onnxruntime (onnx 1.23 writes IR 14 and opset 28; onnxruntime 1.30 reads up
to IR 13 and opset 26) then makes a test fail on the versions, not on what it tests. tests/conftest.py routes
`onnx.helper.make_model` through `make_model` below for the whole run (and puts the original back at the end):

- no `ir_version` given: the oldest IR version that the model's opsets need (onnx's own table, as
  `onnx.helper.make_model_gen_version` does), not the newest;
- no `opset_imports` given: the newest ai.onnx opset that onnx, onnxruntime and our parser all know.

A test that needs a newer opset than onnxruntime reads calls `require_ort_opset(n)`: it skips, naming both
versions, only where the installed onnxruntime truly cannot run that opset.
"""
from __future__ import annotations

import functools

import onnx
from onnx import TensorProto

_ORIGINAL_MAKE_MODEL = onnx.helper.make_model


def _ort_accepts(opset: int, ir_version: int) -> bool:
    import onnxruntime as ort
    g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "probe",
                               [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                               [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = _ORIGINAL_MAKE_MODEL(g, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=ir_version)
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return True
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def ort_limits() -> tuple[int, int] | None:
    """(newest ai.onnx opset, newest IR version) the installed onnxruntime loads; None without onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    opset = next((o for o in range(onnx.defs.onnx_opset_version(), 6, -1) if _ort_accepts(o, 7)), 7)
    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if _ort_accepts(min(opset, 13), v)), 7)
    return opset, ir


def default_opset() -> int:
    """The newest ai.onnx opset the installed onnx, onnxruntime and our parser all know."""
    from backends.engine.onnx_parser.parser import MAX_OPSET
    limits = ort_limits()
    return min(onnx.defs.onnx_opset_version(), MAX_OPSET, limits[0] if limits else MAX_OPSET)


def make_model(graph, **kwargs):
    """onnx.helper.make_model, with the IR version its opsets need and an opset onnxruntime reads (module doc)."""
    if "opset_imports" not in kwargs:
        kwargs["opset_imports"] = [onnx.helper.make_opsetid("", default_opset())]
    if "ir_version" not in kwargs:
        try:
            kwargs["ir_version"] = onnx.helper.find_min_ir_version_for(list(kwargs["opset_imports"]),
                                                                       ignore_unknown=True)
        except Exception:   # a domain or version onnx's table lacks: onnx's default
            pass
    return _ORIGINAL_MAKE_MODEL(graph, **kwargs)


def require_ort_opset(opset: int, ir_version: int | None = None):
    """Skip the calling test when the installed onnxruntime cannot load this opset (or IR version)."""
    import pytest
    limits = ort_limits()
    if limits is None:
        pytest.skip("needs onnxruntime")
    ort = __import__("onnxruntime")
    if opset > limits[0] or (ir_version or 0) > limits[1]:
        pytest.skip(f"onnxruntime {ort.__version__} loads ai.onnx opsets up to {limits[0]} and IR up to "
                    f"{limits[1]}; this test needs opset {opset}" + (f", IR {ir_version}" if ir_version else ""))
    if opset > onnx.defs.onnx_opset_version():
        pytest.skip(f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}; this test needs "
                    f"{opset}")


def install():
    """Route onnx.helper.make_model through make_model (tests/conftest.py, for the run)."""
    onnx.helper.make_model = make_model


def uninstall():
    onnx.helper.make_model = _ORIGINAL_MAKE_MODEL
