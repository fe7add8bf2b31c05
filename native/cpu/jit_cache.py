"""numba's on-disk cache of the compiled kernels, kept fresh across the modules a kernel inlines.

numba stamps a cached kernel with its own file's contents only. Most kernels here call compiled functions of other
modules (jit_act's SiLU, jit_panel_gemm's register block, jit_spin's polls), which numba compiles into them: after
a change to only that other module (a `git pull`, an edit), the cache would go on running the old code, with the
old floats. Two helpers measured stale kernels so (docs/PERFORMANCE.md, 2026-11-29, h85 and h86).

Importing this module (every native/cpu/jit*.py does, before its first kernel is defined) puts `PackageLocator`
first in numba's list of cache locators: for files of this package it is numba's in-tree cache (`__pycache__`),
stamped with the file's contents and those of every native.cpu module it imports, transitively; files elsewhere keep
numba's own locators, and with NUMBA_CACHE_DIR set numba's user-provided cache is used as before. A process-wide
change to numba's registry: `uninstall()` takes it out again (kernels already defined keep the locator they got).
"""
from __future__ import annotations

import hashlib
import os
import re

from numba.core import caching, config

_HERE = os.path.dirname(os.path.abspath(__file__))
_IMPORTS = re.compile(r"^[ \t]*from[ \t]+native\.cpu(?:\.(\w+))?[ \t]+import[ \t]+(?:\(([\w\s,]+)\)|([\w \t,]+))", re.M)
_STAMPS: dict = {}
_IMPORTED: dict = {}


def _signature(p: str) -> tuple:
    st = os.stat(p)
    return p, st.st_mtime_ns, st.st_size


def _imports(p: str) -> list[str]:
    """The top-level native.cpu modules file `p` imports (parsed once per process for its size and time: numba
    asks for a stamp at every kernel's cache load and save)."""
    sig = _signature(p)
    got = _IMPORTED.get(sig)
    if got is None:
        with open(p, encoding="utf-8", errors="replace") as f:
            src = f.read()
        got = []
        for mod, grouped, names in _IMPORTS.findall(src):
            for name in [mod] if mod else [n.split()[0] for n in (grouped or names).split(",") if n.strip()]:
                dep = os.path.join(_HERE, name + ".py")
                if os.path.isfile(dep):
                    got.append(dep)
        _IMPORTED[sig] = got
    return got


def dependencies(path: str) -> list[str]:
    """`path` and the top-level native.cpu modules it imports, transitively: the files whose change may change
    its compiled kernels."""
    seen: set = set()
    todo = [os.path.abspath(path)]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(_imports(p))
    return sorted(seen)


def stamp(path: str) -> str:
    """A digest of the contents of `dependencies(path)` (kept per process for the files' sizes and times)."""
    files = dependencies(path)
    key = tuple(_signature(p) for p in files)
    got = _STAMPS.get(key)
    if got is None:
        h = hashlib.sha256()
        for p in files:
            h.update(os.path.basename(p).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
        got = _STAMPS[key] = h.hexdigest()
    return got


# numba's private cache machinery (numba 0.60-0.68 name it so); without it, numba's own stamps as before
_BASE = getattr(caching, "InTreeCacheLocator", None) or getattr(caching, "_InTreeCacheLocator", None) or object
_IMPL = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)


class PackageLocator(_BASE):
    """numba's in-tree cache locator for this package's files, its freshness stamp covering the modules they import."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if getattr(config, "CACHE_DIR", "") or os.path.dirname(os.path.abspath(py_file)) != _HERE:
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return super().get_source_stamp(), stamp(self._py_file)


def _locators():
    got = getattr(_IMPL, "_locator_classes", None)
    return got if _BASE is not object and isinstance(got, list) else None


def install() -> bool:
    """Put PackageLocator first in numba's cache locators (once); False where this numba has no such list."""
    classes = _locators()
    if classes is None:
        return False
    if PackageLocator not in classes:
        classes.insert(0, PackageLocator)
    return True


def uninstall():
    """Numba's own cache locators again, for kernels defined from now on."""
    classes = _locators() or []
    while PackageLocator in classes:
        classes.remove(PackageLocator)


install()
