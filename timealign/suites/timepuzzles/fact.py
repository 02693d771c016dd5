"""The fact (temporal constraint) interface of Time Puzzles: a predicate over dates with two renderings.

A fact t is a predicate over dates, vectorised over the calendar (`mask`, giving C(t)) and written again as an
independent scalar (`holds`, cross-checked in the tests), with two renderings: `implicit` (the default dataset:
events, people, zodiac...) and `explicit` (the paired dataset: the relevant dates spelled out), paper Sec. 2.2.
The 16 categories of Table 2 are in `year_facts` and `month_day_facts`; `categories` lists them.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from datetime import date
from typing import ClassVar

import numpy as np

from timealign.suites.timepuzzles.calendar import Calendar

YEAR, MONTH, DAY, VARIOUS = "YEAR", "MONTH", "DAY", "VARIOUS"
LEVELS = (YEAR, MONTH, DAY)


def ordinal_suffix(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def and_list(items: list[str], word: str = "and") -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


@dataclass(frozen=True)
class Fact:
    """A constraint on calendar dates. Subclasses are dataclasses whose fields are the JSON-able parameters."""

    level: ClassVar[str]
    needs_lunar: ClassVar[bool] = False  # the scalar predicate converts to the Chinese calendar (slow)
    uses_window: ClassVar[bool] = False  # the explicit rendering lists the periods a window allows

    @property
    def category(self) -> str:
        return type(self).__name__

    def params(self) -> dict:
        return {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)
        }

    def key(self) -> tuple:
        return (self.category, *(getattr(self, f.name) for f in dataclasses.fields(self)))

    # -- semantics ---------------------------------------------------------------------------------------------
    def mask(self, v) -> np.ndarray:  # vectorised over a Calendar or a CalendarView
        raise NotImplementedError

    def holds(self, d: date) -> bool:  # scalar, written independently of `mask`
        raise NotImplementedError

    def ambiguous_mask(self, v) -> np.ndarray | None:
        """Dates whose truth value depends on the reading of the fact (None: no such dates)."""
        return None

    def may_hold_past_range_end(self, v) -> np.ndarray:
        """Dates after D's end (`v` a calendar of them) on which the fact may hold. Calendar facts are exact and
        knowledge-base periods are closed, so by default this is `mask`; facts whose tables stop with D say True."""
        return self.mask(v)

    # -- rendering ---------------------------------------------------------------------------------------------
    def implicit(self) -> str:
        raise NotImplementedError

    def explicit(self, window: np.ndarray | None = None, cal: Calendar | None = None) -> str:
        """The explicit-date rendering; `window` (calendar indices) is what the anchor and the year-level facts
        leave possible, for facts whose dates are listed per period."""
        return self.implicit()

    def explicit_periods(self, window: np.ndarray, cal: Calendar) -> list[tuple[int, int]] | None:
        """The periods the explicit rendering lists (None for facts that list none)."""
        return None

    # -- generation ----------------------------------------------------------------------------------------------
    @classmethod
    def instantiate(cls, rng: random.Random, seed: date, used: set, cal: Calendar) -> "Fact | None":
        """A random fact of this category that holds on `seed` (None when the category cannot describe it)."""
        raise NotImplementedError
