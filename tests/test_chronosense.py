"""ChronoSense: Allen relations (exhaustive, exclusive, inverse-consistent), the paper's negative sampling,
the arithmetic tasks against brute force, the paper's worked examples, prompts, parsing, and the suite on the
real tiny model."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from timealign.data.records import write_jsonl
from timealign.suites import chronosense as cs
from timealign.suites.generate_sets import main as generate_main

# Allen's relations re-derived from endpoint comparisons (A = (a1, a2), B = (b1, b2)), independently of the module.
DEFINITIONS = {
    "Before": lambda a1, a2, b1, b2: a2 < b1,
    "After": lambda a1, a2, b1, b2: b2 < a1,
    "Meets": lambda a1, a2, b1, b2: a2 == b1,
    "Met-By": lambda a1, a2, b1, b2: b2 == a1,
    "Overlaps": lambda a1, a2, b1, b2: a1 < b1 < a2 < b2,
    "Overlapped-By": lambda a1, a2, b1, b2: b1 < a1 < b2 < a2,
    "Starts": lambda a1, a2, b1, b2: a1 == b1 and a2 < b2,
    "Started-By": lambda a1, a2, b1, b2: a1 == b1 and b2 < a2,
    "During": lambda a1, a2, b1, b2: b1 < a1 and a2 < b2,
    "Contains": lambda a1, a2, b1, b2: a1 < b1 and b2 < a2,
    "Finishes": lambda a1, a2, b1, b2: a2 == b2 and b1 < a1,
    "Finished-By": lambda a1, a2, b1, b2: a2 == b2 and a1 < b1,
    "Equals": lambda a1, a2, b1, b2: a1 == b1 and a2 == b2,
}
GRID = [(s, e) for s in range(1990, 1998) for e in range(1990, 1998) if s < e]


def holding(a, b):
    return [name for name, rel in DEFINITIONS.items() if rel(*a, *b)]


# ------------------------------------------------------------------------------------------------ Allen relations


def test_every_pair_in_the_grid_has_exactly_one_relation_and_it_is_the_returned_one():
    assert len(GRID) == 28
    for a, b in itertools.product(GRID, repeat=2):
        held = holding(a, b)
        assert len(held) == 1, (a, b, held)
        assert cs.allen_relation(a, b) == held[0]


def test_all_13_relations_are_reachable():
    seen = Counter(cs.allen_relation(a, b) for a, b in itertools.product(GRID, repeat=2))
    assert set(seen) == set(cs.ALLEN_RELATIONS) == set(DEFINITIONS)
    assert len(cs.ALLEN_RELATIONS) == 13


def test_swapping_the_events_gives_the_inverse_relation():
    for a, b in itertools.product(GRID, repeat=2):
        assert cs.allen_relation(b, a) == cs.INVERSE[cs.allen_relation(a, b)]
    assert all(cs.INVERSE[cs.INVERSE[r]] == r for r in cs.ALLEN_RELATIONS)
    assert [r for r in cs.ALLEN_RELATIONS if cs.INVERSE[r] == r] == ["Equals"]


@pytest.mark.parametrize("bad", [(1950, 1950), (1950, 1940)])
def test_degenerate_intervals_are_refused(bad):
    with pytest.raises(ValueError):
        cs.allen_relation(bad, (1900, 1990))
    with pytest.raises(TypeError):
        cs.allen_relation((1900.0, 1950), (1900, 1990))


@pytest.mark.parametrize("relation", cs.ALLEN_RELATIONS)
def test_sample_pair_realises_each_relation(relation):
    import random

    rng = random.Random(relation)
    for _ in range(50):
        a, b = cs.sample_pair(relation, rng)
        assert holding(a, b) == [relation]
        assert 1500 <= min(a + b) and max(a + b) <= 2020


# ---------------------------------------------------------------------------------------------- negative sampling


def test_paper_exclusion_list_is_exactly_what_day_level_refinement_makes_ambiguous():
    """App. A.1.1: a relation is excluded as a negative iff some placement of the events within their years makes
    it true. Refine every year endpoint to year + f (f a fraction of the year) and collect the relations."""
    fractions = [Fraction(1, 10), Fraction(1, 2), Fraction(9, 10)]
    possible = {r: set() for r in cs.ALLEN_RELATIONS}
    for a, b in itertools.product(GRID, repeat=2):
        year_rel = holding(a, b)[0]
        for fa1, fa2, fb1, fb2 in itertools.product(fractions, repeat=4):
            refined = (a[0] + fa1, a[1] + fa2), (b[0] + fb1, b[1] + fb2)
            possible[year_rel].update(holding(*refined))
    for rel in cs.ALLEN_RELATIONS:
        assert possible[rel] - {rel} == set(cs.NEGATIVE_EXCLUSIONS.get(rel, ())), rel
        assert set(cs.negative_candidates(rel)) == set(cs.ALLEN_RELATIONS) - possible[rel]


def test_generated_allen_items_have_correct_labels_and_allowed_negatives():
    items = cs.generate(13 * 2 * 8, seed=3, tasks="allen")
    for it in items:
        a = (it["event_a"]["start"], it["event_a"]["end"])
        b = (it["event_b"]["start"], it["event_b"]["end"])
        true_rel = holding(a, b)[0]
        assert it["category"] == true_rel
        assert it["label"] == (it["hypothesis_relation"] == true_rel)
        if not it["label"]:
            assert it["hypothesis_relation"] not in cs.NEGATIVE_EXCLUSIONS.get(true_rel, ())
    negatives = Counter((it["category"], it["hypothesis_relation"]) for it in items if not it["label"])
    assert (
        negatives[("Equals", "Before")]
        + negatives[("Equals", "After")]
        + negatives[("Equals", "Meets")]
        + negatives[("Equals", "Met-By")]
        == 8
    )


@pytest.mark.parametrize("tasks", ["all", "allen", "arithmetic"])
def test_negatives_are_balanced_overall_and_per_task(tasks):
    items = cs.generate(320, seed=1, tasks=tasks)
    assert len(items) == 320
    assert sum(it["label"] for it in items) == 160
    per_task = Counter((it["category"], it["label"]) for it in items)
    for task in cs.select_tasks(tasks):
        assert per_task[(task, True)] == per_task[(task, False)] > 0
    # A negative shares its positive's context (App. A.1.1 / Sec. 3: "create a wrong Hypothesis").
    by_pair = {}
    for it in items:
        by_pair.setdefault(it["pair_id"], []).append(it)
    for pair in by_pair.values():  # which of the two comes first is drawn with the seed (issue 23)
        pos, neg = sorted(pair, key=lambda it: not it["label"])
        assert pos["label"] and not neg["label"]
        keys = ("event_a", "event_b") if pos["task"] == "allen" else ("params",)
        assert all(pos[k] == neg[k] for k in keys)


def test_named_events_cover_all_relations_with_true_years():
    pairs = cs.pairs_by_relation(cs.BUILTIN_EVENTS)
    assert set(pairs) == set(cs.ALLEN_RELATIONS)
    items = cs.generate(52, seed=0, tasks="allen", named=True)
    assert Counter(it["category"] for it in items) == {r: 4 for r in cs.ALLEN_RELATIONS}
    # Two pairs per relation; Starts, Started-By and Equals have one named pair of years each: one pair is abstract.
    abstract = Counter(it["category"] for it in items if it["abstract"])
    assert abstract == {"Starts": 2, "Started-By": 2, "Equals": 2}
    known = {name: (s, e) for name, s, e in cs.BUILTIN_EVENTS}
    for it in (it for it in items if not it["abstract"]):
        a, b = it["event_a"], it["event_b"]
        assert known[a["name"]] == (a["start"], a["end"]) and known[b["name"]] == (b["start"], b["end"])
        assert f"'{a['name']}'" in it["prompt"]


# ----------------------------------------------------------------------------------------------------- arithmetic


def brute_end(start, duration):
    year = start
    for _ in range(duration):  # one year passes per year of duration
        year += 1
    return year


def brute_occurrences(first, every, until):
    years, since = [first], 0
    for year in range(first + 1, until + 1):
        since += 1
        if since == every:
            years.append(year)
            since = 0
    return years


def test_arithmetic_functions_against_brute_force():
    for start in range(1900, 1930, 7):
        for d in range(1, 40):
            assert cs.end_timepoint(start, d) == brute_end(start, d)
        for every in range(1, 25):
            occ = brute_occurrences(start, every, start + 200)
            assert cs.next_occurrence(start, every) == occ[1]
            for year in range(start - 5, start + 200):
                assert cs.occurs_in(start, every, year) == (year in occ[1:])
        for end in range(start + 1, start + 30):
            span = set(range(start, end + 1))
            for year in range(start - 10, end + 10):
                assert cs.is_intermediate(start, end, year) == (year in span)


def test_generated_arithmetic_labels_against_brute_force():
    items = cs.generate(600, seed=7, tasks="arithmetic")
    assert Counter(it["category"] for it in items) == {t: 200 for t in cs.ARITHMETIC_TASKS}
    for it in items:
        p, y = it["params"], it["hypothesis_year"]
        if it["category"] == "End Timepoint":
            truth = y == brute_end(p["start"], p["duration"])
        elif it["category"] == "Next Occurrence":
            truth = y in brute_occurrences(p["first"], p["every"], y + 1)[1:]
            if it["label"]:
                assert y == brute_occurrences(p["first"], p["every"], y)[1]  # the *next* occurrence
        else:
            truth = y in range(p["start"], p["end"] + 1)
        assert it["label"] == truth, it


# ----------------------------------------------------------------------------------------- the paper's examples


def test_paper_allen_example_fourth_cholera_pandemic_before_world_war_ii():
    # Sec. 3 / Fig. 2: the fourth cholera pandemic (1863-1875) occurred before World War II (1939-1945): True.
    item = {
        "task": "allen",
        "category": "Before",
        "hypothesis_relation": "Before",
        "event_a": {"name": "fourth cholera pandemic", "start": 1863, "end": 1875},
        "event_b": {"name": "World War II", "start": 1939, "end": 1945},
    }
    assert cs.allen_relation((1863, 1875), (1939, 1945)) == "Before"
    assert cs.render_question(item, 0) == (
        "The event 'fourth cholera pandemic' occurred between year 1863 and year 1875. The event 'World War II' "
        "occurred between year 1939 and year 1945. Did 'fourth cholera pandemic' occur before 'World War II' "
        "without any overlap between the two events? Answer True or False."
    )


def test_paper_arithmetic_example_next_occurrence_1921_true_1950_false():
    # Sec. 3: 'Event A' first occurred in 1909 and occurs every 12 years; 1921 -> True, the negative 1950 -> False.
    assert cs.next_occurrence(1909, 12) == 1921
    assert cs.arithmetic_truth("Next Occurrence", {"first": 1909, "every": 12}, 1921) is True
    assert cs.arithmetic_truth("Next Occurrence", {"first": 1909, "every": 12}, 1950) is False
    item = {
        "task": "arithmetic",
        "category": "Next Occurrence",
        "event": "Event A",
        "params": {"first": 1909, "every": 12},
        "hypothesis_year": 1921,
    }
    assert cs.render_question(item, 0) == (
        "'Event A' first occurred in year 1909. 'Event A' occurs every 12 years. "
        "Did 'Event A' occur again in the year 1921? Answer True or False."
    )


# ---------------------------------------------------------------------------------------------------- prompts


def test_prompt_settings_and_templates():
    zero = cs.generate(32, seed=2, setting="0-shot")
    three = cs.generate(32, seed=2, setting="3-shot", template=1)
    cot = cs.generate(32, seed=2, setting="cot", template=2)
    for z, t, c in zip(zero, three, cot):
        assert z["category"] == t["category"] == c["category"] and z["label"] == t["label"]
        assert z["prompt"] == cs.render_question(z, 0) and z["shots"] == []
        assert len(t["shots"]) == 3 and t["prompt"].count("\nAnswer: ") == 3
        assert [s["answer"] for s in t["shots"]] in (["True", "False", "True"], ["False", "True", "False"])
        assert t["prompt"].endswith(cs.render_question(t, 1)) and "Statement:" in t["prompt"]
        assert all(s["question"] != cs.render_question(t, 1) for s in t["shots"])
        assert c["prompt"].endswith("Let's think step by step.") and c["prompt"].startswith("Read the facts")
    one = cs.generate(4, seed=2, setting="1-shot")
    assert all(len(it["shots"]) == 1 for it in one)
    assert cs.DEFAULT_MAX_NEW_TOKENS["cot"] == 512 and cs.DEFAULT_MAX_NEW_TOKENS["0-shot"] == 64
    assert cs.generate(10, seed=5) == cs.generate(10, seed=5)
    assert cs.generate(10, seed=5) != cs.generate(10, seed=6)
    with pytest.raises(ValueError):
        cs.generate(4, setting="5-shot")


def _test_context(item: dict) -> list[str]:
    """The sentences that state the test item's facts, in both event orders (independent of `context_key`)."""
    if item["task"] == "allen":
        a, b = ((item[k]["name"], item[k]["start"], item[k]["end"]) for k in ("event_a", "event_b"))
        return [cs.prompts.allen_context(a, b), cs.prompts.allen_context(b, a)]
    return [cs.prompts.ARITHMETIC_TEXT[item["category"]][0].format(a="'Event A'", **item["params"])]


