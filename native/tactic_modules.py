"""User tactics modules: a Python file that registers `Tactic` subclasses through `native.tactics`.

`load_tactics_module(path)` imports the file once (a second call returns the same tactics) and remembers which
tactics it registered, so `unload_tactics_module(path)` can take them out again: loading is a process-wide side
effect, explicit and reversible. `builtin_tactic(t)` tells the shipped tactics from user ones.

User code cannot end the process: `sys.exit()` or a KeyboardInterrupt at import or inside a user tactic's
run/supports/workspace_size/prepare becomes a `UserCodeExit` naming the module file (the CLI exits 2).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys

from native import tactics as _tactics
from native.errors import InputFileError, UsageError, user_code_exit

_LOADED: dict[str, list] = {}   # absolute path -> tactics it registered
_USER_IDS: set = set()


def _all():
    _tactics._load_kernels("cpu")
    return {id(t): t for bucket in _tactics._REGISTRY.values() for t in bucket}


def load_tactics_module(path) -> list:
    """Import `path` (a .py file); returns the tactics it registered. UsageError if it fails to import."""
    path = os.path.abspath(os.fspath(path))
    if path in _LOADED:
        return list(_LOADED[path])
    if not os.path.exists(path):
        raise InputFileError(f"tactics module not found: {path}")
    before = _all()
    name = f"debugkit_user_tactics_{abs(hash(path)) & 0xFFFFFFFF:08x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"--tactics-module {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)
        for key, bucket in _tactics._REGISTRY.items():  # take back what it registered before failing
            bucket[:] = [t for t in bucket if id(t) in before]
        if isinstance(e, (SystemExit, KeyboardInterrupt)):
            raise user_code_exit(f"--tactics-module {path} (at import)", e) from None
        if not isinstance(e, Exception):
            raise
        raise UsageError(f"--tactics-module {path} failed to import: {type(e).__name__}: {e}") from None
    added = [t for i, t in _all().items() if i not in before]
    for t in added:
        _guard(type(t), path)
    _LOADED[path] = added
    _USER_IDS.update(id(t) for t in added)
    return list(added)


_GUARDED = ("run", "_short_run", "supports", "workspace_size", "prepare")


def _guard(cls, path):
    """Wrap the user tactic class's entry points so SystemExit / KeyboardInterrupt inside them name the module."""
    for attr in _GUARDED:
        fn = getattr(cls, attr, None)
        if fn is None or getattr(fn, "_user_guard", False):
            continue

        def make(fn, attr):
            @functools.wraps(fn)
            def guarded(*a, **kw):
                try:
                    return fn(*a, **kw)
                except (SystemExit, KeyboardInterrupt) as e:
                    raise user_code_exit(f"--tactics-module {path} (tactic {cls.__name__}.{attr.lstrip('_')})",
                                         e) from None
            guarded._user_guard = True
            return guarded
        setattr(cls, attr, make(fn, attr))


def unload_tactics_module(path):
    """Remove the tactics `path` registered (no-op if it was not loaded)."""
    path = os.path.abspath(os.fspath(path))
    gone = {id(t) for t in _LOADED.pop(path, [])}
    for bucket in _tactics._REGISTRY.values():
        bucket[:] = [t for t in bucket if id(t) not in gone]
    _USER_IDS.difference_update(gone)


def builtin_tactic(tactic) -> bool:
    """Whether `tactic` ships with debugkit (not registered by a tactics module)."""
    return id(tactic) not in _USER_IDS


def known_tactic_names(device="cpu") -> set:
    return {t.name for k in _tactics.registered_kinds(device) for t in _tactics.tactics_for(k, device)}


def builtin_name(kind: str, name: str, device="cpu") -> bool:
    """Whether a shipped tactic of layer kind `kind` is called `name`."""
    return any(t.name == name and builtin_tactic(t) for t in _tactics.tactics_for(kind, device))
