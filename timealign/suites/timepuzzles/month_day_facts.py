"""MONTH- and DAY-level facts of Time Puzzles (Table 2): months, seasons, lunar months, weekdays, days."""

from __future__ import annotations

import calendar as pycal
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

import numpy as np

from timealign.suites.timepuzzles.calendar import (
    MONTHS,
    SEASON_OF_MONTH,
    SEASONS,
    WEEKDAYS,
    lunar_months,
    lunar_of,
    periods_text,
)
from timealign.suites.timepuzzles.fact import DAY, MONTH, Fact, and_list, ordinal_suffix

# -- MONTH level -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MonthFact(Fact):
    month: int
    level: ClassVar[str] = MONTH

    def mask(self, v):
        return v.month == self.month

    def holds(self, d):
        return d.strftime("%m") == f"{self.month:02d}"

    def implicit(self):
        return f"The month is {MONTHS[self.month - 1]}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(seed.month)


@dataclass(frozen=True)
class SeasonFact(Fact):
    season: str
    level: ClassVar[str] = MONTH

    def mask(self, v):
        return np.isin(v.month, SEASONS[self.season])

    def holds(self, d):
        return SEASON_OF_MONTH[d.month] == self.season

    def implicit(self):
        return f"The date is in {self.season}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(SEASON_OF_MONTH[seed.month])


@dataclass(frozen=True)
class LunarMonthFact(Fact):
    month: int
    leap: bool
    level: ClassVar[str] = MONTH
    needs_lunar: ClassVar[bool] = True
    uses_window: ClassVar[bool] = True

    def mask(self, v):
        return (v.lunar_month == self.month) & (v.lunar_leap == self.leap)

    def holds(self, d):
        _, m, leap = lunar_of(d)
        return m == self.month and leap == self.leap

    def implicit(self):
        which = (
            f"the leap {ordinal_suffix(self.month)} month"
            if self.leap
            else f"the {ordinal_suffix(self.month)} month (not a leap month)"
        )
        return f"In the Chinese lunar calendar, the date falls in {which}."

    def explicit_periods(self, window, cal):
        # Whole lunar months (this month number and leap flag) of the lunar years the window reaches into.
        years = set(cal.lunar_year[window[self.mask(cal.view(window))]].tolist())
        out = []
        for first, ly, m, leap, count in lunar_months(cal.start.year, cal.end.year):
            if ly in years and m == self.month and leap == self.leap:
                out.append((first, first + count - 1))
        return out

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
        i = cal.index(seed)
        return cls(int(cal.lunar_month[i]), bool(cal.lunar_leap[i]))


# -- DAY level ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeekdayInMonthFact(Fact):
    weekday: int  # 0 = Monday
    n: int  # 1..5, or -1 for the last one of the month
    level: ClassVar[str] = DAY

    def mask(self, v):
        if self.n == -1:
            return (v.weekday == self.weekday) & (v.day + 7 > v.days_in_month)
        return (v.weekday == self.weekday) & ((v.day + 6) // 7 == self.n)

    def holds(self, d):
        # The month's days that fall on this weekday, from the calendar module's week grid.
        days = [week[self.weekday] for week in pycal.monthcalendar(d.year, d.month) if week[self.weekday]]
        if self.n == -1:
            return d.day == days[-1]
        return len(days) >= self.n and d.day == days[self.n - 1]

    def implicit(self):
        which = "last" if self.n == -1 else ordinal_suffix(self.n)
        return f"It is the {which} {WEEKDAYS[self.weekday]} of the month."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        last = seed.day + 7 > pycal.monthrange(seed.year, seed.month)[1]
        n = -1 if last and rng.random() < 0.5 else (seed.day + 6) // 7
        return cls(seed.weekday(), n)


@dataclass(frozen=True)
class DayOfMonthFact(Fact):
    day: int  # 1..31, or -1 for the last day of the month
    wording: str = "number"  # "number" ("the 15th day"), "first" (day 1), "last" (day -1)
    level: ClassVar[str] = DAY

    def mask(self, v):
        return v.day == v.days_in_month if self.day == -1 else v.day == self.day

    def holds(self, d):
        if self.day == -1:
            return (d + timedelta(days=1)).month != d.month
        return d.day == self.day

    def implicit(self):
        if self.wording == "first":
            return "It is the first day of the month."
        if self.wording == "last":
            return "It is the last day of the month."
        return f"It is the {ordinal_suffix(self.day)} day of the month."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        if seed.day == 1 and rng.random() < 0.5:
            return cls(1, "first")
        if seed.day == pycal.monthrange(seed.year, seed.month)[1] and rng.random() < 0.5:
            return cls(-1, "last")
        return cls(seed.day, "number")


@dataclass(frozen=True)
class WeekdayFact(Fact):
    weekday: int
    level: ClassVar[str] = DAY

    def mask(self, v):
        return v.weekday == self.weekday

    def holds(self, d):
        return d.strftime("%A") == WEEKDAYS[self.weekday]

    def implicit(self):
        return f"It is a {WEEKDAYS[self.weekday]}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        return cls(seed.weekday())


@dataclass(frozen=True)
class MultiWeekdayFact(Fact):
    weekdays: tuple[int, ...]
    level: ClassVar[str] = DAY

    def mask(self, v):
        return np.isin(v.weekday, self.weekdays)

    def holds(self, d):
        return d.isoweekday() - 1 in self.weekdays

    def implicit(self):
        return f"The day of the week is {and_list([WEEKDAYS[w] for w in self.weekdays], 'or')}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        others = rng.sample([w for w in range(7) if w != seed.weekday()], rng.choice((1, 2)))
        return cls(tuple(sorted([seed.weekday(), *others])))


@dataclass(frozen=True)
class DayOfMonthRangeFact(Fact):
    relation: str  # "before" (day < value) or "after" (day > value)
    value: int
    level: ClassVar[str] = DAY

    def mask(self, v):
        return v.day < self.value if self.relation == "before" else v.day > self.value

    def holds(self, d):
        return d.day in (range(1, self.value) if self.relation == "before" else range(self.value + 1, 32))

    def implicit(self):
        return f"The day of the month is {self.relation} the {ordinal_suffix(self.value)}."

    @classmethod
    def instantiate(cls, rng, seed, used, cal):
        options = [("before", k) for k in range(seed.day + 1, 29)] + [("after", k) for k in range(2, seed.day)]
        return cls(*rng.choice(options)) if options else None