def _context_of_shot(question: str) -> list[str]:
    """A template-0 question's facts: everything before its hypothesis."""
    return [question.split(" Did ")[0]]


def _shares_event_pair(item: dict, shot_question: str) -> bool:
    if item["task"] == "allen" and not item["abstract"]:
        names = (item["event_a"]["name"], item["event_b"]["name"])
        return all(f"The event '{n}' occurred" in shot_question for n in names)
    return any(context in shot_question for context in _test_context(item))


@pytest.mark.parametrize("named,tasks", [(True, "allen"), (False, "all")])
def test_few_shot_prompts_never_share_the_test_pair_repeat_a_shot_or_show_the_question(named, tasks):
    # Issue 12: a third of the named 3-shot prompts had a shot about the test's two events (some asking the same
    # relation, so the shown answer was the test's answer) and some repeated a shot.
    for setting in ("3-shot", "1-shot"):
        items = cs.generate(390 if setting == "3-shot" else 130, seed=7, setting=setting, named=named, tasks=tasks)
        for it in items:
            questions = [s["question"] for s in it["shots"]]
            assert len(questions) == cs.prompts.N_SHOTS[setting]
            assert len(set(questions)) == len(questions), it["id"]
            assert cs.render_question(it, 0) not in questions
            assert not any(_shares_event_pair(it, q) for q in questions), it["id"]
            for i, q in enumerate(questions):  # shots share no context with each other either
                assert not any(c in other for c in _context_of_shot(q) for other in questions[i + 1 :])


