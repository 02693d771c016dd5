"""YEAR-level facts of Time Puzzles (Table 2), and the knowledge-base events that anchor a puzzle.

Facts drawing on world knowledge (people, US presidents, sports events, dated events) read the hand-written
knowledge base `kb`; those whose truth on some dates depends on the reading (a presidential transition day, the
disputed ends of some periods, the 1906, 2020 and 2021 Summer Olympics) say so through `ambiguous_mask`. A term
with no end yet (Donald Trump's second) holds past D's end; the generator rejects puzzles that could reach there.
"""

from __future__ import annotations

import calendar as pycal
import random
from dataclasses import dataclass
from datetime import date
from typing import ClassVar

import numpy as np

from timealign.suites.timepuzzles import kb
from timealign.suites.timepuzzles.calendar import (
    ZODIAC,
    chinese_new_year,
    in_ranges,
    lunar_of,
    periods_text,
    zodiac_of_lunar_year,
)
from timealign.suites.timepuzzles.fact import VARIOUS, YEAR, Fact, and_list

SPORT_EVENTS = {
    "summer_olympics": (
        "the Summer Olympic Games",
        "were",
        kb.SUMMER_OLYMPIC_YEARS,
        kb.SUMMER_OLYMPIC_AMBIGUOUS_YEARS,
    ),
    "winter_olympics": ("the Winter Olympic Games", "were", kb.WINTER_OLYMPIC_YEARS, ()),
    "fifa_world_cup": ("a FIFA World Cup", "was", kb.FIFA_WORLD_CUP_YEARS, ()),
}
DAY_EVENT_RELATIONS = (("same_year", 0.45), ("same_month", 0.45), ("same_day", 0.10))


@dataclass(frozen=True)
class ExplicitYearFact(Fact):
    year: int
    level: ClassVar[str] = YEAR

    def mask(self, v):
        return v.year == self.year

    def holds(self, d):
        return d.year == self.year

    def implicit(self):
        return f"The year is {self.year}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(seed.year)


@dataclass(frozen=True)
class DecadeFact(Fact):
    decade: int
    level: ClassVar[str] = YEAR

    def mask(self, v):
        return (v.year >= self.decade) & (v.year <= self.decade + 9)

    def holds(self, d):
        return str(d.year)[:3] == str(self.decade)[:3]

    def implicit(self):
        return f"The date is in the {self.decade}s."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(seed.year - seed.year % 10)


@dataclass(frozen=True)
class LeapYearFact(Fact):
    leap: bool
    level: ClassVar[str] = YEAR

    def mask(self, v):
        return v.leap == self.leap

    def holds(self, d):
        return pycal.isleap(d.year) == self.leap

    def implicit(self):
        return "The year is a leap year." if self.leap else "The year is not a leap year."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(pycal.isleap(seed.year))


@dataclass(frozen=True)
class ChineseZodiacFact(Fact):
    animal: str
    level: ClassVar[str] = YEAR
    needs_lunar: ClassVar[bool] = True
    uses_window: ClassVar[bool] = True

    def mask(self, v):
        return v.zodiac == ZODIAC.index(self.animal)

    def holds(self, d):
        return zodiac_of_lunar_year(lunar_of(d)[0]) == self.animal

    def implicit(self):
        return (
            f"The date falls in a Year of the {self.animal} of the Chinese zodiac (a zodiac year begins on "
            f"Chinese New Year)."
        )

    def explicit_periods(self, window, cal):
        hit = window[cal.zodiac[window] == ZODIAC.index(self.animal)]
        periods = []
        for ly in sorted(set(cal.lunar_year[hit].tolist())):
            periods.append((chinese_new_year(ly).toordinal(), chinese_new_year(ly + 1).toordinal() - 1))
        return periods

    def explicit(self, window=None, cal=None):
        if window is None:
            return self.implicit()
        return (
            self.implicit()[:-1]
            + ", i.e. it lies in one of these periods: "
            + periods_text(self.explicit_periods(window, cal))
            + "."
        )

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(ZODIAC[int(cal.zodiac[cal.index(seed)])])


def _person(name: str) -> tuple[int, int]:
    for n, born, died in kb.PEOPLE:
        if n == name:
            return kb.iso(born).toordinal(), kb.iso(died).toordinal()
    raise KeyError(name)


