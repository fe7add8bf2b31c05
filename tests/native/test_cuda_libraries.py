"""CUDA tactics that call cuBLAS / cuBLASLt (nvmath-python) or cuDNN (its frontend) refuse from supports() when the
library is not installed, naming it, so the builder never picks one (checked with the modules hidden: the CPU
machine may have them or not)."""
import sys

import numpy as np
import pytest

from native.tactics import LayerContext, Op, registered_tactics, unsupported_reason

availability = pytest.importorskip("native.cuda.availability")
CUBLAS = {("MatrixMultiply", "cublas"), ("Attention", "cublas-softmax"), ("Convolution", "im2col-cublas"),
          ("Einsum", "cublas-transpose"), ("Deconvolution", "cublas-col2im")}
CUBLASLT = {("MatrixMultiply", "cublaslt-int8"), ("Convolution", "im2col-cublaslt-int8"), ("RNN", "cublaslt-steps"),
            ("Plugin", "dft-gemm")}


@pytest.fixture
def hidden(monkeypatch):
    """nvmath and cudnn as if not installed (import raises ImportError); the answers are asked again after."""
    for mod in ("native.cuda.tactics.cudnn_conv", "native.cuda.tactics.conv", "native.cuda.tactics.gemm",
                "native.cuda.tactics.gemm_lt", "native.cuda.tactics.int8", "native.cuda.tactics.rnn",
                "native.cuda.tactics.signal", "native.cuda.tactics.einsum", "native.cuda.tactics.deconv",
                "native.cuda.tactics.attention"):
        __import__(mod)
    for name in ("nvmath", "nvmath.bindings", "nvmath.bindings.cublas", "nvmath.bindings.cublasLt", "cudnn"):
        monkeypatch.setitem(sys.modules, name, None)
    availability.forget()
    yield
    availability.forget()


def _op(kind, tactic=None):
    """A layer of `kind` in the tactic's first precision and format (what the builder would ask it about)."""
    return Op(kind, "layer", {"plugin_type": "STFT"} if kind == "Plugin" else {},
              {"kernel": np.zeros((4, 4, 1, 1), np.float32)},
              precision=tactic.precisions[0] if tactic else "float32",
              format=tactic.formats[0] if tactic else "linear")


def test_every_library_tactic_refuses_naming_what_to_install(hidden):
    assert not availability.has_library("cublas") and not availability.has_library("cudnn")
    tactics = {(t.kind, t.name): t for t in registered_tactics("cuda")}
    for key in CUBLAS | CUBLASLT:
        assert key in tactics, key
        why = unsupported_reason(tactics[key], _op(key[0], tactics[key]), LayerContext())
        lib = "cuBLASLt" if key in CUBLASLT else "cuBLAS"
        assert why == f"nvmath-python ({lib} bindings) is not installed", (key, why)
    for name in ("cudnn-plan-0", "cudnn-plan-3"):
        why = unsupported_reason(tactics[("Convolution", name)], _op("Convolution"), LayerContext())
        assert why == "the cuDNN frontend (nvidia-cudnn-frontend) is not installed"
    sdpa = tactics[("Attention", "cudnn-sdpa")]
    assert unsupported_reason(sdpa, _op("Attention", sdpa), LayerContext()) == \
        "the cuDNN frontend (nvidia-cudnn-frontend) is not installed"
    # the GEMM-free GPU kernels are not affected
    relu = tactics[("Activation", next(n for k, n in tactics if k == "Activation"))]
    assert "is not installed" not in str(unsupported_reason(relu, Op("Activation", "a", {"type": "RELU"}),
                                                            LayerContext()))


def test_missing_names_the_first_absent_library(hidden):
    assert availability.missing("cublas", "cudnn") == "nvmath-python (cuBLAS bindings) is not installed"
    availability._FOUND["cublas"] = True
    assert availability.missing("cublas", "cudnn") == "the cuDNN frontend (nvidia-cudnn-frontend) is not installed"
