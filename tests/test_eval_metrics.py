"""TicToc metrics on hand-counted examples, empty outputs under both protocols (detection: test_tool_calls.py)."""

import pytest

from timealign.suites.tictoc.metrics import confusion, length_bucket, nar_from_counts, summarize, tictoc_report

T, N = "prefer_tool", "prefer_no_tool"


def test_nar_worked_example():
    # 10 prefer-Tool samples, 7 with a call; 20 prefer-noTool samples, 5 with a call.
    labels = [T] * 10 + [N] * 20
    called = [True] * 7 + [False] * 3 + [True] * 5 + [False] * 15
    assert confusion(labels, called) == {"tp": 7, "fn": 3, "tn": 15, "fp": 5}
    m = summarize(labels, called)
    assert m["nar"] == pytest.approx(0.5 * (7 / 10 + 15 / 20))  # 0.725
    assert m["attempt_rate_prefer_tool"] == pytest.approx(0.7)
    assert m["attempt_rate_prefer_no_tool"] == pytest.approx(0.25)
    assert m["tool_calls"] == 12


def test_nar_of_constant_policies_is_chance():
    labels = [T] * 3 + [N] * 9
    assert summarize(labels, [True] * 12)["nar"] == 0.5  # always call: TPR 1, TNR 0
    assert summarize(labels, [False] * 12)["nar"] == 0.5
    assert nar_from_counts({"tp": 2, "fn": 0, "tn": 0, "fp": 0}) is None  # a class is missing


def test_length_buckets_and_breakdowns():
    assert [length_bucket(n) for n in (5, 7, 8, 12, 13, 21)] == ["short", "short", "medium", "medium", "long", "long"]
    rows = [
        {"label": T, "sensitivity": "high", "elapse_level": 2, "num_turns": 5},
        {"label": N, "sensitivity": "high", "elapse_level": 0, "num_turns": 13},
        {"label": N, "sensitivity": "low", "elapse_level": 0, "num_turns": 9},
    ]
    report = tictoc_report(rows, [True, True, False])
    assert report["overall"]["nar"] == pytest.approx(0.5 * (1 + 1 / 2))
    assert report["by_sensitivity"]["high"]["fp"] == 1 and report["by_sensitivity"]["low"]["tn"] == 1
    assert set(report["by_elapse_level"]) == {"small", "large"}
    assert report["by_length"]["long"]["n"] == 1


def test_empty_outputs_are_counted_and_dropped_only_in_paper_protocol():
    # 4 prefer-Tool samples: 2 calls, 1 plain answer, 1 empty; 4 prefer-noTool: 3 answers, 1 empty.
    labels = [T] * 4 + [N] * 4
    called = [True, True, False, False] + [False] * 4
    empty = [False, False, False, True] + [False, False, False, True]
    ours = summarize(labels, called, empty, protocol="timealign")
    assert ours["n"] == 8 and ours["empty_outputs"] == 2
    assert (ours["tp"], ours["fn"], ours["tn"], ours["fp"]) == (2, 2, 4, 0)  # an empty reply is "no call"
    assert ours["nar"] == pytest.approx(0.5 * (2 / 4 + 4 / 4))
    paper = summarize(labels, called, empty, protocol="paper")
    assert paper["n"] == 6 and paper["empty_outputs"] == 2  # get_metric.py: total = len(outputs) - failed
    assert (paper["tp"], paper["fn"], paper["tn"], paper["fp"]) == (2, 1, 3, 0)
    assert paper["nar"] == pytest.approx(0.5 * (2 / 3 + 3 / 3))
    assert summarize(labels, called)["empty_outputs"] == 0  # no flags given: nothing is empty
    with pytest.raises(ValueError, match="protocol"):
        summarize(labels, called, empty, protocol="bfcl")


def test_empty_outputs_in_breakdowns():
    rows = [
        {"label": T, "sensitivity": "high", "elapse_level": 2, "num_turns": 5},
        {"label": T, "sensitivity": "high", "elapse_level": 2, "num_turns": 5},
        {"label": N, "sensitivity": "low", "elapse_level": 0, "num_turns": 13},
    ]
    called, empty = [True, False, False], [False, True, False]
    paper = tictoc_report(rows, called, empty, protocol="paper")
    assert paper["overall"]["empty_outputs"] == 1 and paper["overall"]["nar"] == 1.0
    assert paper["by_sensitivity"]["high"] == {**paper["by_sensitivity"]["high"], "n": 1, "empty_outputs": 1}
    assert paper["by_sensitivity"]["low"]["empty_outputs"] == 0
    ours = tictoc_report(rows, called, empty)
    assert ours["overall"]["n"] == 3 and ours["overall"]["empty_outputs"] == 1
    assert ours["overall"]["nar"] == pytest.approx(0.5 * (1 / 2 + 1))
