"""ChronoSense generation: round-robin over the tasks, each positive followed by its negative, few-shot examples."""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Iterable, Sequence

from timealign.suites.chronosense.allen import (
    ALLEN_RELATIONS,
    BUILTIN_EVENTS,
    negative_candidates,
    pairs_by_relation,
    sample_pair,
)
from timealign.suites.chronosense.arithmetic import ARITHMETIC_TASKS, sample_arithmetic
from timealign.suites.chronosense.prompts import N_SHOTS, TEMPLATES, build_prompt, normalize_setting, render_question

TASKS = ALLEN_RELATIONS + ARITHMETIC_TASKS
logger = logging.getLogger(__name__)


def select_tasks(tasks: str | Sequence[str] = "all") -> tuple[str, ...]:
    if isinstance(tasks, str):
        if tasks == "all":
            return TASKS
        if tasks == "allen":
            return ALLEN_RELATIONS
        if tasks == "arithmetic":
            return ARITHMETIC_TASKS
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    by_lower = {t.lower(): t for t in TASKS}
    out = []
    for t in tasks:
        if t.lower() not in by_lower:
            raise ValueError(f"unknown task {t!r}; known: all, allen, arithmetic, {', '.join(TASKS)}")
        out.append(by_lower[t.lower()])
    return tuple(out)


def _make_pair(category: str, rng: random.Random, *, named: dict | None, years: tuple[int, int]) -> list[dict]:
    """A positive item and its negative (same context) for one task."""
    if category in ALLEN_RELATIONS:
        if named is not None:
            ea, eb = rng.choice(named[category])
        else:
            a, b = sample_pair(category, rng, years=years)
            ea, eb = ("Event A", *a), ("Event B", *b)
        neg_rel = rng.choice(negative_candidates(category))
        base = {
            "task": "allen",
            "category": category,
            "abstract": named is None,
            "event_a": {"name": ea[0], "start": ea[1], "end": ea[2]},
            "event_b": {"name": eb[0], "start": eb[1], "end": eb[2]},
        }
        return [
            dict(base, hypothesis_relation=category, label=True),
            dict(base, hypothesis_relation=neg_rel, label=False),
        ]
    draw = sample_arithmetic(category, rng, years=years)
    base = {"task": "arithmetic", "category": category, "abstract": True, "event": "Event A", "params": draw["params"]}
    return [
        dict(base, hypothesis_year=draw["positive_year"], label=True),
        dict(base, hypothesis_year=draw["negative_year"], label=False),
    ]


def _finish(item: dict) -> dict:
    item["answer"] = "True" if item["label"] else "False"
    return item


def _years(event: dict) -> tuple[int, int]:
    return event["start"], event["end"]


def context_key(item: dict) -> tuple:
    """What the question is about, regardless of the hypothesis and of the events' names: the unordered pair of year
    intervals of an Allen item (the relation follows from the years alone: "World War II" and its European theatre,
    both 1939-1945, are one context), the task and parameters of an arithmetic one. Items with one key share facts."""
    if item["task"] == "allen":
        return ("allen", frozenset((_years(item["event_a"]), _years(item["event_b"]))))
    return ("arithmetic", item["category"], tuple(sorted(item["params"].items())))


def item_key(item: dict) -> tuple:
    """What makes two pairs of a set the same question whatever the events are called: the task and the ordered
    years (Allen) or parameters (arithmetic)."""
    if item["task"] == "allen":
        return ("allen", item["category"], _years(item["event_a"]), _years(item["event_b"]))
    return context_key(item)


def _named_pool(pairs: Sequence[tuple], rng: random.Random, key) -> list[tuple]:
    """The named pairs, one per `key` (pairs with the same years are one), shuffled with `rng`."""
    by_key: dict = {}
    for pair in pairs:
        by_key.setdefault(key(pair), pair)
    pool = list(by_key.values())
    rng.shuffle(pool)
    return pool


def _pair_context(pair: tuple) -> frozenset:
    """`context_key`'s years of a named (A, B) pair of (name, start, end) events."""
    return frozenset((tuple(pair[0][1:]), tuple(pair[1][1:])))


def _draw_shots(item: dict, k: int, rng: random.Random, *, named: dict | None, years: tuple[int, int]) -> list[dict]:
    """`k` solved examples of the item's task, labels alternating from a random start (T,F,T or F,T,F).

    No shot shares a context with the test item or with another shot (`context_key`: the two events' years, whatever
    they are called): a shot on the test's years would show the test's answer (same relation) or give it away
    (another relation of the same years). Named pairs are drawn without replacement; when the task's named pairs run
    out (e.g. Equals has one pair of years), the remaining shots use abstract events (Event A / Event B with random
    years), which never share the test's years either.
    """
    first_true = rng.random() < 0.5
    seen = {context_key(item)}
    named_pool: list = []
    if named is not None and item["task"] == "allen":
        named_pool = [
            pair
            for pair in _named_pool(named.get(item["category"], ()), rng, _pair_context)
            if ("allen", _pair_context(pair)) not in seen
        ]
    shots: list[dict] = []
    while len(shots) < k:
        if named_pool:
            pair = named_pool.pop()
            pos, neg = _make_pair(item["category"], rng, named={item["category"]: [pair]}, years=years)
        else:
            pos, neg = _make_pair(item["category"], rng, named=None, years=years)
        if context_key(pos) in seen:
            continue
        seen.add(context_key(pos))
        shots.append(_finish(pos if (len(shots) % 2 == 0) == first_true else neg))
    return shots


