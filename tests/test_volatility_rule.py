"""The volatility-aware reference (issue 49, timealign/suites/tictoc/volatility.py): one elapsed-time threshold per
sensitivity class, fit on the train split. Its fit and NAR against a computation by hand, on v1 against the issue's
numbers, the train rows it is fit on (before label balancing, without the validation trajectories), and that the
labels of the samples it scores never move its thresholds. The reference in a model's report and in the clock
backend's is checked by tests/test_clock.py's eval runs."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from timealign.suites.tictoc.volatility import (
    fit_class_thresholds,
    fit_volatility_rule,
    human_seconds,
    volatility_calls,
    volatility_train_rows,
)

START = datetime(2025, 8, 10, 9, 0, tzinfo=timezone.utc)
CALL = {"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'}}


def _stamp(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def row(i: int, sensitivity: str, label: str, age: float | None) -> dict:
    """A prepared pair row whose last tool result is `age` seconds before the question (None: no tool result)."""
    messages = [{"role": "user", "content": "Price of ACME?", "time": _stamp(0)}]
    if age is not None:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [CALL], "time": _stamp(1)},
            {"role": "tool", "name": "get_price", "tool_call_id": "c1", "content": '{"price": 3}', "time": _stamp(1)},
            {"role": "assistant", "content": "ACME is at 3.", "time": _stamp(1)},
        ]
    messages.append({"role": "user", "content": "And now?", "time": _stamp(1 + (age or 0))})
    tools = [{"type": "function", "function": {"name": "get_price", "parameters": {}}}]
    return {
        "id": f"s{i}",
        "elapse_level": 1,
        "label": label,
        "sensitivity": sensitivity,
        "num_turns": len(messages),
        "prompt": messages,
        "tools": json.dumps(tools),
    }


T, N = "prefer_tool", "prefer_no_tool"
# P = 5 prefer-Tool, N = 4 prefer-noTool rows in all; a class's score is 4 x right calls + 5 x right answers.
TRAIN = [
    row(0, "high", N, 5),
    row(1, "high", N, 10),
    row(2, "high", T, 60),
    row(3, "high", T, 300),
    row(4, "high", T, None),  # no earlier result: always called, counted in P, not in the fit
    row(5, "medium", T, 50),
    row(6, "medium", N, 100),
    row(7, "medium", T, 1000),
    row(8, "low", N, 200),
]


def test_fit_by_hand():
    fit = fit_volatility_rule(TRAIN)
    # high: [10, 60) gets all right; the geometric midpoint of its ends.
    # medium: [0,50) 4x2 = 8, [50,100) 4x1 = 4, [100,1000) 4x1 + 5x1 = 9, [1000,inf) 5x1 = 5: the third.
    # low: one prefer-noTool case: [0,200) 0, [200,inf) 5: never called below the oldest train result, 200 s.
    want = {"high": math.sqrt(10 * 60), "medium": math.sqrt(100 * 1000), "low": 200.0}
    assert fit["thresholds"] == pytest.approx(want) and list(fit["thresholds"]) == ["high", "medium", "low"]
    assert fit_class_thresholds(TRAIN) == fit["thresholds"]
    assert [fit["classes"][c]["interval"] for c in want] == [[10, 60], [100, 1000], [200, None]]
    # all classes as one: ages 5N 10N 50T 60T 100N 200N 300T 1000T -> scores 16 21 26 22 18 23 28 24 20 over the
    # intervals from [0,5) to [1000,inf): [200, 300) is best.
    assert fit["fallback"] == pytest.approx(math.sqrt(200 * 300))
    # The fit on its train rows: every call right but medium's 50 s prefer-Tool case: NAR (4/5 + 4/4) / 2.
    train = fit["train"]
    assert (train["tp"], train["fn"], train["tn"], train["fp"]) == (4, 1, 4, 0)
    assert train["nar"] == pytest.approx(0.9)
    # Each class's threshold is as good as any other on the train rows (a dense grid of thresholds, by hand).
    for name, seconds in fit["thresholds"].items():
        rows = [r for r in TRAIN if r["sensitivity"] == name]

        def score(t, rows=rows, name=name):
            thresholds = {**fit["thresholds"], name: t}
            calls = [volatility_calls(r["prompt"], r["sensitivity"], thresholds) for r in rows]
            return sum(4 * c if r["label"] == T else 5 * (not c) for r, c in zip(rows, calls))

        assert score(seconds) == max(score(t) for t in (0, 1, 5, 7, 10, 30, 50, 70, 100, 200, 300, 999, 1e4, 1e7))


def test_ties_go_to_the_widest_interval_in_log_space_then_the_lowest():
    # N 10, T 20, N 30, T 40: [10,20) and [30,40) both score 6; [10,20) is wider (x2 against x1.33).
    rows = [row(0, "high", N, 10), row(1, "high", T, 20), row(2, "high", N, 30), row(3, "high", T, 40)]
    assert fit_class_thresholds(rows)["high"] == pytest.approx(math.sqrt(200))
    # N 10, T 20, N 40, T 80: [10,20) and [40,80) equally wide: the lower one (it calls more).
    rows = [row(0, "high", N, 10), row(1, "high", T, 20), row(2, "high", N, 40), row(3, "high", T, 80)]
    fit = fit_volatility_rule(rows)
    assert fit["thresholds"]["high"] == pytest.approx(math.sqrt(200))
    assert fit["classes"]["high"]["optimal_intervals"] == 2
    # One label only: prefer-Tool everywhere calls from 0 s.
    assert fit_class_thresholds([row(0, "low", T, 10), row(1, "low", T, 99)]) == {"low": 0.0}


def test_scored_on_the_report_samples_by_hand_with_the_fallback_class():
    from timealign.suites.tictoc.suite import volatility_on_same_samples

    fit = fit_volatility_rule(TRAIN) | {"fit_on": {"split": "train", "rows": len(TRAIN)}}
    # high 24.5 s, medium 316 s, low 200 s, others (fallback) 245 s
    rows = [
        row(10, "high", T, 30),  # called: right
        row(11, "high", N, 20),  # answered: right
        row(12, "medium", T, 200),  # answered: wrong
        row(13, "low", N, 250),  # called: wrong
        row(14, "unknown", T, 250),  # fallback 245 s: called, right
        row(15, "unknown", N, 240),  # answered: right
        row(16, "medium", N, 10),  # failed sample: not counted
    ]
    samples = [
        {"id": r["id"], "elapse_level": 1, "label": r["label"], "tool_call": False, "empty_output": False}
        for r in rows
    ]
    samples[-1] = dict(samples[-1], tool_call=None, error="HTTP 500")
    report = {"settings": {"protocol": "timealign"}, "samples": samples}
    ref = volatility_on_same_samples(report, rows, fit, resamples=200)
    o = ref["overall"]
    assert (o["n"], o["tp"], o["fn"], o["tn"], o["fp"]) == (6, 2, 1, 2, 1)
    assert o["nar"] == pytest.approx(0.5 * (2 / 3 + 2 / 3))
    assert ref["by_sensitivity"]["unknown"]["nar"] == 1.0 and ref["fallback_classes"] == ["unknown"]
    # per class x gap level (all at the medium gap here): high right twice, medium wrong once, low wrong once
    cells = ref["by_sensitivity_and_level"]
    assert list(cells) == ["high/medium", "low/medium", "medium/medium", "unknown/medium"]
    assert [(c["tp"], c["fn"], c["tn"], c["fp"]) for c in cells.values()] == [
        (1, 0, 1, 0), (0, 0, 0, 1), (0, 1, 0, 0), (1, 0, 1, 0)]  # fmt: skip
    assert ref["thresholds"] == fit["thresholds"] and "nar" in ref["intervals"]["metrics"]
    assert "a model must infer from the scenario" in ref["reads"]
    with pytest.raises(ValueError, match="no threshold for sensitivity class 'unknown'"):
        volatility_calls(rows[4]["prompt"], "unknown", fit["thresholds"])


def test_human_seconds():
    assert [human_seconds(s) for s in (0, 25.495, 1262.5, 7200, 1069571.9)] == [
        "0 s",
        "25.5 s",
        "21.0 min",
        "2.0 h",
        "12.4 days",
    ]


# ------------------------------------------------------------------------------------------ the v1 data


def _prepare(v1, out, **overrides):
    from timealign.config import load_recipe
    from timealign.data.pairs import load_prepared, prepare

    recipe = load_recipe("tiny", {"data.source": "v1", "data.path": str(v1), **overrides})
    prepare(recipe.data, out)
    return recipe, load_prepared(out)


@pytest.fixture(scope="module")
def v1_plain(tictoc_v1_dir, tmp_path_factory):
    """v1 prepared as the tiny recipe does (no label balancing, no validation split)."""
    out = tmp_path_factory.mktemp("v1-plain")
    recipe, data = _prepare(tictoc_v1_dir, out)
    return recipe, out, data


@pytest.fixture(scope="module")
def v1_balanced(tictoc_v1_dir, tmp_path_factory):
    """v1 prepared as the smol recipe trains on it: labels balanced per scenario, a validation share set aside."""
    out = tmp_path_factory.mktemp("v1-balanced")
    recipe, data = _prepare(
        tictoc_v1_dir, out, **{"data.balance_train_labels": "true", "data.validation_share": "0.2"}
    )
    return recipe, out, data


def test_v1_fit_rows_are_train_before_balancing_without_validation(v1_balanced):
    recipe, folder, data = v1_balanced
    rows, info = volatility_train_rows(recipe.data, folder)
    validation = {r["id"] for r in data["validation"].to_list()}
    trained = {(r["id"], r["elapse_level"]) for r in data["train"].to_list()}
    fit_keys = {(r["id"], r["elapse_level"]) for r in rows}
    # 694 v1 train samples less the validation trajectories' (every gap level of one), every balanced one among them
    assert len(rows) == 694 - len(data["validation"]) and len(fit_keys) == len(rows)
    assert trained < fit_keys and not {r["id"] for r in rows} & validation
    assert info == {
        "split": "train",
        "rows": len(rows),
        "balanced_rows_trained_on": len(trained),
        "unbalanced": True,
        "validation_set_aside": True,
        "how": "rebuilt from the sources as data prep reads them, before balancing",
    }
    assert {r["label"] for r in rows} == {T, N} and len(trained) < len(rows) / 2
    # Rows rebuilt another way than the folder was prepared (another validation share) are refused, not fit on.
    with pytest.raises(ValueError, match="the sources or data prep changed since it was prepared"):
        volatility_train_rows(dataclasses.replace(recipe.data, validation_share=0.3), folder)


def test_v1_reference_reads_about_095_on_test_and_separates_high(v1_plain):
    """Fit on the whole v1 train split (694 samples), scored on the whole test split (685): the issue's 0.952-0.968
    band of train-optimal thresholds; high's threshold lies between its prefer-noTool gaps (6-10 s) and its
    prefer-Tool ones (65 s and up)."""
    from timealign.suites.tictoc.metrics import summarize

    recipe, folder, data = v1_plain
    train, test = data["train"].to_list(), data["test"].to_list()
    rows, info = volatility_train_rows(recipe.data, folder)
    assert len(rows) == len(train) == 694 and info["how"] == "the prepared train split (no label balancing)"
    fit = fit_volatility_rule(rows)
    assert 10 <= fit["thresholds"]["high"] < 65 and fit["classes"]["high"]["interval"] == [10, 65]
    calls = [volatility_calls(r["prompt"], r["sensitivity"], fit["thresholds"]) for r in test]
    nar = summarize([r["label"] for r in test], calls)["nar"]
    assert 0.94 <= nar <= 0.97


def test_the_scored_labels_never_move_the_thresholds(v1_plain, tictoc_v1_dir, tmp_path, capsys):
    """A copy of v1 with every test-split sample at the medium gap moved to the other label's file: the clock run's
    scores change, the reference's thresholds do not (they come from the train split alone)."""
    from timealign.eval.runner import main
    from timealign.suites.tictoc.metrics import summarize

    recipe, folder, data = v1_plain
    test_ids = {r["id"] for r in data["test"].to_list()}
    flipped = tmp_path / "flipped"
    shutil.copytree(tictoc_v1_dir, flipped)
    tool, no_tool = flipped / "preferTool_elapse_1.json", flipped / "preferNoTool_elapse_1.json"
    a, b = json.loads(tool.read_text()), json.loads(no_tool.read_text())
    tool.write_text(json.dumps([r for r in a if r["id"] not in test_ids] + [r for r in b if r["id"] in test_ids]))
    no_tool.write_text(json.dumps([r for r in b if r["id"] not in test_ids] + [r for r in a if r["id"] in test_ids]))
    want = fit_class_thresholds(volatility_train_rows(recipe.data, folder)[0])
    args = ["recipe=tiny", "data.source=v1", f"data.path={flipped}", "eval.backend=clock", "eval.bootstrap=0"]
    assert main([*args, f"output_dir={tmp_path / 'run'}"]) == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "run" / "eval-clock-1800s" / "tictoc.json").read_text())
    reference = report["volatility_rule"]
    assert reference["thresholds"] == want and reference["fit_on"]["rows"] == 694
    moved = sum(1 for s in report["samples"] if s["elapse_level"] == 1 and s["label"] == N)
    assert moved != sum(1 for r in data["test"].to_list() if r["elapse_level"] == 1 and r["label"] == N)
    unmoved = data["test"].to_list()
    calls = [volatility_calls(r["prompt"], r["sensitivity"], want) for r in unmoved]
    assert reference["overall"]["nar"] != summarize([r["label"] for r in unmoved], calls)["nar"]


def test_no_reference_where_the_train_split_is_scored():
    """Scoring the train split itself (the rule's train reading): the reference would be fit on what it scores, so
    the report has none and says why (before any data is read)."""
    from timealign.config import load_recipe
    from timealign.suites.tictoc.suite import volatility_reference

    report = {"notes": []}
    assert volatility_reference(load_recipe("tiny", {"data.eval_split": "train"}), report, TRAIN) is None
    assert report["notes"] == [
        "no volatility-aware reference: it is fit on data.train_split=train, the split scored here, and never on "
        "the samples it scores"
    ]
