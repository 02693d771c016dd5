"""ChronoSense generation: round-robin over the tasks, each positive followed by its negative, few-shot examples."""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from timealign.suites.chronosense.allen import (ALLEN_RELATIONS, BUILTIN_EVENTS, negative_candidates,
                                                pairs_by_relation, sample_pair)
from timealign.suites.chronosense.arithmetic import ARITHMETIC_TASKS, sample_arithmetic
from timealign.suites.chronosense.prompts import N_SHOTS, TEMPLATES, build_prompt, normalize_setting, render_question

TASKS = ALLEN_RELATIONS + ARITHMETIC_TASKS


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
        base = {"task": "allen", "category": category, "abstract": named is None,
                "event_a": {"name": ea[0], "start": ea[1], "end": ea[2]},
                "event_b": {"name": eb[0], "start": eb[1], "end": eb[2]}}
        return [dict(base, hypothesis_relation=category, label=True),
                dict(base, hypothesis_relation=neg_rel, label=False)]
    draw = sample_arithmetic(category, rng, years=years)
    base = {"task": "arithmetic", "category": category, "abstract": True, "event": "Event A",
            "params": draw["params"]}
    return [dict(base, hypothesis_year=draw["positive_year"], label=True),
            dict(base, hypothesis_year=draw["negative_year"], label=False)]


def _finish(item: dict) -> dict:
    item["answer"] = "True" if item["label"] else "False"
    return item


def context_key(item: dict) -> tuple:
    """What the question is about, regardless of the hypothesis: the unordered pair of events (name and years) of an
    Allen item, the task and parameters of an arithmetic one. Two items with one key share their facts."""
    if item["task"] == "allen":
        events = (tuple(item[k][f] for f in ("name", "start", "end")) for k in ("event_a", "event_b"))
        return ("allen", frozenset(events))
    return ("arithmetic", item["category"], tuple(sorted(item["params"].items())))


def _draw_shots(item: dict, k: int, rng: random.Random, *, named: dict | None,
                years: tuple[int, int]) -> list[dict]:
    """`k` solved examples of the item's task, labels alternating from a random start (T,F,T or F,T,F).

    No shot shares a context with the test item or with another shot: a shot about the same two events would show
    the test's answer (same relation) or give it away (another relation of the same pair). Named pairs are drawn
    without replacement; when the task's named pairs run out (e.g. Equals has one pair), the remaining shots use
    abstract events (Event A / Event B with random years), which never share a named pair.
    """
    first_true = rng.random() < 0.5
    seen = {context_key(item)}
    named_pool: list = []
    if named is not None and item["task"] == "allen":
        by_key = {}
        for pair in named[item["category"]]:
            by_key.setdefault(frozenset(pair), pair)  # (A, B) and (B, A) are one pair
        named_pool = [pair for key, pair in by_key.items() if ("allen", key) not in seen]
        rng.shuffle(named_pool)
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


def generate(n: int, seed: int = 0, *, tasks: str | Sequence[str] = "all", setting: str = "0-shot",
             template: int = 0, named: bool = False, events: Iterable[tuple[str, int, int]] | None = None,
             years: tuple[int, int] = (1500, 2020)) -> list[dict]:
    """`n` items, round-robin over the tasks, each positive followed by its negative (n even: exactly balanced).

    named=True (or `events` given) uses named events for the Allen tasks: pairs of `events` (default
    `BUILTIN_EVENTS`) grouped by their true relation; tasks whose relation no pair has are skipped.
    Few-shot examples come from a separate random stream, same task (see `_draw_shots`): a shot never shares the
    test's event pair or context, so it never shows the test's question or answer, and no shot repeats another.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    setting = normalize_setting(setting)
    if template not in range(len(TEMPLATES)):
        raise ValueError(f"template must be 0..{len(TEMPLATES) - 1}")
    categories = select_tasks(tasks)
    named_pairs = None
    if named or events is not None:
        named_pairs = pairs_by_relation(BUILTIN_EVENTS if events is None else events)
        categories = tuple(c for c in categories if c in ARITHMETIC_TASKS or c in named_pairs)
    if not categories:
        raise ValueError("no task left to generate (named events realise none of the requested relations)")
    rng = random.Random(f"chronosense-{seed}")
    items: list[dict] = []
    pair_idx = 0
    while len(items) < n:
        category = categories[pair_idx % len(categories)]
        for item in _make_pair(category, rng, named=named_pairs, years=years):
            item["pair_id"] = pair_idx
            items.append(_finish(item))
        pair_idx += 1
    items = items[:n]
    k = N_SHOTS[setting]
    for i, item in enumerate(items):
        item["id"] = f"chronosense-s{seed}-{i:05d}"
        shots = _draw_shots(item, k, random.Random(f"chronosense-shots-{seed}-{i}"), named=named_pairs,
                            years=years) if k else []
        item["setting"], item["template"] = setting, template
        item["shots"] = [{"question": render_question(s, template), "answer": s["answer"]} for s in shots]
        item["prompt"] = build_prompt(item, setting=setting, template=template, shots=shots)
    return items