def test_a_relation_with_one_named_pair_gets_abstract_shots_instead_of_its_own_pair():
    # Equals has a single named pair (World War II / its European theatre): every shot would be about it. One pair
    # of years is one positive and one negative: the rest of the set is abstract (issue 35), never a repeat.
    items = cs.generate(8, seed=1, setting="3-shot", named=True, tasks="Equals")
    named = [it for it in items if not it["abstract"]]
    assert len(named) == 2 and sum(it["abstract"] for it in items) == 6
    assert {it["event_a"]["name"] for it in named} <= {"World War II", "European theatre of World War II"}
    for it in named:
        assert len(it["shots"]) == 3
        assert all("World War II" not in s["question"] and "'Event A'" in s["question"] for s in it["shots"])
    # Before has hundreds of pairs: its shots stay named.
    before = cs.generate(8, seed=1, setting="3-shot", named=True, tasks="Before")
    assert all("'Event A'" not in s["question"] for it in before for s in it["shots"])
    assert cs.context_key(items[0]) == cs.context_key(dict(items[0], hypothesis_relation="Before"))


# ----------------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("True", "True"),
        ("False.", "False"),
        ("  **True**\n\nThe first event ended in 1875.", "True"),
        ("**Answer:** False", "False"),
        ("**Answer**: True", "True"),
        (
            "Fourth cholera pandemic ended in 1875 and World War II began in 1939, so there is no overlap. "
            "Therefore, the answer is True.",
            "True",
        ),
        ("It would be true if both began in 1939, but the first began in 1937. The answer is: False", "False"),
        ("Answer True or False. False", "False"),
        ("True or False?", None),
        ("Yes, it did.", None),
        ("It is true that A began earlier, but the statement is false.", None),
        ("<think>maybe true</think>False", "False"),
        ("", None),
        ("\n\n\n\n", None),
        ("ĠĠ ;; ?? ĊĊ", None),
    ],
)
def test_parse_true_false(text, expected):
    assert cs.parse_true_false(text) == expected


