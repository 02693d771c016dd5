"""TCP solving: the earliest completion by exhaustive search over task assignments and start units.

`answers_by_reading` solves a prototype under every combination of the readings the paper leaves implicit
(`problem.READINGS`; see the package docstring), so the generator can keep only items that do not hinge on one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Iterable, Sequence

from timealign.suites.tcp.problem import (
    AGENT_NAMES,
    LONG_HORIZON_DAYS,
    READINGS,
    SHORT_HORIZON_HOURS,
    SLOTS_PER_HOUR,
    TASKS,
    LongAgent,
    Problem,
    ShortAgent,
    project_start,
    resolve_day,
)


@dataclass(frozen=True)
class UnitProblem:
    """The scheduling core: units (hours or days) 0..horizon-1 counted from the project start."""

    durations: tuple[int, ...]
    deps: tuple[tuple[int, int], ...]  # (before, after) task indices
    available: tuple[tuple[bool, ...], ...]  # [agent][unit]
    break_between: tuple[int | None, ...]
    break_after: tuple[tuple[int, int] | None, ...]  # (max consecutive, min rest) per agent
    horizon: int


def fatigue_ok(units: Iterable[int], max_consecutive: int, min_rest: int) -> bool:
    """Worked units since the last rest of >= min_rest free units never exceed max_consecutive."""
    count, prev = 0, None
    for u in sorted(units):
        if prev is not None and u - prev - 1 >= min_rest:
            count = 0
        count += 1
        if count > max_consecutive:
            return False
        prev = u
    return True


def contiguous_ok(units: Iterable[int], max_consecutive: int, min_rest: int) -> bool:
    """Each unbroken run of work is at most max_consecutive long; a run of exactly that length is followed by at
    least min_rest free units."""
    runs: list[list[int]] = []
    for u in sorted(units):
        if runs and u == runs[-1][1] + 1:
            runs[-1][1] = u
        else:
            runs.append([u, u])
    for i, (a, b) in enumerate(runs):
        length = b - a + 1
        if length > max_consecutive:
            return False
        if length == max_consecutive and i + 1 < len(runs) and runs[i + 1][0] - b - 1 < min_rest:
            return False
    return True


def _topo_order(n: int, deps: Sequence[tuple[int, int]]) -> list[int]:
    order, placed = [], set()
    while len(order) < n:
        for t in range(n):
            if t not in placed and all(a in placed for a, b in deps if b == t):
                order.append(t)
                placed.add(t)
                break
        else:
            raise ValueError("dependency cycle")
    return order


def task_end(available: Sequence[bool], start: int, duration: int, task_pause: str = "whole") -> int | None:
    """The unit after the last worked unit of a task begun at `start`, or None if it cannot be placed there.
    "whole": the task takes `duration` consecutive available units; "pause": it takes the first `duration`
    available units from `start` on, pausing over the units in between (the assignee's days off)."""
    if start >= len(available) or not available[start]:
        return None
    if task_pause == "whole":
        end = start + duration
        return end if end <= len(available) and all(available[start:end]) else None
    if task_pause != "pause":
        raise ValueError(f"unknown task_pause {task_pause!r}")
    worked = [u for u in range(start, len(available)) if available[u]][:duration]
    return worked[-1] + 1 if len(worked) == duration else None


def solve_units(
    up: UnitProblem, break_after_mode: str = "fatigue", task_pause: str = "whole"
) -> tuple[int | None, list[tuple[int, int]]]:
    """Exhaustive search: the minimal completion unit (end of the last task) and one optimal plan
    [(agent, start) per task], or (None, []) when nothing fits in the horizon."""
    check_rest = {"fatigue": fatigue_ok, "contiguous": contiguous_ok}[break_after_mode]
    n_tasks, n_agents = len(up.durations), len(up.available)
    order = _topo_order(n_tasks, up.deps)
    preds = [[a for a, b in up.deps if b == t] for t in range(n_tasks)]
    # (start, end) placements per task and agent; ends never decrease with the start (the search relies on it).
    starts = [
        [
            [(s, e) for s in range(up.horizon) if (e := task_end(up.available[g], s, d, task_pause)) is not None]
            for g in range(n_agents)
        ]
        for d in up.durations
    ]
    best = [up.horizon + 1, []]
    plan: dict[int, tuple[int, int, int]] = {}  # task -> (agent, start, end)

    def agent_rules_ok() -> bool:
        for g in range(n_agents):
            rule = up.break_after[g]
            if rule is None:
                continue
            units = [u for a, s, e in plan.values() if a == g for u in range(s, e) if up.available[g][u]]
            if units and not check_rest(units, *rule):
                return False
        return True

    def rec(k: int) -> None:
        if k == n_tasks:
            if agent_rules_ok():
                end = max(e for _, _, e in plan.values())
                if end < best[0]:
                    best[0], best[1] = end, [(plan[t][0], plan[t][1]) for t in range(n_tasks)]
            return
        t = order[k]
        ready = max((plan[p][2] for p in preds[t]), default=0)
        for g in range(n_agents):
            gap = up.break_between[g] or 0
            mine = [(s2, e2) for a, s2, e2 in plan.values() if a == g]
            for s, e in starts[t][g]:
                if s < ready:
                    continue
                if e >= best[0]:
                    break
                if any(s < e2 + gap and s2 < e + gap for s2, e2 in mine):  # overlap or too short a break
                    continue
                plan[t] = (g, s, e)
                rec(k + 1)
                del plan[t]

    rec(0)
    return (None, []) if best[0] > up.horizon else (best[0], best[1])


def short_availability(agent: ShortAgent, start: datetime, horizon: int, shift_rule: str = "paper") -> list[bool]:
    """Hour slots [start + u h, start + (u+1) h) in which the agent can work (GMT)."""
    avail = [False] * horizon
    for day in range(-2, horizon // 24 + 3):
        local_date = start.date() + timedelta(days=day)
        shift_start = datetime.combine(local_date, datetime.min.time()) + timedelta(hours=agent.work[0] - agent.offset)
        if shift_rule == "paper" and shift_start < start:
            continue
        if shift_rule not in ("paper", "periodic"):
            raise ValueError(f"unknown shift_rule {shift_rule!r}")
        for h in range(agent.work[0], agent.work[1]):
            if agent.meal[0] <= h < agent.meal[1]:
                continue
            slot = shift_start + timedelta(hours=h - agent.work[0])
            u = (slot - start) / timedelta(hours=1)
            if 0 <= u < horizon and u == int(u):
                avail[int(u)] = True
    return avail


def long_availability(
    agent: LongAgent, start: date, conversation: date, horizon: int, next_reading: str = "calendar"
) -> list[bool]:
    off = {resolve_day(x, conversation, next_reading) for x in agent.unavailable}
    days = [start + timedelta(days=u) for u in range(horizon)]
    return [(not agent.weekdays_only or d.weekday() < 5) and d not in off for d in days]


def to_units(
    p: Problem, *, shift_rule: str = "paper", next_reading: str = "calendar", start_grid: str = "hour"
) -> UnitProblem:
    """The problem in units from the project start: hours (or half hours, `start_grid="half_hour"`) or days."""
    start = project_start(p, next_reading)
    if p.kind == "short":
        horizon = SHORT_HORIZON_HOURS
        avail = [short_availability(a, start, horizon, shift_rule) for a in p.agents]
    else:
        horizon = LONG_HORIZON_DAYS
        conv = date.fromisoformat(p.conversation)
        avail = [long_availability(a, start.date(), conv, horizon, next_reading) for a in p.agents]
    idx = {t: i for i, t in enumerate(TASKS)}
    up = UnitProblem(
        durations=tuple(p.durations),
        deps=tuple((idx[a], idx[b]) for a, b in p.deps),
        available=tuple(tuple(a) for a in avail),
        break_between=tuple(a.break_between for a in p.agents),
        break_after=tuple((a.max_consecutive, a.min_rest) if a.max_consecutive else None for a in p.agents),
        horizon=horizon,
    )
    return _subdivide(up, _slots(p, start_grid))


def _slots(p: Problem, start_grid: str) -> int:
    if start_grid not in SLOTS_PER_HOUR:
        raise ValueError(f"unknown start_grid {start_grid!r}; known: {', '.join(SLOTS_PER_HOUR)}")
    return SLOTS_PER_HOUR[start_grid] if p.kind == "short" else 1


def _subdivide(up: UnitProblem, k: int) -> UnitProblem:
    """The same problem in units k times shorter (every length times k; a unit's availability is its hour's)."""
    if k == 1:
        return up
    scale = lambda v: None if v is None else v * k  # noqa: E731
    return UnitProblem(
        durations=tuple(d * k for d in up.durations),
        deps=up.deps,
        available=tuple(tuple(a for a in row for _ in range(k)) for row in up.available),
        break_between=tuple(scale(b) for b in up.break_between),
        break_after=tuple(None if r is None else (r[0] * k, r[1] * k) for r in up.break_after),
        horizon=up.horizon * k,
    )


def format_answer(p: Problem, end_unit: int, start: datetime, slots_per_hour: int = 1) -> str:
    if p.kind == "short":
        return (start + timedelta(hours=end_unit / slots_per_hour)).strftime("%Y-%m-%d %H:%M GMT")
    return (start.date() + timedelta(days=end_unit - 1)).isoformat()


@dataclass
class Solution:
    answer: str | None
    end_unit: int | None
    schedule: list[dict] = field(default_factory=list)


def solve(
    p: Problem,
    *,
    shift_rule: str = "paper",
    next_reading: str = "calendar",
    break_after_mode: str = "fatigue",
    task_pause: str = "whole",
    start_grid: str = "hour",
) -> Solution:
    """Earliest completion (the answer string) and one optimal schedule; answer None if it does not fit."""
    start = project_start(p, next_reading)
    up = to_units(p, shift_rule=shift_rule, next_reading=next_reading, start_grid=start_grid)
    k = _slots(p, start_grid)
    end, plan = solve_units(up, break_after_mode, task_pause)
    if end is None:
        return Solution(None, None, [])
    schedule = []
    for t, (g, s) in zip(TASKS, plan):
        e = task_end(up.available[g], s, up.durations[TASKS.index(t)], task_pause)
        if p.kind == "short":
            span = (
                (start + timedelta(hours=s / k)).strftime("%Y-%m-%d %H:%M"),
                (start + timedelta(hours=e / k)).strftime("%Y-%m-%d %H:%M"),
            )
        else:
            span = (start.date() + timedelta(days=s)).isoformat(), (start.date() + timedelta(days=e - 1)).isoformat()
        schedule.append({"task": f"Task {t}", "agent": AGENT_NAMES[g], "start": span[0], "end": span[1]})
    return Solution(format_answer(p, end, start, k), end, schedule)


def answers_by_reading(p: Problem) -> dict[tuple[str, str, str, str, str], str | None]:
    """The answer under every combination of the implicit readings (see READINGS), keyed (shift_rule,
    next_reading, break_after_mode, task_pause, start_grid)."""
    out = {}
    shift_rules = READINGS["shift_rule"] if p.kind == "short" else ("paper",)
    next_readings = READINGS["next_reading"] if p.kind == "long" else ("calendar",)
    has_rest = any(a.max_consecutive for a in p.agents)
    modes = READINGS["break_after_mode"] if has_rest else ("fatigue",)
    # Whether a multi-day task may pause over its assignee's days off (the prompt never says); hours: never.
    pauses = READINGS["task_pause"] if p.kind == "long" else ("whole",)
    grids = READINGS["start_grid"] if p.kind == "short" else ("hour",)
    for sr, nr, mode, pause, grid in itertools.product(shift_rules, next_readings, modes, pauses, grids):
        out[(sr, nr, mode, pause, grid)] = solve(
            p, shift_rule=sr, next_reading=nr, break_after_mode=mode, task_pause=pause, start_grid=grid
        ).answer
    return out
