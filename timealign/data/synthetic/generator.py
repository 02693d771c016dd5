"""Seeded generator of TicToc-style tool-use trajectories with a learnable time rule.

A trajectory is: system, user asks about an entity, assistant tool call, tool result,
assistant answer, optionally a second such round about another entity, and a final user
follow-up about an already retrieved entity. Timestamps come from the paper's interaction
model (:mod:`timealign.data.timing`); the final message gets three candidate times, one per
elapse level (Table 4), and each (trajectory, level) pair becomes one annotated record whose
score follows the time rule of :mod:`timealign.data.synthetic.labels`.

numpy only, same seed -> same output.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

import numpy as np

from timealign.data.synthetic.annotators import AnnotatorPanel, mean_score
from timealign.data.synthetic.labels import DEFAULT_THRESHOLDS, SCORE_ORIENTATION, simulate_score
from timealign.data.synthetic.templates import Context, Template, templates_for
from timealign.data.timing import LEVELS, assign_timestamps, final_user_times, parse_iso

# Start times are drawn uniformly within these years, during waking hours.
START_RANGE = (datetime(2023, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 1, tzinfo=timezone.utc))
START_HOURS = (7, 21)


def clone_json(obj: Any) -> Any:
    """Deep copy of a JSON-like value (much cheaper than copy.deepcopy)."""
    if isinstance(obj, dict):
        return {k: clone_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone_json(v) for v in obj]
    return obj


def _random_start(rng: np.random.Generator) -> datetime:
    lo, hi = START_RANGE
    days = int(rng.integers(0, (hi - lo).days))
    secs = int(rng.integers(START_HOURS[0] * 3600, START_HOURS[1] * 3600))
    return lo + timedelta(days=days, seconds=secs)


def _trajectory(t: Template, rng: np.random.Generator, max_rounds: int = 2) -> tuple[list[dict], list[str], str, str]:
    """(timed history without the final question, 3 final times, final question, direct answer)."""
    start = _random_start(rng)
    n_rounds = 1 + int(rng.random() < 0.5 and max_rounds > 1)
    picked = rng.choice(len(t.entities), size=n_rounds, replace=False)
    entities = [t.entities[int(i)] for i in picked]

    msgs: list[dict] = [{"role": "system", "content": t.system_prompt}]
    results: dict[str, dict] = {}
    for k, e in enumerate(entities):
        if k == 0:
            greeting = ("", "Hi, ", "Hello! ")[int(rng.integers(0, 3))]
            ask = t.ask_forms[int(rng.integers(0, len(t.ask_forms)))].format(e=e)
            ask = greeting + (ask[0].lower() + ask[1:] if greeting.endswith(", ") else ask)
        else:
            ask = (f"What about {t.article}{e}?", t.ask_forms[int(rng.integers(0, len(t.ask_forms)))].format(e=e))[
                int(rng.integers(0, 2))
            ]
        result = t.make_result(e, rng, start)
        results[e] = result
        call_id = f"call_{k + 1:04d}"
        msgs += [
            {"role": "user", "content": ask},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": t.tool_name, "arguments": json.dumps({t.arg_name: e})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "name": t.tool_name, "content": json.dumps(result)},
            {"role": "assistant", "content": t.summarize(e, result)},
        ]

    # Follow-up about an already retrieved entity; a comparison needs both retrieved ones.
    target = entities[int(rng.integers(0, n_rounds))]
    other = next((e for e in entities if e != target), None)
    ctx = Context(target, results[target], other, results.get(other) if other else None)
    options = [qa for qa in (f(ctx) for f in t.followups) if qa is not None]
    question, direct = options[int(rng.integers(0, len(options)))]

    timed = assign_timestamps(msgs, start, rng)
    finals = final_user_times(timed[-1]["time"], t.sensitivity, rng)
    return timed, finals, question, direct


def generate_annotated(
    n_trajectories: int,
    seed: int,
    split: str | None = None,
    thresholds: Mapping[str, float] = DEFAULT_THRESHOLDS,
    max_rounds: int = 2,
    sensitivity_swap: float = 0.0,
    annotators: AnnotatorPanel | None = None,
) -> list[dict]:
    """``3 * n_trajectories`` annotated records (one per trajectory and elapse level).

    Templates are visited in shuffled rounds so every template appears once per
    ``len(templates)`` trajectories. A trajectory has 1 or 2 retrieval rounds (a coin flip) before
    the follow-up; ``max_rounds=1`` keeps one (shorter sequences). Deterministic in ``seed``.

    ``sensitivity_swap`` (0..1, meant for training data): that share of trajectories gives its tool another
    sensitivity, drawn uniformly from the other two; the tool's stated update rate (``FRESHNESS``), the final gaps
    (Table 4) and the label all follow the new one. The scenario then no longer predicts the sensitivity, only the
    tool's documentation does, so a model that memorises scenarios cannot fit the data.

    ``annotators``: None scores every record with ``labels.simulate_score`` (5 votes that always side with the time
    rule). A panel (``timealign.data.synthetic.annotators``) scores it with its own answers instead, which may be
    ambiguous or side against the rule, and adds them as ``votes``; its random stream is its own, seeded by the panel's
    seed and ``seed``.
    """
    if not 0.0 <= sensitivity_swap <= 1.0:
        raise ValueError(f"sensitivity_swap must be in [0, 1], got {sensitivity_swap}")
    if max_rounds not in (1, 2):
        raise ValueError(f"max_rounds must be 1 or 2, got {max_rounds}")
    templates = templates_for(split)
    rng = np.random.default_rng(seed)
    counters: dict[str, int] = {}
    order: list[int] = []
    records: list[dict] = []
    panel_rng = None if annotators is None else np.random.default_rng([annotators.seed, seed])
    for _ in range(n_trajectories):
        if not order:
            order = rng.permutation(len(templates)).tolist()
        t = templates[order.pop()]
        counters[t.slug] = counters.get(t.slug, 0) + 1
        if sensitivity_swap and rng.random() < sensitivity_swap:
            others = [s for s in thresholds if s != t.sensitivity]
            t = replace(t, sensitivity=others[int(rng.integers(0, len(others)))])
        history, finals, question, direct = _trajectory(t, rng, max_rounds)
        last = parse_iso(history[-1]["time"])
        schema = t.tool_schema
        for level, when in zip(LEVELS, finals):
            # Label from the gap as stored in the strings, so a reader recomputes the same label.
            gap = (parse_iso(when) - last).total_seconds()
            if annotators is None:
                score, extra = simulate_score(rng, t.sensitivity, gap, thresholds), {}
            else:
                votes = annotators.votes(panel_rng, t.scenario, t.sensitivity, gap, thresholds)
                score, extra = mean_score(votes), {"votes": votes}
            records.append(
                {
                    "id": f"{t.slug}_{counters[t.slug]}",
                    "scenario": t.scenario,
                    "history": clone_json(history) + [{"role": "user", "content": question, "time": when}],
                    "function": [clone_json(schema)],
                    "elapse_level": level,
                    "score": score,
                    "score_orientation": SCORE_ORIENTATION,
                    "direct_answer": direct,
                    **extra,
                }
            )
    return records
