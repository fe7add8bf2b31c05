"""A bug that escapes as a non-DebugkitError is reported as 'internal error in <layer>' with exit 3, not a traceback."""
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from debugkit.cli.main import internal_error_site

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raiser(relpath, exc="IndexError('list index out of range')"):
    """A function whose frame claims to live in `relpath` of the repository (as a bug there would)."""
    code = compile(f"def boom(*a, **k):\n    raise {exc}\n", os.path.join(REPO, relpath), "exec")
    scope = {}
    exec(code, scope)
    return scope["boom"]


def test_site_names_the_layer():
    for rel, layer in [("backends/engine/builder/passes/fusion_util.py", "a builder pass"),
                       ("backends/engine/runtime/executor.py", "the runtime"),
                       ("native/cpu/kernels/pooling.py", "a CPU kernel"),
                       ("backends/engine/plan.py", "the plan loader")]:
        try:
            _raiser(rel)()
        except IndexError as e:
            assert internal_error_site(e) == (layer, f"{rel}:2")


def test_cli_exit_3_with_hint(cli, tmp_path, monkeypatch):
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    from backends.engine.builder import builder
    monkeypatch.setattr(builder.Builder, "build_serialized_network",
                        _raiser("backends/engine/builder/passes/fusion_util.py"))
    code, out, err = cli("run", path, "--engine")
    assert code == 3
    assert "debugkit run: internal error in a builder pass (backends/engine/builder/passes/fusion_util.py:2: " \
           "IndexError: list index out of range)" in err
    assert "rerun with -v" in err and "Traceback" not in err
    code, out, err = cli("run", path, "--engine", "-v")
    assert code == 3 and "Traceback" in err and "rerun with -v" not in err
    assert np.isfinite(code)
