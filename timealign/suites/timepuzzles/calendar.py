"""The universal date set D of Time Puzzles: a day-by-day calendar with Gregorian and Chinese-calendar columns.

Every date of 1850-01-01..2025-12-31 (the paper's "all possible Gregorian dates", bounded: every anchor period lies
inside but for a term with no end yet, and the generator rejects puzzles a later date might satisfy, so the answer
set never depends on D's ends) as numpy columns, so a fact's C(t) is one vectorised mask.
The Chinese calendar (zodiac years start at Chinese New Year; lunar months, leap months named as such) comes from
`lunar-python` (astronomical computation; matches the Hong Kong Observatory tables, e.g. the 1933 leap 5th month,
where the table-based `lunardate` 0.3.0 is off by one day).
"""

from __future__ import annotations

import functools
import math
from datetime import date
from typing import Hashable, Iterable, Protocol

import numpy as np

DATE_MIN = date(1850, 1, 1)
DATE_MAX = date(2025, 12, 31)

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
SEASONS = {"winter": (12, 1, 2), "spring": (3, 4, 5), "summer": (6, 7, 8), "autumn": (9, 10, 11)}
SEASON_OF_MONTH = {m: s for s, months in SEASONS.items() for m in months}
ZODIAC = ("Rat", "Ox", "Tiger", "Rabbit", "Dragon", "Snake", "Horse", "Goat", "Monkey", "Rooster", "Dog", "Pig")


# ---------------------------------------------------------------------------------------------------------------
# Chinese calendar
# ---------------------------------------------------------------------------------------------------------------

_JD_TO_ORDINAL = 1721425  # Julian day number at noon of 0001-01-01 (proleptic Gregorian ordinal 1) is 1721426


@functools.lru_cache(maxsize=None)
def lunar_months(first_year: int, last_year: int) -> tuple[tuple[int, int, int, bool, int], ...]:
    """Chinese lunar months covering [first_year-01-01, last_year-12-31]: (first ordinal, lunar year, month number,
    is leap month, day count), consecutive and sorted, from lunar-python's astronomical calendar."""
    from lunar_python import LunarYear

    months: dict[int, tuple[int, int, int, bool, int]] = {}
    for y in range(first_year - 1, last_year + 2):
        for m in LunarYear.fromYear(y).getMonths():
            start = int(round(m.getFirstJulianDay())) - _JD_TO_ORDINAL
            months[start] = (start, m.getYear(), abs(m.getMonth()), m.getMonth() < 0, m.getDayCount())
    out = [months[k] for k in sorted(months)]
    for a, b in zip(out, out[1:]):
        if a[0] + a[4] != b[0]:
            raise RuntimeError(f"lunar month table has a gap after ordinal {a[0]}")
    if (
        out[0][0] > date(first_year, 1, 1).toordinal()
        or out[-1][0] + out[-1][4] <= date(last_year, 12, 31).toordinal()
    ):
        raise RuntimeError("lunar month table does not cover the date range")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def lunar_of(d: date) -> tuple[int, int, bool]:
    """(lunar year, lunar month, is leap month) of one date, by lunar-python's own Solar -> Lunar conversion (used by
    the scalar predicates: an independent path from the month table of the vectorised calendar)."""
    from lunar_python import Solar

    lunar = Solar.fromYmd(d.year, d.month, d.day).getLunar()
    return lunar.getYear(), abs(lunar.getMonth()), lunar.getMonth() < 0


def zodiac_of_lunar_year(lunar_year: int) -> str:
    return ZODIAC[(lunar_year - 4) % 12]  # 4 CE (and 2020, 2032...) began a Rat year


@functools.lru_cache(maxsize=4)
def _new_years(first_year: int, last_year: int) -> dict[int, int]:
    return {ly: start for start, ly, m, leap, _ in lunar_months(first_year, last_year) if m == 1 and not leap}


def chinese_new_year(year: int) -> date:
    """Gregorian date of the first day of lunar year `year`."""
    table = _new_years(min(year, DATE_MIN.year), max(year + 1, DATE_MAX.year))
    return date.fromordinal(table[year])


