"""A TCP problem prototype: two participants, three tasks, one dependency type; day expressions; answer pools."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta

TASKS = ("A", "B", "C")
DEPENDENCY_TYPES: dict[str, tuple[tuple[str, str], ...]] = {  # Table 2
    "A->B, A->C": (("A", "B"), ("A", "C")),
    "A->B, B->C": (("A", "B"), ("B", "C")),
    "A->C, B->C": (("A", "C"), ("B", "C")),
}
KINDS = ("short", "long")
AGENT_NAMES = ("Agent1", "Agent2")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SHORT_HORIZON_HOURS = 24  # "completed within 1 day"; random baseline: one of 24 hours
LONG_HORIZON_DAYS = 7  # "span up to 7 days"; random baseline: one of 7 days
# Whole-hour offsets only (the problems are on the hour). The prototype states the offset next to the name.
TIMEZONES: dict[str, int] = {
    "GMT": 0,
    "CET": 1,
    "EET": 2,
    "MSK": 3,
    "GST": 4,
    "PKT": 5,
    "ICT": 7,
    "SGT": 8,
    "JST": 9,
    "AEST": 10,
    "NZST": 12,
    "EDT": -4,
    "EST": -5,
    "CDT": -5,
    "MDT": -6,
    "PDT": -7,
    "PST": -8,
    "AKST": -9,
    "HST": -10,
}
READINGS = {
    "shift_rule": ("paper", "periodic"),
    "next_reading": ("calendar", "first_after", "sunday_week"),
    "break_after_mode": ("fatigue", "contiguous"),
    "task_pause": ("whole", "pause"),
    # short problems: on which clock times a task may start ("hour": on the hour, as the prompt's hours are;
    # "half_hour": also at half past, which a rest rule over runs of hours can turn into an earlier completion)
    "start_grid": ("hour", "half_hour"),
}
SLOTS_PER_HOUR = {"hour": 1, "half_hour": 2}
VARIANTS = ("direct", "cot")
ANSWER_FORMAT = {"short": "YYYY-MM-DD HH:MM GMT", "long": "YYYY-MM-DD"}

# --------------------------------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class ShortAgent:
    """One participant of a short problem; hours are local clock hours in time zone `tz` (GMT`offset`)."""

    tz: str
    offset: int
    work: tuple[int, int]
    meal: tuple[int, int]
    break_between: int | None = None  # hours between any two of their tasks
    max_consecutive: int | None = None  # "I can work up to N consecutive hours, ..."
    min_rest: int | None = None  # "... then must rest at least M hour(s) before working again"


@dataclass(frozen=True)
class LongAgent:
    """One participant of a long problem (days)."""

    weekdays_only: bool
    break_between: int | None = None
    max_consecutive: int | None = None
    min_rest: int | None = None
    unavailable: tuple[str, ...] = ()  # relative day expressions, e.g. "next Wednesday"


@dataclass(frozen=True)
class Problem:
    """A TCP prototype. Short: `start`/`conversation` are "YYYY-MM-DD HH:MM" (GMT). Long: `start` is a day
    expression relative to `conversation` ("YYYY-MM-DD")."""

    kind: str
    dependency_type: str
    durations: tuple[int, int, int]
    agents: tuple
    start: str
    conversation: str
    lead: int = 1  # who states the start and answers the questions (Agent2 in Fig. 3)
    dep_speakers: tuple[int, ...] = (0,)  # one entry: both dependencies on one line; two: one line each

    @property
    def deps(self) -> tuple[tuple[str, str], ...]:
        return DEPENDENCY_TYPES[self.dependency_type]


def problem_to_dict(p: Problem) -> dict:
    return json.loads(json.dumps(asdict(p)))


def problem_from_dict(d: dict) -> Problem:
    cls = ShortAgent if d["kind"] == "short" else LongAgent
    agents = []
    for a in d["agents"]:
        a = dict(a)
        for key in ("work", "meal", "unavailable"):
            if key in a:
                a[key] = tuple(a[key])
        agents.append(cls(**a))
    return Problem(
        kind=d["kind"],
        dependency_type=d["dependency_type"],
        durations=tuple(d["durations"]),
        agents=tuple(agents),
        start=d["start"],
        conversation=d["conversation"],
        lead=d["lead"],
        dep_speakers=tuple(d["dep_speakers"]),
    )


# ------------------------------------------------------------------------------------------------ day expressions


def parse_dt(text: str) -> datetime:
    return datetime.strptime(text.replace(" GMT", "").strip(), "%Y-%m-%d %H:%M")


def resolve_day(expr: str, today: date, reading: str = "calendar") -> date:
    """A day expression relative to `today`: tomorrow, the day after tomorrow, this/next <weekday>, YYYY-MM-DD.

    "next <weekday>" by `reading` (see READINGS): "calendar" = in the following Monday-to-Sunday week,
    "sunday_week" = in the following Sunday-to-Saturday week, "first_after" = the first such weekday after today.
    """
    e = expr.strip().lower()
    if e.startswith("on "):
        e = e[3:]
    if e == "today":
        return today
    if e == "tomorrow":
        return today + timedelta(days=1)
    if e == "the day after tomorrow":
        return today + timedelta(days=2)
    m = re.fullmatch(r"(this|next) (\w+)", e)
    if m and m.group(2).capitalize() in WEEKDAYS:
        target, w = WEEKDAYS.index(m.group(2).capitalize()), today.weekday()
        if m.group(1) == "this":
            if target < w:
                raise ValueError(f"'{expr}' on a {WEEKDAYS[w]} is in the past")
            return today + timedelta(days=target - w)
        if reading == "calendar":
            return today + timedelta(days=7 - w + target)
        if reading == "first_after":
            return today + timedelta(days=(target - w - 1) % 7 + 1)
        if reading == "sunday_week":  # that weekday in the following Sunday-to-Saturday week
            w_sun, target_sun = (w + 1) % 7, (target + 1) % 7
            return today + timedelta(days=7 - w_sun + target_sun)
        raise ValueError(f"unknown reading {reading!r}")
    try:
        return date.fromisoformat(e)
    except ValueError:
        raise ValueError(f"cannot resolve day expression {expr!r}") from None


def next_is_unambiguous(expr: str, today: date) -> bool:
    """Whether every reading of "next" resolves the day expression to one date (e.g. not "next Saturday" said on a
    Sunday, where weeks starting on Sunday and on Monday disagree)."""
    return len({resolve_day(expr, today, r) for r in READINGS["next_reading"]}) == 1


def project_start(p: Problem, next_reading: str = "calendar") -> datetime:
    """The project start as a datetime (GMT for short problems, midnight of the start day for long ones)."""
    if p.kind == "short":
        return parse_dt(p.start)
    conv = date.fromisoformat(p.conversation)
    d = resolve_day(p.start, conv, next_reading)
    return datetime(d.year, d.month, d.day)


def answer_candidates(item: dict) -> list[str]:
    """The random baseline's pool (Sec. 4.1): the 24 hours after the start (short), the 7 project days (long)."""
    start = parse_dt(item["project_start"])
    if item["kind"] == "short":
        return [(start + timedelta(hours=h)).strftime("%Y-%m-%d %H:%M GMT") for h in range(1, SHORT_HORIZON_HOURS + 1)]
    return [(start.date() + timedelta(days=d)).isoformat() for d in range(LONG_HORIZON_DAYS)]
