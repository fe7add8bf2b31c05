"""native/cpu/jit_cache.py: numba's cached kernels are stamped with the modules they inline, not their own file only."""
import os

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from native.cpu import jit_cache  # noqa: E402


def _write(folder, name, text):
    (folder / f"{name}.py").write_text(text)
    return str(folder / f"{name}.py")


def test_dependencies_follow_every_import_form_transitively(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_cache, "_HERE", str(tmp_path))
    _write(tmp_path, "jit_b", "from native.cpu import jit_c as c, helpers\n")
    _write(tmp_path, "jit_c", "X = 1\n")
    _write(tmp_path, "helpers", "from native.cpu.jit_d import (\n    one,\n    two,\n)\n")
    _write(tmp_path, "jit_d", "from numpy import zeros\n")
    _write(tmp_path, "jit_e", "Y = 2\n")     # imported by nobody
    a = _write(tmp_path, "jit_a", "import numba\nfrom native.cpu.jit_b import f\nfrom native.cpu.kernels import z\n")
    got = [os.path.basename(p) for p in jit_cache.dependencies(a)]
    assert got == ["helpers.py", "jit_a.py", "jit_b.py", "jit_c.py", "jit_d.py"]


def test_the_stamp_changes_with_a_module_the_file_imports(tmp_path, monkeypatch):
    monkeypatch.setattr(jit_cache, "_HERE", str(tmp_path))
    a = _write(tmp_path, "jit_a", "from native.cpu.jit_b import f\n")
    _write(tmp_path, "jit_b", "def f(x):\n    return x + 1\n")
    _write(tmp_path, "jit_other", "Z = 0\n")
    first = jit_cache.stamp(a)
    assert jit_cache.stamp(a) == first
    _write(tmp_path, "jit_other", "Z = 1\n")              # not imported: the same stamp
    assert jit_cache.stamp(a) == first
    _write(tmp_path, "jit_b", "def f(x):\n    return x + 2\n")   # same size, new contents
    os.utime(tmp_path / "jit_b.py", ns=(1, 1))
    assert jit_cache.stamp(a) != first


def test_package_kernels_get_the_locator_and_others_numbas_own(tmp_path):
    from native.cpu import jit, jit_act
    assert jit.available()
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    jit_act.silu_polyexp_inplace(x, False)
    loc = jit_act.silu_polyexp_inplace._cache._impl.locator
    assert type(loc) is jit_cache.PackageLocator
    assert loc.get_source_stamp()[1] == jit_cache.stamp(jit_act.__file__)
    assert "jit_rows.py" in {os.path.basename(p) for p in jit_cache.dependencies(jit_act.__file__)}
    elsewhere = _write(tmp_path, "mod", "def f():\n    return 1\n")
    assert jit_cache.PackageLocator.from_function(lambda: 1, elsewhere) is None


def test_uninstall_gives_numba_its_own_locators_back():
    classes = jit_cache._locators()
    assert classes is not None and classes[0] is jit_cache.PackageLocator
    jit_cache.uninstall()
    try:
        assert jit_cache.PackageLocator not in classes
    finally:
        assert jit_cache.install()
    assert classes.count(jit_cache.PackageLocator) == 1 and jit_cache.install() and classes.count(
        jit_cache.PackageLocator) == 1