MAX_DRAWS = 1000  # fresh draws of an abstract task that may all repeat earlier items before it counts as used up


def _new_pair(
    category: str, rng: random.Random, pools: dict | None, used: set, years: tuple[int, int]
) -> list[dict] | None:
    """A positive and its negative whose question no earlier pair of the set asked; None when none is left.

    With named pools, a relation's named pairs come first; once they are used up (or when no named pair realises
    the relation) its pairs are abstract (Event A / Event B, `abstract` true), so the relation keeps its share."""
    if pools is not None and category in ALLEN_RELATIONS:
        while pools.get(category):
            pair = _make_pair(category, rng, named={category: [pools[category].pop()]}, years=years)
            if item_key(pair[0]) not in used:
                used.add(item_key(pair[0]))
                return pair
    for _ in range(MAX_DRAWS):
        pair = _make_pair(category, rng, named=None, years=years)
        if item_key(pair[0]) not in used:
            used.add(item_key(pair[0]))
            return pair
    return None


def composition(items: Sequence[dict]) -> dict:
    """What a set is made of: items per task (`by_task`, in `TASKS` order), and per Allen task how many of them use
    named events (`named_by_task`; the others are abstract, e.g. a relation's share past its named pairs)."""
    by_task = Counter(it["category"] for it in items)
    named = Counter(it["category"] for it in items if it["task"] == "allen" and not it["abstract"])
    return {
        "n": len(items),
        "by_task": {t: by_task[t] for t in TASKS if t in by_task},
        "named_by_task": {t: named[t] for t in ALLEN_RELATIONS if t in by_task},
    }


def generate(
    n: int,
    seed: int = 0,
    *,
    tasks: str | Sequence[str] = "all",
    setting: str = "0-shot",
    template: int = 0,
    named: bool = False,
    events: Iterable[tuple[str, int, int]] | None = None,
    years: tuple[int, int] = (1500, 2020),
) -> list[dict]:
    """`n` items, round-robin over the tasks, each positive next to its negative (n even: exactly balanced), which
    of the two comes first drawn with the seed. Every task gets its share: the counts of two tasks differ by at most
    one pair (`composition` says what a set holds).

    No item repeats another of the set (`item_key`: same task and years or parameters, whatever the events are
    called). named=True (or `events` given) uses named events for the Allen tasks: pairs of `events` (default
    `BUILTIN_EVENTS`) grouped by their true relation, drawn without replacement; a relation whose named pairs are
    used up (the built-in events give Equals, Starts and Started-By one pair of years each) or that no pair realises
    goes on with abstract pairs (Event A / Event B, `abstract` true), so every relation keeps its share and the
    per-relation accuracies compare equal counts. A task that has no new item left stops generation with an error.
    Few-shot examples come from a separate random stream, same task (see `_draw_shots`): a shot never shares the
    test's years (its context), so it never shows the test's question or answer, and no shot repeats another.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    setting = normalize_setting(setting)
    if template not in range(len(TEMPLATES)):
        raise ValueError(f"template must be 0..{len(TEMPLATES) - 1}")
    categories = select_tasks(tasks)
    if not categories:
        raise ValueError(f"no task to generate (tasks={tasks!r})")
    named_pairs = None
    if named or events is not None:
        named_pairs = pairs_by_relation(BUILTIN_EVENTS if events is None else events)
    rng = random.Random(f"chronosense-{seed}")
    order_rng = random.Random(f"chronosense-order-{seed}")  # a separate stream: the items stay those of older sets
    pools = None
    if named_pairs is not None:
        pool_rng = random.Random(f"chronosense-named-{seed}")
        pools = {
            c: _named_pool(named_pairs[c], pool_rng, lambda pair: (pair[0][1:], pair[1][1:]))
            for c in categories
            if c in named_pairs
        }
    items: list[dict] = []
    used: set = set()
    filled: set = set()
    pair_idx = 0
    while len(items) < n:
        category = categories[pair_idx % len(categories)]
        pair = _new_pair(category, rng, pools, used, years)
        if pair is None:
            raise ValueError(
                f"ChronoSense: {category} has no new item after {sum(it['category'] == category for it in items)} "
                f"of its items (no item repeats another, every task gets its share); ask for a smaller n"
            )
        if pools is not None and category in ALLEN_RELATIONS and pair[0]["abstract"] and category not in filled:
            filled.add(category)
            logger.warning(
                "ChronoSense: %s has %d named items; the rest of its share of the %d-item set is abstract "
                "(Event A / Event B, abstract=true)",
                category,
                sum(it["category"] == category for it in items),
                n,
            )
        if order_rng.random() < 0.5:  # the answer order is the seed's, not the item's position
            pair = pair[::-1]
        for item in pair:
            item["pair_id"] = pair_idx
            items.append(_finish(item))
        pair_idx += 1
    items = items[:n]
    k = N_SHOTS[setting]
    for i, item in enumerate(items):
        item["id"] = f"chronosense-s{seed}-{i:05d}"
        shots = (
            _draw_shots(item, k, random.Random(f"chronosense-shots-{seed}-{i}"), named=named_pairs, years=years)
            if k
            else []
        )
        item["setting"], item["template"] = setting, template
        item["shots"] = [{"question": render_question(s, template), "answer": s["answer"]} for s in shots]
        item["prompt"] = build_prompt(item, setting=setting, template=template, shots=shots)
    return items
