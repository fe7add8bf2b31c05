"""Tactic sources: which tactics the builder may consider (`BuilderConfig.tactic_sources`, `--tactic-sources`).

TensorRT's tactic sources are a bitmask of kernel libraries that trtexec edits as a list (`-CUDNN,+CUBLAS_LT`);
here a source is a tactic name, and the list reads the same way:

* `NAME,...`  restrict every layer kind that has a tactic of one of these names to them; a kind with none of them
  keeps all of its tactics (the build log says so, in verbose mode, once per kind);
* `-NAME`     never use NAME, for any kind (a kind left with no tactic is an error naming it);
* `+NAME`     add NAME to the restriction list; without plain names it changes nothing (every tactic is enabled
  by default), as trtexec's `+SOURCE` for a source that is on anyway.

The config holds the normalised set: plain names (the restriction) and `-NAME` entries (exclusions); None when it
restricts nothing. The plan records it sorted.
"""
from __future__ import annotations

from native.errors import UsageError


def split_sources(sources) -> tuple[set, set]:
    """(restriction names, excluded names) of a tactic_sources value (a set, list or comma string; `+` as plain)."""
    if sources is None:
        return set(), set()
    items = sources.split(",") if isinstance(sources, str) else list(sources)
    plain, minus, plus = set(), set(), set()
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        if item[0] == "-":
            minus.add(item[1:].strip())
        elif item[0] == "+":
            plus.add(item[1:].strip())
        else:
            plain.add(item)
    both = sorted((plain | plus) & minus)
    if both:
        raise UsageError(f"tactic sources both enable and disable {both}; name each tactic once")
    return (plain | plus) if plain else set(), minus


def normalise(sources, known: set, what: str = "--tactic-sources") -> set | None:
    """The config value for `sources` (see the module docstring); unknown names are a UsageError listing the
    known ones (a typo is not a preference)."""
    if sources is None:
        return None
    restrict, minus = split_sources(sources)
    unknown = sorted(n for n in restrict | minus if n not in known)
    if unknown:
        raise UsageError(f"{what}: unknown tactic name(s) {unknown}; registered tactics: {', '.join(sorted(known))}")
    out = restrict | {f"-{n}" for n in minus}
    return out or None


def allowed(kind: str, tactics: list, sources) -> tuple[list, str | None]:
    """(the tactics of `kind` that `sources` leaves, a verbose note or None). Raises UsageError when exclusions
    leave the kind nothing."""
    if sources is None:
        return tactics, None
    restrict, minus = split_sources(sources)
    note = None
    kept = tactics
    if restrict:
        chosen = [t for t in tactics if t.name in restrict]
        if chosen:
            kept = chosen
        else:
            note = (f"tactic_sources {sorted(restrict)} name no {kind} tactic; {kind} layers keep all of theirs: "
                    f"{[t.name for t in tactics]}")
    if minus:
        left = [t for t in kept if t.name not in minus]
        if not left:
            raise UsageError(f"tactic sources exclude every {kind} tactic ({', '.join('-' + t.name for t in kept)}"
                             f"); {kind} layers need one: drop one exclusion")
        gone = [t.name for t in kept if t.name in minus]
        if gone:
            note = (note + "; " if note else "") + f"{kind}: {gone} excluded, {[t.name for t in left]} left"
        kept = left
    return kept, note