@dataclass(frozen=True)
class PersonAliveFact(Fact):
    name: str
    level: ClassVar[str] = YEAR

    def mask(self, v):
        lo, hi = _person(self.name)
        return (v.ordinal >= lo) & (v.ordinal <= hi)

    def holds(self, d):
        for n, born, died in kb.PEOPLE:
            if n == self.name:
                return born <= d.isoformat() <= died
        raise KeyError(self.name)

    def implicit(self):
        return f"{self.name} was alive on this date."

    def explicit(self, window=None, cal=None):
        lo, hi = _person(self.name)
        return (
            f"{self.name} (born {date.fromordinal(lo).isoformat()}, died {date.fromordinal(hi).isoformat()}) "
            f"was alive on this date."
        )

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        s = seed.isoformat()
        names = [n for n, born, died in kb.PEOPLE if born <= s <= died and ("person", n) not in used]
        return cls(rng.choice(names)) if names else None


OPEN_END = date.max.toordinal()  # the last day of a term still running in the knowledge base


def _terms(name: str) -> list[tuple[int, int]]:
    for n, terms in kb.US_PRESIDENTS:
        if n == name:
            return [(kb.iso(a).toordinal(), kb.iso(b).toordinal() if b else OPEN_END) for a, b in terms]
    raise KeyError(name)


@dataclass(frozen=True)
class USPresidentFact(Fact):
    name: str
    level: ClassVar[str] = YEAR

    def mask(self, v):
        return in_ranges(v.ordinal, _terms(self.name))

    def holds(self, d):
        for n, terms in kb.US_PRESIDENTS:
            if n == self.name:
                return any(kb.iso(a) <= d and (b is None or d <= kb.iso(b)) for a, b in terms)
        raise KeyError(self.name)

    def ambiguous_mask(self, v):
        # Transition days: the outgoing and the incoming president both held office that day.
        days = {o for a, b in _terms(self.name) for o in (a, b) if o != OPEN_END}
        return np.isin(v.ordinal, list(days))

    def implicit(self):
        return f"{self.name} was the President of the United States on this date."

    def explicit(self, window=None, cal=None):
        parts = [
            f"from {date.fromordinal(a).isoformat()} to {date.fromordinal(b).isoformat()}"
            if b != OPEN_END
            else f"from {date.fromordinal(a).isoformat()} on"
            for a, b in _terms(self.name)
        ]
        return f"{self.name} was the President of the United States on this date (in office {and_list(parts)})."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        o = seed.toordinal()
        names = [
            n for n, _ in kb.US_PRESIDENTS if ("president", n) not in used and any(a <= o <= b for a, b in _terms(n))
        ]
        return cls(rng.choice(names)) if names else None


@dataclass(frozen=True)
class EventFact(Fact):
    """Whether the Summer/Winter Olympics or a FIFA World Cup took place in the year."""

    event: str
    held: bool
    level: ClassVar[str] = YEAR
    uses_window: ClassVar[bool] = True

    def mask(self, v):
        return np.isin(v.year, SPORT_EVENTS[self.event][2]) == self.held

    def holds(self, d):
        return (d.year in SPORT_EVENTS[self.event][2]) == self.held

    def ambiguous_mask(self, v):
        ambiguous = SPORT_EVENTS[self.event][3]
        return np.isin(v.year, ambiguous) if ambiguous else None

    def may_hold_past_range_end(self, v):
        # The host-year tables stop with D: whether the games are held in a later year is not known here.
        return np.ones(len(v.year), dtype=bool)

    def implicit(self):
        name, verb, _, _ = SPORT_EVENTS[self.event]
        if self.held:
            return f"{name[0].upper()}{name[1:]} {verb} held in this year."
        name = name.replace("a FIFA", "FIFA")
        return f"No {name.replace('the ', '')} {verb} held in this year."

    def explicit(self, window=None, cal=None):
        if window is None:
            return self.implicit()
        y0, y1 = int(cal.year[window].min()), int(cal.year[window].max())
        name, verb, years, _ = SPORT_EVENTS[self.event]
        listed = [str(y) for y in years if y0 <= y <= y1]
        plural = {
            "the Summer Olympic Games": "the Summer Olympic Games",
            "the Winter Olympic Games": "the Winter Olympic Games",
            "a FIFA World Cup": "FIFA World Cups",
        }[name]
        span = f"in {y0}" if y0 == y1 else f"between {y0} and {y1}"
        if not listed:
            ref = f"no {plural.replace('the ', '')} were held {span}"
        elif y0 == y1:
            ref = f"{plural} were held in {y0}"
        else:
            ref = f"{span}, {plural} were held in {and_list(listed)}"
        return self.implicit()[:-1] + f" (for reference, {ref})."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        event = rng.choice(sorted(SPORT_EVENTS))
        return cls(event, seed.year in SPORT_EVENTS[event][2])


