"""Time Puzzles generation (Algorithms 1-2, Sec. 2.2, App. A.2) and the prompt of Appendix E.

Pick a knowledge-base anchor t_kb and a seed date inside C(t_kb); add 3-5 facts instantiated from the seed, from
unused categories at balanced levels (YEAR, MONTH, DAY in turn); solve; keep the puzzle when |A| equals the target
M, no reading-dependent date could change it and no date past D's end could join it. Every fact is true of the seed
date, so |A| >= 1. The explicit variant lists, for zodiac and lunar-month facts, the periods the year-level facts
(and the anchor) leave possible; puzzles needing more than 12 periods are rejected for both variants, so the
implicit and explicit sets of one seed hold the same puzzles and the same answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date
from typing import Iterable

import numpy as np

from timealign.suites.timepuzzles import kb
from timealign.suites.timepuzzles.calendar import Calendar, get_calendar
from timealign.suites.timepuzzles.categories import CATEGORIES_BY_LEVEL
from timealign.suites.timepuzzles.fact import LEVELS, YEAR, Fact
from timealign.suites.timepuzzles.solver import solve_indices
from timealign.suites.timepuzzles.year_facts import KnowledgeBaseEventFact, PersonAliveFact, USPresidentFact

VARIANTS = ("implicit", "explicit")
MAX_SOLUTIONS = 6  # Sec. 2.1: |A| capped at 6
EXTRA_FACTS = (3, 4, 5)  # Sec. 2.2: "3-5 more temporal constraints" after the anchor
MAX_EXPLICIT_PERIODS = 12
# Anchor categories (Algorithm 1, SelectRandomKnowledgeBasedEvent): 50 curated events + 20 well-known facts
# (presidencies, lifespans) in App. A.1, hence roughly 70/30.
ANCHOR_WEIGHTS = {"KnowledgeBaseEventFact": 0.7, "PersonAliveFact": 0.15, "USPresidentFact": 0.15}

# Appendix E, verbatim.
PROMPT_TEMPLATE = """From the time-related constraints below, determine all valid date(s) (if any) that satisfy them. \
Depending on the conditions, the result may be zero, one, or multiple dates. Unless otherwise stated, interpret all \
constraints using the Gregorian calendar.

Note: Seasons are defined as:
- Winter: December, January, February
- Spring: March, April, May
- Summer: June, July, August
- Autumn: September, October, November

The constraints are as follows:

{constraints}

Carefully review the constraints and reason step-by-step to identify all valid date(s). After thorough \
consideration, end your response on a new line with "MY ANSWER: " followed by the valid date(s) in the format \
"YYYY-MM-DD". If there are multiple valid dates, list them separated by commas. If no valid date exists, respond \
with "MY ANSWER: None"."""


def _used_key(fact: Fact) -> tuple:
    if isinstance(fact, PersonAliveFact):
        return ("person", fact.name)
    if isinstance(fact, USPresidentFact):
        return ("president", fact.name)
    return ("category", fact.category)


@dataclass
class Puzzle:
    facts: list[Fact]  # in presentation order
    anchor: Fact
    solutions: list[date]
    seed_date: date
    explicit_texts: list[str]
    attempts: int

    def texts(self, variant: str = "implicit") -> list[str]:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        return [f.implicit() for f in self.facts] if variant == "implicit" else list(self.explicit_texts)

    def prompt(self, variant: str = "implicit") -> str:
        return render_prompt(self.texts(variant))


def render_prompt(constraints: list[str]) -> str:
    """Appendix E's prompt with the constraints as a numbered list."""
    return PROMPT_TEMPLATE.format(constraints="\n".join(f"{i}. {t}" for i, t in enumerate(constraints, 1)))


def _draw_anchor(rng: random.Random) -> Fact:
    cats, weights = zip(*ANCHOR_WEIGHTS.items())
    cat = rng.choices(cats, weights)[0]
    if cat == "PersonAliveFact":
        return PersonAliveFact(rng.choice(kb.PEOPLE)[0])
    if cat == "USPresidentFact":
        return USPresidentFact(rng.choice(kb.US_PRESIDENTS)[0])
    return KnowledgeBaseEventFact.draw(rng)


def generate_facts(rng: random.Random, anchor: Fact, seed: date, n_facts: int, cal: Calendar) -> list[Fact] | None:
    """Algorithm 2 (GENERATEFACT): the anchor plus n_facts-1 facts of distinct unused categories, levels taken in
    turn (YEAR, MONTH, DAY from a random starting point), each instantiated to hold on the seed date."""
    facts, used = [anchor], {_used_key(anchor), ("category", anchor.category)}
    start = rng.randrange(3)
    for i in range(1, n_facts):
        level = LEVELS[(i - 1 + start) % 3]  # DetermineLevel(i, N): balanced levels
        candidates = [c for c in CATEGORIES_BY_LEVEL[level] if ("category", c.__name__) not in used]
        rng.shuffle(candidates)
        for cls in candidates:
            fact = cls.instantiate(rng, seed, used, cal)
            if fact is not None:
                break
        else:
            return None
        facts.append(fact)
        used |= {_used_key(fact), ("category", fact.category)}
    return facts


def _explicit_window(facts: list[Fact], anchor: Fact, skip: Fact, cal: Calendar) -> np.ndarray:
    """Calendar indices allowed by the anchor and every YEAR-level fact other than `skip`."""
    idx = np.flatnonzero(anchor.mask(cal))
    for f in facts:
        if f is not skip and f is not anchor and f.level == YEAR:
            idx = idx[f.mask(cal.view(idx))]
    return idx