# ---------------------------------------------------------------------------------------------------------------
# The day-by-day calendar (the universal date set D)
# ---------------------------------------------------------------------------------------------------------------


class Constraint(Protocol):
    """What the calendar needs of a fact: a cache key and the mask of the dates that satisfy it."""

    def key(self) -> Hashable: ...

    def mask(self, calendar: "Calendar") -> np.ndarray: ...


class CalendarView:
    """Calendar columns restricted to candidate indices, computed on first use."""

    def __init__(self, cal: "Calendar", idx: np.ndarray):
        self._cal, self._idx = cal, idx

    def __getattr__(self, name: str) -> np.ndarray:
        value = getattr(self._cal, name)[self._idx]
        setattr(self, name, value)
        return value


class Calendar:
    """Every date of [start, end] with numpy columns: ordinal, year, month, day, weekday (0 = Monday), days_in_month,
    leap (Gregorian leap year), lunar_year, lunar_month, lunar_leap."""

    def __init__(self, start: date = DATE_MIN, end: date = DATE_MAX):
        self.start, self.end = start, end
        self.ordinal = np.arange(start.toordinal(), end.toordinal() + 1, dtype=np.int64)
        d64 = (self.ordinal - date(1970, 1, 1).toordinal()).astype("datetime64[D]")
        months = d64.astype("datetime64[M]")
        self.year = d64.astype("datetime64[Y]").astype(np.int64) + 1970
        self.month = months.astype(np.int64) % 12 + 1
        month_start = months.astype("datetime64[D]")
        self.day = (d64 - month_start).astype(np.int64) + 1
        self.days_in_month = ((months + 1).astype("datetime64[D]") - month_start).astype(np.int64)
        self.weekday = (self.ordinal + 6) % 7  # ordinal 1 (0001-01-01) was a Monday
        self.leap = (self.year % 4 == 0) & ((self.year % 100 != 0) | (self.year % 400 == 0))
        self.lunar_year = np.zeros_like(self.ordinal)
        self.lunar_month = np.zeros_like(self.ordinal)
        self.lunar_leap = np.zeros(len(self.ordinal), dtype=bool)
        o0 = int(self.ordinal[0])
        for first, ly, m, leap, count in lunar_months(start.year, end.year):
            lo, hi = max(first - o0, 0), min(first + count - o0, len(self.ordinal))
            if lo < hi:
                self.lunar_year[lo:hi], self.lunar_month[lo:hi], self.lunar_leap[lo:hi] = ly, m, leap
        self.zodiac = (self.lunar_year - 4) % 12
        self.log2_size = math.log2(len(self.ordinal))
        self._counts: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.ordinal)

    def view(self, idx: np.ndarray) -> CalendarView:
        return CalendarView(self, idx)

    def index(self, d: date) -> int:
        return d.toordinal() - int(self.ordinal[0])

    def count(self, fact: Constraint) -> int:
        """|C(t)| over D (cached by the fact's key)."""
        key = fact.key()
        if key not in self._counts:
            self._counts[key] = int(np.count_nonzero(fact.mask(self)))
        return self._counts[key]

    def information_gain(self, fact: Constraint) -> float:
        """Eq. 2: IG(t) = log2|D| - log2|C(t)|."""
        n = self.count(fact)
        return math.inf if n == 0 else self.log2_size - math.log2(n)


@functools.lru_cache(maxsize=4)
def get_calendar(start: date = DATE_MIN, end: date = DATE_MAX) -> Calendar:
    return Calendar(start, end)


def in_ranges(ordinals: np.ndarray, ranges: Iterable[tuple[int, int]]) -> np.ndarray:
    out = np.zeros(len(ordinals), dtype=bool)
    for lo, hi in ranges:
        out |= (ordinals >= lo) & (ordinals <= hi)
    return out


def periods_text(periods: list[tuple[int, int]]) -> str:
    return "; ".join(f"{date.fromordinal(a).isoformat()} to {date.fromordinal(b).isoformat()}" for a, b in periods)
