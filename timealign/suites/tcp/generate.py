"""TCP generation: random prototypes (dependency types assigned evenly), solved, kept when the answer is sure."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import date, datetime, timedelta

from timealign.suites.tcp.problem import (
    DEPENDENCY_TYPES,
    KINDS,
    LONG_HORIZON_DAYS,
    TASKS,
    TIMEZONES,
    VARIANTS,
    WEEKDAYS,
    LongAgent,
    Problem,
    ShortAgent,
    answer_candidates,
    next_is_unambiguous,
    problem_to_dict,
    project_start,
    resolve_day,
)
from timealign.suites.tcp.render import build_prompt, render_dialogue, render_question
from timealign.suites.tcp.solve import answers_by_reading, solve


def _random_date(rng: random.Random, lo: date = date(2010, 1, 1), hi: date = date(2025, 12, 31)) -> date:
    return lo + timedelta(days=rng.randint(0, (hi - lo).days))


def _rest_rule(rng: random.Random, kind: str) -> dict:
    if rng.random() < 0.5:
        return {"break_between": rng.randint(1, 3) if kind == "short" else rng.randint(1, 2)}
    if kind == "short":
        return {"max_consecutive": rng.randint(3, 7), "min_rest": rng.randint(1, 2)}
    return {"max_consecutive": rng.randint(2, 3), "min_rest": rng.randint(1, 2)}


def _speakers(rng: random.Random) -> dict:
    split = rng.random() < 0.5
    return {
        "lead": rng.randint(0, 1),
        "dep_speakers": (rng.randint(0, 1), rng.randint(0, 1)) if split else (rng.randint(0, 1),),
    }


def sample_short(rng: random.Random, dependency_type: str) -> Problem:
    day = _random_date(rng)
    start = datetime(day.year, day.month, day.day)
    conversation = start - timedelta(hours=rng.randint(1, 36))
    agents = []
    for _ in range(2):
        tz = rng.choice(sorted(TIMEZONES))
        w0 = rng.randint(7, 11)
        m0 = rng.randint(w0 + 2, w0 + 5)
        agents.append(
            ShortAgent(
                tz=tz,
                offset=TIMEZONES[tz],
                work=(w0, w0 + 8),
                meal=(m0, m0 + rng.randint(1, 2)),
                **_rest_rule(rng, "short"),
            )
        )
    return Problem(
        kind="short",
        dependency_type=dependency_type,
        durations=tuple(rng.randint(1, 4) for _ in TASKS),
        agents=tuple(agents),
        start=start.strftime("%Y-%m-%d %H:%M"),
        conversation=conversation.strftime("%Y-%m-%d %H:%M"),
        **_speakers(rng),
    )


def sample_long(rng: random.Random, dependency_type: str) -> Problem:
    conv = _random_date(rng)
    w = conv.weekday()
    options = ["next Monday", "tomorrow", "the day after tomorrow"]
    options += [f"this {WEEKDAYS[x]}" for x in range(w + 1, 7)]
    options += [f"next {WEEKDAYS[x]}" for x in range(1, w + 1)]
    # Only days on which every reading of "next" agrees (not "next Saturday" said on a Sunday, for one).
    options = [o for o in options if not o.startswith("next ") or next_is_unambiguous(o, conv)]
    start_expr = rng.choice(options)
    start = resolve_day(start_expr, conv)
    window = {start + timedelta(days=u) for u in range(LONG_HORIZON_DAYS)}
    agents = []
    for _ in range(2):
        unavailable: tuple[str, ...] = ()
        if rng.random() < 0.5:
            relevant = [
                x
                for x in range(7)
                if resolve_day(f"next {WEEKDAYS[x]}", conv) in window
                and next_is_unambiguous(f"next {WEEKDAYS[x]}", conv)
            ]
            if relevant:
                unavailable = (f"next {WEEKDAYS[rng.choice(relevant)]}",)
        agents.append(LongAgent(weekdays_only=rng.random() < 0.5, unavailable=unavailable, **_rest_rule(rng, "long")))
    return Problem(
        kind="long",
        dependency_type=dependency_type,
        durations=tuple(rng.randint(1, 3) for _ in TASKS),
        agents=tuple(agents),
        start=start_expr,
        conversation=conv.isoformat(),
        **_speakers(rng),
    )


def make_item(p: Problem, *, item_id: str, variant: str = "direct", robust: bool = True) -> dict | None:
    """The item for one prototype, or None if it has no answer within the horizon (or, robust, an answer that
    depends on the reading)."""
    sol = solve(p)
    if sol.answer is None:
        return None
    if robust and len(set(answers_by_reading(p).values())) != 1:
        return None
    start = project_start(p)
    item = {
        "id": item_id,
        "kind": p.kind,
        "dependency_type": p.dependency_type,
        "dialogue": render_dialogue(p),
        "question": render_question(p),
        "prompt": build_prompt(p, variant),
        "variant": variant,
        "answer": sol.answer,
        "schedule": sol.schedule,
        "project_start": start.strftime("%Y-%m-%d %H:%M"),
        "problem": problem_to_dict(p),
    }
    item["random_baseline"] = 1 / len(answer_candidates(item))
    return item


def generate(
    n: int, seed: int = 0, kind: str = "mixed", *, variant: str = "direct", robust: bool = True, max_tries: int = 1000
) -> list[dict]:
    """`n` prototypes with answers. kind "mixed" alternates short and long; within each kind the dependency types
    cycle (assigned evenly, as in the paper). Prototypes without an answer within the horizon are redrawn, and so is
    one whose prompt an earlier item of the set already has (no item repeats inside a set)."""
    if kind not in KINDS + ("mixed",):
        raise ValueError(f"kind must be short, long or mixed, got {kind!r}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    rng = random.Random(f"tcp-{seed}-{kind}")
    dep_names = list(DEPENDENCY_TYPES)
    per_kind = defaultdict(int)
    items, prompts = [], set()
    for i in range(n):
        k = kind if kind != "mixed" else KINDS[i % 2]
        dep = dep_names[per_kind[k] % 3]
        per_kind[k] += 1
        sampler = sample_short if k == "short" else sample_long
        for _ in range(max_tries):
            item = make_item(sampler(rng, dep), item_id=f"tcp-s{seed}-{i:05d}", variant=variant, robust=robust)
            if item is not None and item["prompt"] not in prompts:
                items.append(item)
                prompts.add(item["prompt"])
                break
        else:
            raise RuntimeError(f"no valid {k} prototype in {max_tries} draws")
    return items
