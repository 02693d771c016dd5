"""Allen's 13 interval relations between year intervals, the negatives of App. A.1.1, and sampled or named pairs."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterable, Sequence

ALLEN_RELATIONS = (
    "Before",
    "After",
    "Meets",
    "Met-By",
    "Overlaps",
    "Overlapped-By",
    "Starts",
    "Started-By",
    "During",
    "Contains",
    "Finishes",
    "Finished-By",
    "Equals",
)
INVERSE = {
    "Before": "After",
    "After": "Before",
    "Meets": "Met-By",
    "Met-By": "Meets",
    "Overlaps": "Overlapped-By",
    "Overlapped-By": "Overlaps",
    "Starts": "Started-By",
    "Started-By": "Starts",
    "During": "Contains",
    "Contains": "During",
    "Finishes": "Finished-By",
    "Finished-By": "Finishes",
    "Equals": "Equals",
}

# App. A.1.1: relations never used as the negative hypothesis for a pair whose true relation is the key, because
# at year granularity they could hold (the events' days are unknown). Relations not listed exclude nothing.
NEGATIVE_EXCLUSIONS: dict[str, tuple[str, ...]] = {
    "Equals": ("Overlaps", "Contains", "During", "Overlapped-By", "Started-By", "Starts", "Finished-By", "Finishes"),
    "Started-By": ("Contains", "Overlapped-By"),
    "Starts": ("Overlaps", "During"),
    "Finished-By": ("Overlaps", "Contains"),
    "Finishes": ("During", "Overlapped-By"),
    "Meets": ("Before", "Overlaps"),
    "Met-By": ("Overlapped-By", "After"),
}

# Named events for the non-abstract setting (the paper draws its pairs from Wikidata; these are well-known events
# with their usual start and end years). Together they realise all 13 relations.
BUILTIN_EVENTS: tuple[tuple[str, int, int], ...] = (
    ("fourth cholera pandemic", 1863, 1875),
    ("World War I", 1914, 1918),
    ("World War II", 1939, 1945),
    ("European theatre of World War II", 1939, 1945),
    ("Phoney War", 1939, 1940),
    ("Pacific War", 1941, 1945),
    ("Second Sino-Japanese War", 1937, 1945),
    ("Weimar Republic", 1918, 1933),
    ("Nazi Germany", 1933, 1945),
    ("Great Depression", 1929, 1939),
    ("Spanish Civil War", 1936, 1939),
    ("Korean War", 1950, 1953),
    ("Vietnam War", 1955, 1975),
    ("Cold War", 1947, 1991),
    ("Gulf War", 1990, 1991),
    ("Soviet-Afghan War", 1979, 1989),
    ("Iran-Iraq War", 1980, 1988),
    ("American Civil War", 1861, 1865),
    ("Taiping Rebellion", 1850, 1864),
    ("Crimean War", 1853, 1856),
    ("Franco-Prussian War", 1870, 1871),
    ("Second Boer War", 1899, 1902),
    ("Russo-Japanese War", 1904, 1905),
    ("Mexican Revolution", 1910, 1920),
    ("Napoleonic Wars", 1803, 1815),
    ("French Revolution", 1789, 1799),
    ("American Revolutionary War", 1775, 1783),
    ("Seven Years' War", 1756, 1763),
    ("War of the Spanish Succession", 1701, 1714),
    ("Thirty Years' War", 1618, 1648),
    ("Hundred Years' War", 1337, 1453),
    ("Apollo program", 1961, 1972),
)


def _check_interval(iv: Sequence[int], name: str) -> tuple[int, int]:
    if len(iv) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in iv):
        raise TypeError(f"{name} must be a (start_year, end_year) pair of ints, got {iv!r}")
    start, end = iv
    if start >= end:
        raise ValueError(f"{name}={iv!r}: Allen relations need start < end (a one-year event has no interval)")
    return start, end


def allen_relation(a: tuple[int, int], b: tuple[int, int]) -> str:
    """The one Allen relation of interval `a` to interval `b` (years as time points, start < end)."""
    a1, a2 = _check_interval(a, "a")
    b1, b2 = _check_interval(b, "b")
    if a2 < b1:
        return "Before"
    if b2 < a1:
        return "After"
    if a2 == b1:
        return "Meets"
    if b2 == a1:
        return "Met-By"
    # From here the interiors overlap: a1 < b2 and b1 < a2.
    if a1 == b1:
        return "Equals" if a2 == b2 else ("Starts" if a2 < b2 else "Started-By")
    if a2 == b2:
        return "Finishes" if a1 > b1 else "Finished-By"
    if a1 < b1:
        return "Contains" if a2 > b2 else "Overlaps"
    return "During" if a2 < b2 else "Overlapped-By"


def negative_candidates(relation: str) -> tuple[str, ...]:
    """Relations allowed as the False hypothesis for a pair whose true relation is `relation` (App. A.1.1)."""
    if relation not in INVERSE:
        raise KeyError(f"unknown Allen relation {relation!r}")
    excluded = set(NEGATIVE_EXCLUSIONS.get(relation, ())) | {relation}
    return tuple(r for r in ALLEN_RELATIONS if r not in excluded)


# Shapes: which sorted distinct years make up A and B for each relation (indices into the sorted sample).
_SHAPES: dict[str, tuple[int, tuple[int, int], tuple[int, int]]] = {
    "Before": (4, (0, 1), (2, 3)),
    "Meets": (3, (0, 1), (1, 2)),
    "Overlaps": (4, (0, 2), (1, 3)),
    "Starts": (3, (0, 1), (0, 2)),
    "During": (4, (1, 2), (0, 3)),
    "Finishes": (3, (1, 2), (0, 2)),
    "Equals": (2, (0, 1), (0, 1)),
}


def sample_pair(
    relation: str, rng: random.Random, *, years: tuple[int, int] = (1500, 2020), max_span: int = 60
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two random year intervals (A, B) whose Allen relation is `relation` (built from sorted distinct years)."""
    base_rel, swap = (relation, False) if relation in _SHAPES else (INVERSE[relation], True)
    k, ia, ib = _SHAPES[base_rel]
    span = rng.randint(k - 1, max_span)
    lo = rng.randint(years[0], years[1] - span)
    points = sorted(rng.sample(range(lo, lo + span + 1), k))
    a, b = (points[ia[0]], points[ia[1]]), (points[ib[0]], points[ib[1]])
    if swap:
        a, b = b, a
    assert allen_relation(a, b) == relation
    return a, b


def pairs_by_relation(events: Iterable[tuple[str, int, int]]) -> dict[str, list[tuple[tuple, tuple]]]:
    """All ordered pairs of distinct events, grouped by their Allen relation (App. A.1 step 2)."""
    events = [(str(n), int(s), int(e)) for n, s, e in events]
    out: dict[str, list] = defaultdict(list)
    for i, ea in enumerate(events):
        for j, eb in enumerate(events):
            if i != j and ea[1] < ea[2] and eb[1] < eb[2]:
                out[allen_relation(ea[1:], eb[1:])].append((ea, eb))
    return dict(out)
