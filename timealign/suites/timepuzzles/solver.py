"""The Time Puzzles solver (Algorithm 3): the answer set A = intersection of C(t) over the facts (Eq. 1)."""

from __future__ import annotations

from datetime import date
from typing import Iterable

import numpy as np

from timealign.suites.timepuzzles.calendar import Calendar, get_calendar
from timealign.suites.timepuzzles.fact import Fact


def solve_indices(facts: Iterable[Fact], cal: Calendar | None = None) -> np.ndarray:
    """Algorithm 3: intersect C(t) over the facts in descending information gain; calendar indices of A."""
    cal = cal or get_calendar()
    ordered = sorted(facts, key=cal.information_gain, reverse=True)
    if not ordered:
        return np.arange(len(cal))
    idx = np.flatnonzero(ordered[0].mask(cal))
    for fact in ordered[1:]:
        if not len(idx):
            break
        idx = idx[fact.mask(cal.view(idx))]
    return idx


def solve(facts: Iterable[Fact], cal: Calendar | None = None) -> list[date]:
    """The answer set A (Eq. 1), sorted, over the universal date set D."""
    cal = cal or get_calendar()
    return [date.fromordinal(int(o)) for o in cal.ordinal[solve_indices(facts, cal)]]