# -- knowledge-base events (the anchor) ---------------------------------------------------------------------------


def _kb_event(name: str) -> tuple[int, int, bool]:
    for n, day in kb.DAY_EVENTS:
        if n == name:
            o = kb.iso(day).toordinal()
            return o, o, False
    for n, start, end, ambiguous_ends in kb.SPAN_EVENTS:
        if n == name:
            return kb.iso(start).toordinal(), kb.iso(end).toordinal(), ambiguous_ends
    raise KeyError(name)


@dataclass(frozen=True)
class KnowledgeBaseEventFact(Fact):
    """The date relates to a dated event: same year, same month (of that year), same day, or during a period."""

    event: str
    relation: str  # same_year | same_month | same_day | during
    level: ClassVar[str] = VARIOUS

    def window(self) -> tuple[int, int]:
        lo, hi, _ = _kb_event(self.event)
        d = date.fromordinal(lo)
        if self.relation == "same_year":
            return date(d.year, 1, 1).toordinal(), date(d.year, 12, 31).toordinal()
        if self.relation == "same_month":
            return (
                date(d.year, d.month, 1).toordinal(),
                date(d.year, d.month, pycal.monthrange(d.year, d.month)[1]).toordinal(),
            )
        return lo, hi

    def mask(self, v):
        lo, hi = self.window()
        return (v.ordinal >= lo) & (v.ordinal <= hi)

    def holds(self, d):
        lo, hi, _ = _kb_event(self.event)
        e = date.fromordinal(lo)
        if self.relation == "same_year":
            return d.year == e.year
        if self.relation == "same_month":
            return (d.year, d.month) == (e.year, e.month)
        return date.fromordinal(lo) <= d <= date.fromordinal(hi)

    def ambiguous_mask(self, v):
        lo, hi, ambiguous_ends = _kb_event(self.event)
        return np.isin(v.ordinal, [lo, hi]) if (self.relation == "during" and ambiguous_ends) else None

    def implicit(self):
        return {
            "same_year": f"The date is in the same year as {self.event}.",
            "same_month": f"The date is in the same month (of the same year) as {self.event}.",
            "same_day": f"The date is the day of {self.event}.",
            # Stated, because "during" alone leaves open whether the last day counts (it decides 142 of 3,120 answers).
            "during": f"The date falls during {self.event}, its first and last days included.",
        }[self.relation]

    def explicit(self, window=None, cal=None):
        lo, hi, _ = _kb_event(self.event)
        if lo == hi:
            return self.implicit()[:-1] + f", which took place on {date.fromordinal(lo).isoformat()}."
        return (
            f"The date falls during {self.event}, which lasted from {date.fromordinal(lo).isoformat()} to "
            f"{date.fromordinal(hi).isoformat()}, both days included."
        )

    @classmethod
    def instantiate(cls, rng, seed, used, cal):  # anchors are drawn, never instantiated from a seed (Algorithm 2)
        return None

    @classmethod
    def draw(cls, rng: random.Random) -> "KnowledgeBaseEventFact":
        n_day, n_span = len(kb.DAY_EVENTS), len(kb.SPAN_EVENTS)
        i = rng.randrange(n_day + n_span)
        if i >= n_day:
            return cls(kb.SPAN_EVENTS[i - n_day][0], "during")
        relations, weights = zip(*DAY_EVENT_RELATIONS)
        return cls(kb.DAY_EVENTS[i][0], rng.choices(relations, weights)[0])
