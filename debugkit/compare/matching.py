"""Pair a runner's outputs with the reference's: exact names, then Polygraphy's fallbacks.

Polygraphy's rule (util.find_str_in_iterable): an exact match first, then a case-insensitive substring match in
either direction (`y` pairs with `y:0`), then the output at the same position. A name that has an exact partner is
never taken by another's fallback. Every pairing that is not exact is returned with how it was made, so the
comparator can warn about it. We add one guard: a pairing by position alone needs equal output counts and equal
element counts, so another model's golden file is reported as "nothing in common" rather than compared by chance.
"""
from __future__ import annotations

import numpy as np


def pair_outputs(actual: dict, reference: dict) -> list:
    """[(actual name, reference name, how)] with how in "exact", "substring", "position"."""
    ref_names = list(reference)
    exact = [n for n in actual if n in reference]
    taken = set(exact)
    pairs = [(n, n, "exact") for n in exact]
    rest = [n for n in actual if n not in reference]
    for n in rest:
        low = n.lower()
        hit = next((r for r in ref_names if r not in taken and r not in actual
                    and (low in r.lower() or r.lower() in low)), None)
        if hit is not None:
            taken.add(hit)
            pairs.append((n, hit, "substring"))
    if len(actual) == len(reference):
        for i, n in enumerate(actual):
            if any(p[0] == n for p in pairs):
                continue
            r = ref_names[i]
            if r in taken or r in actual:
                continue
            if np.size(actual[n]) == np.size(reference[r]):
                taken.add(r)
                pairs.append((n, r, "position"))
    order = {n: i for i, n in enumerate(actual)}
    return sorted(pairs, key=lambda p: order[p[0]])
