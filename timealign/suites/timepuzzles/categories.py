"""The 16 fact categories of Time Puzzles (Table 2) by level, and rebuilding a fact from a puzzle record."""

from __future__ import annotations

from timealign.suites.timepuzzles.fact import DAY, MONTH, YEAR, Fact
from timealign.suites.timepuzzles.month_day_facts import (
    DayOfMonthFact,
    DayOfMonthRangeFact,
    LunarMonthFact,
    MonthFact,
    MultiWeekdayFact,
    SeasonFact,
    WeekdayFact,
    WeekdayInMonthFact,
)
from timealign.suites.timepuzzles.year_facts import (
    ChineseZodiacFact,
    DecadeFact,
    EventFact,
    ExplicitYearFact,
    KnowledgeBaseEventFact,
    LeapYearFact,
    PersonAliveFact,
    USPresidentFact,
)

CATEGORIES_BY_LEVEL: dict[str, tuple[type[Fact], ...]] = {
    YEAR: (ExplicitYearFact, DecadeFact, LeapYearFact, ChineseZodiacFact, PersonAliveFact, USPresidentFact, EventFact),
    MONTH: (MonthFact, SeasonFact, LunarMonthFact),
    DAY: (WeekdayInMonthFact, DayOfMonthFact, WeekdayFact, MultiWeekdayFact, DayOfMonthRangeFact),
}
# Every category by name (the anchor's knowledge-base events are drawn, never instantiated from a seed date).
FACT_TYPES: dict[str, type[Fact]] = {
    cls.__name__: cls for level in (*CATEGORIES_BY_LEVEL.values(), (KnowledgeBaseEventFact,)) for cls in level
}


def fact_from_dict(data: dict) -> Fact:
    """Rebuild a fact from a record's `{"category", "params"}`."""
    cls = FACT_TYPES[data["category"]]
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data["params"].items()}
    return cls(**params)