def test_score_counts_unclear_as_wrong_and_breaks_down_by_task():
    items = cs.generate(6, seed=0)
    outputs = [
        items[0]["answer"],
        "no idea",
        "Answer: " + items[2]["answer"],
        "True" if items[3]["answer"] == "False" else "False",
        "",
        items[5]["answer"] + ".",
    ]
    report = cs.score(items, outputs)
    o = report["overall"]
    assert (o["n"], o["correct"], o["unclear"]) == (6, 3, 2)
    assert o["accuracy"] == pytest.approx(0.5) and o["accuracy_on_clear"] == pytest.approx(3 / 4)
    assert sum(m["n"] for m in report["by_task"].values()) == 6
    assert sum(m["correct"] for m in report["by_task"].values()) == 3
    assert set(report["by_label"]) == {"True", "False"}


# ------------------------------------------------------------------------------------------- files, CLI, suite


def test_write_jsonl_roundtrip_and_cli(tmp_path):
    items = cs.generate(16, seed=4, setting="1-shot")
    path = write_jsonl(items, tmp_path / "cs.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == items
    out = tmp_path / "b.jsonl"
    assert generate_main(["suite=chronosense", "n=8", "tasks=Before,Next Occurrence", f"out={out}"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter(r["category"] for r in rows) == {"Before": 4, "Next Occurrence": 4}
    help_text = subprocess.run(
        [sys.executable, "data_prep/reasoning.py", "suite=chronosense", "--help"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=True,
    ).stdout
    assert "setting=" in help_text and "named=False" in help_text


def test_suite_runs_on_the_tiny_model_and_counts_garbage_as_unclear(tiny_model_dir, tmp_path):
    from timealign.backends.hf import HFBackend
    from timealign.suites.registry import EvalContext, get_suite

    suite = get_suite("chronosense")
    assert suite.run is cs.run_suite
    backend = HFBackend(str(tiny_model_dir), batch_size=8)
    ctx = EvalContext(
        recipe=None, out_dir=tmp_path, options=suite.parse_options({"n": "4", "max_new_tokens": "8", "seed": "1"})
    )
    report = suite.run(backend, ctx)
    o = report["overall"]
    assert o["n"] == 4 and len(report["samples"]) == 4
    preds = [cs.parse_true_false(s["output"]) for s in report["samples"]]
    assert [s["pred"] for s in report["samples"]] == preds
    assert o["unclear"] == sum(p is None for p in preds)
    assert o["correct"] == sum(s["correct"] for s in report["samples"])
    assert o["accuracy"] == pytest.approx(o["correct"] / 4)
    assert report["settings"]["max_new_tokens"] == 8 and "| accuracy |" in report["markdown"]
    json.dumps(report)
    with pytest.raises(ValueError):
        suite.parse_options({"bogus": "1"})


# ------------------------------------------------------------------------------------- clean named sets (issue 23)


def _interval_pair(question: str) -> frozenset:
    """The two year intervals a template-0 Allen question states (read off its text, not from `context_key`)."""
    start_a, end_a, start_b, end_b = map(int, re.findall(r"\byear (\d+)", question.split(" Did ")[0]))
    return frozenset({(start_a, end_a), (start_b, end_b)})


def _test_years(item: dict) -> frozenset:
    return frozenset({(item[k]["start"], item[k]["end"]) for k in ("event_a", "event_b")})


@pytest.mark.parametrize("setting", ["1-shot", "3-shot"])
@pytest.mark.parametrize("named", [True, False])
def test_no_shot_is_on_the_test_years_and_no_item_repeats(setting, named):
    # World War II and its European theatre are both 1939-1945: a shot about one showed the test's answer about the
    # other (109 of 2,028 named 3-shot items), and pairs drawn with replacement repeated items.
    items = cs.generate(1200, seed=3, setting=setting, named=named, tasks="allen")
    for it in items:
        shot_years = [_interval_pair(s["question"]) for s in it["shots"]]
        assert _test_years(it) not in shot_years, it["id"]
        assert len(set(shot_years)) == len(shot_years), it["id"]
    questions = Counter(
        (
            it["category"],
            it["hypothesis_relation"],
            it["event_a"]["start"],
            it["event_a"]["end"],
            it["event_b"]["start"],
            it["event_b"]["end"],
        )
        for it in items
    )
    assert max(questions.values()) == 1


def test_answer_order_is_drawn_with_the_seed_not_the_position():
    for named, tasks in ((True, "allen"), (False, "all")):
        items = cs.generate(400, seed=11, named=named, tasks=tasks)
        firsts = [it["label"] for it in items[::2]]
        assert 0.35 < sum(firsts) / len(firsts) < 0.65  # the positive comes first in about half of the pairs
        assert [it["label"] for it in items] != [True, False] * 200
        assert sum(it["label"] for it in items) == 200
    assert [it["label"] for it in cs.generate(40, seed=1)] == [it["label"] for it in cs.generate(40, seed=1)]
    assert [it["label"] for it in cs.generate(40, seed=1)] != [it["label"] for it in cs.generate(40, seed=2)]


# ------------------------------------------------------------------------------------- balanced sets (issue 35)

# Distinct ordered pairs of years per relation (an inverse has as many) among the built-in events; Equals: World War
# II and its European theatre, Starts: Phoney War (1939-1940) / World War II (1939-1945).
NAMED_YEAR_PAIRS = {"Before": 429, "Meets": 6, "Overlaps": 8, "Starts": 1, "During": 13, "Finishes": 8, "Equals": 1}


def _named_year_pairs(relation: str) -> int:
    return NAMED_YEAR_PAIRS.get(relation, NAMED_YEAR_PAIRS.get(cs.INVERSE[relation]))


def test_builtin_named_pairs_per_relation():
    years = {(s, e) for _, s, e in cs.BUILTIN_EVENTS}
    found = Counter(holding(a, b)[0] for a, b in itertools.product(years, repeat=2) if a != b)
    # Equals: one pair of years per interval that two events share (distinct years never are Equals).
    found["Equals"] = sum(k > 1 for k in Counter((s, e) for _, s, e in cs.BUILTIN_EVENTS).values())
    assert found == {r: _named_year_pairs(r) for r in cs.ALLEN_RELATIONS}
    pairs = cs.pairs_by_relation(cs.BUILTIN_EVENTS)
    assert all(len({(a[1:], b[1:]) for a, b in pairs[r]}) == _named_year_pairs(r) for r in cs.ALLEN_RELATIONS)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_sets_give_every_relation_its_share_without_repeats_or_shot_leaks(seed):
    # Issue 35: when a relation's named pairs ran out it left the rotation: at n=400, Before and After got 52 items
    # each, Starts, Started-By and Equals 2, and the arithmetic tasks 150 (38% instead of 3/16).
    items = cs.generate(400, seed=seed, named=True, setting="3-shot")
    # 400 items = 200 pairs over 16 tasks: 12 pairs each, and the 8 pairs left go to the first 8 tasks in order.
    share = {t: 26 if i < 8 else 24 for i, t in enumerate(cs.TASKS)}
    assert Counter(it["category"] for it in items) == share
    # A relation's named items: two per named pair of years, up to its share; the rest are abstract.
    named = {r: min(share[r], 2 * _named_year_pairs(r)) for r in cs.ALLEN_RELATIONS}
    assert named["Starts"] == 2 and named["Meets"] == 12 and named["During"] == 24 and named["Before"] == 26
    assert Counter(it["category"] for it in items if it["task"] == "allen" and not it["abstract"]) == named
    assert cs.composition(items) == {"n": 400, "by_task": share, "named_by_task": named}
    report = cs.score(items, [it["answer"] for it in items])
    report["settings"] = {"named": True, "composition": cs.composition(items)}
    filled = "Meets 14, Met-By 14, Overlaps 10, Overlapped-By 10, Starts 24, Started-By 24, Finishes 8"
    assert filled in cs.markdown_summary(report)
    per_task = Counter((it["category"], it["label"]) for it in items)
    assert all(per_task[(t, True)] == per_task[(t, False)] == k // 2 for t, k in share.items())
    # 0 duplicates: no two items ask the same question (task, hypothesis and years or parameters) ...
    questions = Counter(
        (it["category"], it.get("hypothesis_relation"), it.get("hypothesis_year"))
        + ((_test_years(it),) if it["task"] == "allen" else tuple(sorted(it["params"].items())))
        for it in items
    )
    assert max(questions.values()) == 1
    # ... and 0 shot leaks: no shot states the test's facts, whatever the events are called.
    for it in items:
        assert not any(_shares_event_pair(it, s["question"]) for s in it["shots"]), it["id"]
        if it["task"] == "allen":
            assert _test_years(it) not in [_interval_pair(s["question"]) for s in it["shots"]], it["id"]


def test_named_sets_larger_than_the_events_stay_balanced():
    items = cs.generate(2000, seed=0, named=True, tasks="allen")
    counts = Counter(it["category"] for it in items)
    # 1000 pairs over 13 relations: 76 pairs each, the 12 left to the first 12 relations.
    assert counts == {r: 154 if r != "Equals" else 152 for r in cs.ALLEN_RELATIONS}
    # Named pairs: min(77 or 76, the relation's pairs of years): Before, After 77; Meets, Met-By 6; Overlaps,
    # Overlapped-By 8; Starts, Started-By 1; During, Contains 13; Finishes, Finished-By 8; Equals 1.
    assert sum(not it["abstract"] for it in items) == 2 * (2 * 77 + 2 * 6 + 2 * 8 + 2 * 1 + 2 * 13 + 2 * 8 + 1)


def test_a_task_without_new_items_stops_with_the_size_it_allows():
    # End Timepoint with years=(1500, 1561): start in 1500..1501 (up to years[1] - 60), duration 2..50: 2 * 49 = 98
    # distinct contexts, 196 items; a larger set would repeat one.
    items = cs.generate(196, seed=0, tasks="End Timepoint", years=(1500, 1561))
    assert len({tuple(sorted(it["params"].items())) for it in items}) == 98
    with pytest.raises(ValueError, match="End Timepoint has no new item after 196 of its items"):
        cs.generate(198, seed=0, tasks="End Timepoint", years=(1500, 1561))


# ------------------------------------------------------------------------------ stated year counting (issue 35)


@pytest.mark.parametrize("template", [0, 1, 2])
def test_no_arithmetic_gold_depends_on_an_unstated_reading(template):
    # "started 1758, lasted 6 years": counted inclusively (1758 is the first year) it ended in 1763, else in 1764.
    # Every End Timepoint positive, and a negative on start + duration - 1, flips between the two readings, so the
    # prompt states the one the gold uses: the start year is not counted.
    items = cs.generate(300, seed=template, tasks="arithmetic", template=template)
    flips = 0
    for it in items:
        p, y = it["params"], it["hypothesis_year"]
        if it["category"] == "End Timepoint":
            exclusive = list(range(p["start"] + 1, p["start"] + 1 + p["duration"]))  # the years it lasted
            inclusive = list(range(p["start"], p["start"] + p["duration"]))
            assert it["label"] == (y == exclusive[-1])
            if (y == inclusive[-1]) != it["label"]:
                flips += 1
                assert f"lasted {p['duration']} years, not counting its start year." in it["prompt"], it["id"]
        elif it["category"] == "Intermediate Timepoint":  # boundary years included or not: the same answer
            assert it["label"] == (p["start"] <= y <= p["end"]) == (p["start"] < y < p["end"]), it["id"]
    assert flips >= 50  # all 50 End Timepoint positives at least