def explicit_texts(facts: list[Fact], anchor: Fact, cal: Calendar) -> tuple[list[str], int]:
    """The explicit rendering of each fact and the largest number of periods any of them lists."""
    texts, most = [], 0
    for f in facts:
        if not f.uses_window:
            texts.append(f.explicit())
            continue
        window = _explicit_window(facts, anchor, f, cal)
        most = max(most, len(f.explicit_periods(window, cal) or ()))
        texts.append(f.explicit(window, cal))
    return texts, most


def is_ambiguous(facts: list[Fact], cal: Calendar) -> bool:
    """True when some date whose truth under one fact depends on its reading satisfies all the other facts."""
    for f in facts:
        amb = f.ambiguous_mask(cal)
        if amb is None or not amb.any():
            continue
        idx = np.flatnonzero(amb)
        for g in facts:
            if g is not f:
                idx = idx[g.mask(cal.view(idx))]
        if len(idx):
            return True
    return False


# D's end must never decide an answer: a puzzle is rejected when some date after D (up to this horizon, which
# spans every 4-, 10-, 12- and 28-year cycle of the calendar facts) may satisfy all its facts. Only an open-ended
# fact (a term with no end yet) can let one through: every other anchor ends inside D.
RANGE_END_HORIZON = date(2061, 12, 31)


def depends_on_range_end(facts: list[Fact], cal: Calendar) -> bool:
    """True when a date past D's end may satisfy every fact, so the answer set would grow with D."""
    beyond = get_calendar(date.fromordinal(int(cal.ordinal[-1]) + 1), RANGE_END_HORIZON)
    idx = np.arange(len(beyond))
    for f in facts:
        if not len(idx):
            break
        idx = idx[f.may_hold_past_range_end(beyond.view(idx))]
    return bool(len(idx))


def generate_puzzle(
    rng: random.Random, target: int, cal: Calendar | None = None, *, max_attempts: int = 20000
) -> Puzzle:
    """Algorithm 1: draw an anchor and a seed date inside it, generate facts, solve, keep |A| == target."""
    if not 1 <= target <= MAX_SOLUTIONS:
        raise ValueError(f"target solution count must be in 1..{MAX_SOLUTIONS}, got {target}")
    cal = cal or get_calendar()
    for attempt in range(1, max_attempts + 1):
        anchor = _draw_anchor(rng)
        window = np.flatnonzero(anchor.mask(cal))
        seed = date.fromordinal(int(cal.ordinal[window[rng.randrange(len(window))]]))
        facts = generate_facts(rng, anchor, seed, 1 + rng.choice(EXTRA_FACTS), cal)
        if facts is None:
            continue
        idx = solve_indices(facts, cal)
        if len(idx) != target or is_ambiguous(facts, cal) or depends_on_range_end(facts, cal):
            continue
        order = list(range(len(facts)))
        rng.shuffle(order)
        facts = [facts[i] for i in order]
        texts, most = explicit_texts(facts, anchor, cal)
        if most > MAX_EXPLICIT_PERIODS:
            continue
        solutions = [date.fromordinal(int(o)) for o in cal.ordinal[idx]]
        return Puzzle(facts, anchor, solutions, seed, texts, attempt)
    raise RuntimeError(f"no puzzle with {target} solutions after {max_attempts} attempts")


def puzzle_record(puzzle: Puzzle, *, pid: str, variant: str, seed: int, index: int, target: int) -> dict:
    return {
        "id": pid,
        "variant": variant,
        "seed": seed,
        "index": index,
        "target_count": target,
        "num_facts": len(puzzle.facts),
        "facts": [
            {
                "category": f.category,
                "level": f.level,
                "params": f.params(),
                "anchor": f is puzzle.anchor,
                "implicit": f.implicit(),
                "explicit": e,
            }
            for f, e in zip(puzzle.facts, puzzle.explicit_texts)
        ],
        "constraints": puzzle.texts(variant),
        "prompt": puzzle.prompt(variant),
        "gold": [d.isoformat() for d in puzzle.solutions],
        "seed_date": puzzle.seed_date.isoformat(),
    }


def generate(
    n: int, seed: int, *, variant: str = "implicit", targets: Iterable[int] | None = None, cal: Calendar | None = None
) -> list[dict]:
    """`n` puzzles as JSON-able records, deterministic in (seed, index): the same seed gives the same puzzles
    (and answers) for both variants. Target solution counts cycle 1..6 (Sec. 2.2: sizes evenly distributed)
    unless `targets` is given. A puzzle whose facts an earlier puzzle of the set already has is drawn again (from
    the same generator, so still deterministic): no item repeats inside a set."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    cal = cal or get_calendar()
    targets = list(targets) if targets is not None else [i % MAX_SOLUTIONS + 1 for i in range(n)]
    if len(targets) != n:
        raise ValueError("targets must have n entries")
    records, seen = [], set()
    for i, target in enumerate(targets):
        rng = random.Random(f"timepuzzles:{seed}:{i}:{target}")
        puzzle = generate_puzzle(rng, target, cal)
        while _facts_key(puzzle) in seen:
            puzzle = generate_puzzle(rng, target, cal)
        seen.add(_facts_key(puzzle))
        records.append(
            puzzle_record(
                puzzle, pid=f"timepuzzles-{seed}-{i:05d}", variant=variant, seed=seed, index=i, target=target
            )
        )
    return records


def _facts_key(puzzle: Puzzle) -> frozenset[str]:
    """What makes two puzzles the same item: the same facts, in any order (both variants' wording)."""
    return frozenset(puzzle.texts("implicit")) | frozenset(puzzle.texts("explicit"))
