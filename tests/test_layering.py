"""Imports go one way: tools -> debugkit -> backends -> native, and inside backends/engine the runtime never imports
the builder (docs/architecture.md, "Layering"). Read from the source with tools/import_graph.py (nothing is
imported), so a function-level import counts as much as one at the top of a file."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import import_graph as ig  # noqa: E402

# modules every layer of backends/engine builds on: they import neither the runtime nor the builder
ENGINE_BASE = ("backends.engine.engine_graph", "backends.engine.params", "backends.engine.schema",
               "backends.engine.plan_schema", "backends.engine.plan", "backends.engine.profile",
               "backends.engine.memory_plan", "backends.engine.network", "backends.engine.layers",
               "backends.engine.dtypes")
# a ratchet: lower it as cycles are cut, never raise it. 0 since issue 23 (h32: the builder's opt feeds, DLA facts and
# NHWC conversion in leaf modules; cli._args no longer wraps debugkit.options): keep it there
MAX_CYCLES = 0
# a ratchet too: project imports inside functions in backends/ and native/ (221 on 89a7469, 178 on ed72da8, 115 on
# e35af11: what is left imports an optional dependency, registers a device's tactics or reads a registry). Lower it
# to the count when you cut some; a new one needs its reason in a comment (test_function_level_imports_say_why)
MAX_INNER_ENGINE = 117   # 117: native/cuda/device.py registers conv_i8 and conv_i8t (our INT8 NHWC kernels)
# where every import sits at the top of its file unless it says why not (a comment: an optional dependency, a
# registry): the engine's base modules, the runtime and the math the devices share
TOP_LEVEL_ONLY = ENGINE_BASE + ("backends.engine.runtime", "native.shared")


@pytest.fixture(scope="module")
def graph():
    return ig.scan(REPO)


def _under(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_rooms_import_downward_only(graph):
    _, imports = graph
    bad = [repr(i) for i in ig.upward(imports)]
    assert not bad, "imports against tools -> debugkit -> backends -> native (or runtime -> builder):\n" + \
        "\n".join(bad)


def test_runtime_does_not_import_the_builder(graph):
    _, imports = graph
    bad = [repr(i) for i in imports if i.src.startswith("backends.engine.runtime")
           and i.target.startswith("backends.engine.builder")]
    assert not bad, "\n".join(bad)


def test_engine_base_modules_import_neither_runtime_nor_builder(graph):
    _, imports = graph
    above = ("backends.engine.runtime", "backends.engine.builder", "backends.engine.build",
             "backends.engine.calibration", "backends.engine.onnx_backend")
    bad = [repr(i) for i in imports if _under(i.src, ENGINE_BASE) and _under(i.target, above)]
    assert not bad, "\n".join(bad)


def test_devices_share_only_public_names():
    """A device package may build on another's public functions (the CUDA host layers wrap CPU kernels), never on
    its private helpers: what two devices both compute is public, in a shared module."""
    import ast
    bad = []
    for path in ig.project_files(REPO):
        src = ig.module_name(REPO, path)
        if not src.startswith("native."):
            continue
        dev = src.split(".")[1]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("native."):
                other = node.module.split(".")[1]
                if other != dev and any(a.name.startswith("_") and not a.name.startswith("__") for a in node.names):
                    bad.append(f"{src}:{node.lineno} imports {[a.name for a in node.names]} from {node.module}")
    assert not bad, "\n".join(bad)


def test_function_level_imports_in_the_engine_do_not_grow(graph):
    _, imports = graph
    inner = {(i.src, i.line) for i in imports if i.inner and i.src.startswith(("backends.", "native."))}
    assert len(inner) <= MAX_INNER_ENGINE, f"{len(inner)} function-level project imports in backends/ and native/"


def test_import_cycles_do_not_grow():
    r = ig.report(REPO)
    assert len(r["cycles"]) <= MAX_CYCLES, "\n".join(" ".join(c) for c in r["cycles"])


def test_function_level_imports_say_why(graph):
    """In the engine's base modules, the runtime and native/shared, an import inside a function carries a comment
    (what the optional dependency or the registry is); everything else is imported at the top."""
    _, imports = graph
    bad = sorted({f"{i.src}:{i.line} imports {i.target}" for i in imports
                  if i.inner and not i.comment and _under(i.src, TOP_LEVEL_ONLY)})
    assert not bad, "import these at the top of the file (or say why not in a comment):\n" + "\n".join(bad)


def test_the_checker_sees_a_violation(tmp_path):
    """The rules can fail: a runtime module importing the builder inside a function is caught."""
    for room in ig.ROOMS:
        (tmp_path / room).mkdir()
    rt = tmp_path / "backends" / "engine" / "runtime"
    rt.mkdir(parents=True)
    (tmp_path / "backends" / "engine" / "builder").mkdir()
    (tmp_path / "backends" / "engine" / "builder" / "config.py").write_text("X = 1\n")
    (rt / "runtime.py").write_text("def f():\n    from backends.engine.builder.config import X\n    return X\n")
    (tmp_path / "native" / "a.py").write_text("import debugkit.b\n")
    (tmp_path / "debugkit" / "b.py").write_text("import native.a\n")
    r = ig.report(str(tmp_path))
    assert r["function_level"] == 1
    assert r["cycles"] == [["debugkit.b", "native.a"]]
    assert sorted(r["upward"]) == ["backends.engine.runtime.runtime:2 -> backends.engine.builder.config "
                                   "(in a function)", "native.a:1 -> debugkit.b"]
