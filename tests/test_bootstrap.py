"""Bootstrap intervals of the evaluation metrics and the paired before/after comparison (timealign/eval/bootstrap.py,
timealign/eval/compare.py), and the kept evaluation runs (timealign/eval/runs.py).

The intervals are checked against percentile bootstraps written out here with numpy (the same seed draws the same
resamples: scipy.stats.bootstrap draws `rng.integers(0, n, (resamples, n))` per stratum, strata in sorted order).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from timealign.eval.bootstrap import SampleSetMismatch, attach_intervals, paired_differences, suite_units
from timealign.suites.tictoc.metrics import summarize

TOOL, NO_TOOL = "prefer_tool", "prefer_no_tool"


def tictoc_report(samples: list[dict], protocol: str = "timealign") -> dict:
    """A TicToc report as evaluate_tictoc writes it: overall from `summarize` over the scored samples."""
    scored = [s for s in samples if "error" not in s]
    overall = summarize(
        [s["label"] for s in scored], [s["tool_call"] for s in scored], [s["empty_output"] for s in scored], protocol
    )
    return {"suite": "tictoc", "overall": overall, "settings": {"protocol": protocol}, "samples": samples}


def tictoc_samples(tool_calls: list[bool], no_tool_calls: list[bool]) -> list[dict]:
    """Samples with the labels interleaved (the units are not in label order)."""
    samples = []
    for i in range(max(len(tool_calls), len(no_tool_calls))):
        for label, calls in ((TOOL, tool_calls), (NO_TOOL, no_tool_calls)):
            if i < len(calls):
                samples.append(
                    {
                        "id": f"t{i}",
                        "elapse_level": 0 if label == TOOL else 2,
                        "label": label,
                        "tool_call": calls[i],
                        "empty_output": False,
                        "output": "",
                    }
                )
    return samples


# ------------------------------------------------------------------------------------------- single-run intervals
def test_accuracy_interval_is_a_percentile_bootstrap_of_the_items():
    correct = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1], dtype=float)
    report = {
        "suite": "tcp",
        "overall": {"accuracy": correct.mean()},
        "samples": [{"id": f"p{i}", "correct": bool(c)} for i, c in enumerate(correct)],
    }
    block = attach_intervals(report, resamples=2000, confidence=0.9, seed=7)

    rng = np.random.default_rng(7)
    means = correct[rng.integers(0, len(correct), (2000, len(correct)))].mean(axis=1)
    low, high = np.percentile(means, [5, 95])
    assert block["metrics"]["accuracy"] == pytest.approx([low, high], abs=1e-12)
    assert low <= report["overall"]["accuracy"] <= high and low < high
    assert report["intervals"] is block and block["units"] == 25 and block["stratified_by"] is None
    assert block["confidence"] == 0.9 and block["resamples"] == 2000 and block["method"] == "percentile"
    # seeded: the same report (read back from its JSON) gives the same intervals
    again = json.loads(json.dumps(report))
    assert attach_intervals(again, resamples=2000, confidence=0.9, seed=7) == block
    assert attach_intervals(again, resamples=0, confidence=0.9) is None


def test_nar_interval_resamples_each_label_separately():
    tool = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1], dtype=bool)  # 9/12 called: attempt rate (Tool) 0.75
    no_tool = np.array([0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0], dtype=bool)  # 4/16 called
    report = tictoc_report(tictoc_samples(list(tool), list(no_tool)))
    assert report["overall"]["nar"] == pytest.approx(0.5 * (0.75 + 0.75))
    block = attach_intervals(report, resamples=1500, confidence=0.95, seed=3)

    rng = np.random.default_rng(3)  # strata in sorted order: prefer_no_tool, then prefer_tool
    i_no_tool = rng.integers(0, len(no_tool), (1500, len(no_tool)))
    i_tool = rng.integers(0, len(tool), (1500, len(tool)))
    tool_rate, no_tool_rate = tool[i_tool].mean(axis=1), no_tool[i_no_tool].mean(axis=1)
    nar = 0.5 * (tool_rate + (1 - no_tool_rate))
    m = block["metrics"]
    assert m["nar"] == pytest.approx(list(np.percentile(nar, [2.5, 97.5])), abs=1e-12)
    assert m["attempt_rate_prefer_tool"] == pytest.approx(list(np.percentile(tool_rate, [2.5, 97.5])), abs=1e-12)
    assert m["attempt_rate_prefer_no_tool"] == pytest.approx(list(np.percentile(no_tool_rate, [2.5, 97.5])), abs=1e-12)
    for key, interval in m.items():
        assert interval[0] <= report["overall"][key] <= interval[1], key
    assert block["stratified_by"] == "label" and block["units"] == 28


def test_tictoc_units_leave_out_what_the_metrics_leave_out():
    """Under the paper protocol an empty output leaves the rates; a failed sample is never scored. Their units add
    nothing, so the full set of units gives the reported numbers."""
    samples = tictoc_samples([True, False, True, True, False], [False, True, False, False])
    samples[2]["empty_output"], samples[2]["tool_call"] = True, False  # a prefer-Tool sample: paper drops it
    samples[5] = {**samples[5], "tool_call": None, "empty_output": None, "error": "backend died"}
    for protocol in ("timealign", "paper"):
        report = tictoc_report(samples, protocol)
        units = suite_units(report)
        for key in ("nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool"):
            assert units.value(key) == pytest.approx(report["overall"][key]), (protocol, key)
    assert len(units) == len(samples)  # every sample is drawn; the left-out ones count nothing
    assert summarize([TOOL], [True])["nar"] is None  # one class only: NAR undefined ...
    one_class = tictoc_report(tictoc_samples([True, False, True], []))
    assert attach_intervals(one_class, resamples=200, confidence=0.95)["metrics"]["nar"] is None  # ... no interval


def test_a_report_with_nothing_scored_has_no_intervals_and_says_why():
    """Every request failed (a dead server): the report still gets written, with no interval and the reason."""
    failed = [{**s, "tool_call": None, "empty_output": None, "error": "HTTP 500"} for s in tictoc_samples([True], [])]
    from timealign.eval.bootstrap import bootstrap_intervals

    empty_units = suite_units(tictoc_report([]))
    block = bootstrap_intervals(empty_units, resamples=200)
    assert block["metrics"]["nar"] is None and block["units"] == 0
    assert any("nothing was scored" in n for n in block["notes"]), block["notes"]
    assert attach_intervals(tictoc_report(failed), resamples=200, confidence=0.95)["metrics"]["nar"] is None


def test_timelychat_units_reproduce_the_turn_level_metrics():
    from timealign.suites.timelychat.metrics import bleu2, rouge_l, timing_metrics

    rng = np.random.default_rng(0)
    words = "see you in twenty minutes okay I will call back after lunch sure".split()
    samples, gold, pred, targets = [], [], [], []
    for d in range(14):
        cases = []
        for t in range(1, 4):
            is_target = t == 3
            g = float(rng.choice([0, 0, 20, 90])) if not is_target else float(rng.choice([0, 30, 240]))
            p = None if (d, t) in {(2, 1), (5, 3)} else float(rng.choice([0, 0, 15, 60, 300]))
            case = {"turn": t, "gold_minutes": g, "pred_minutes": p, "is_target": is_target}
            if (d, t) == (7, 2):
                case["error"] = "backend died"  # a failed case: left out of every timing metric
            else:
                gold.append(g), pred.append(p), targets.append(is_target)
            cases.append(case)
        reply = " ".join(rng.choice(words, size=6))
        reference = " ".join(rng.choice(words, size=7))
        samples.append({"id": f"d{d}", "response": reply, "reference": reference, "timing": cases})
    samples[4]["error"] = "reply failed"
    scored = [s for s in samples if "error" not in s]
    hyps, refs = [s["response"] for s in scored], [s["reference"] for s in scored]
    rouge, per = rouge_l(hyps, refs)
    for s, value in zip(scored, per):
        s["rouge_l"] = value
    timing = timing_metrics(gold, pred, unparsed="wrong", targets=targets)
    report = {
        "suite": "timelychat",
        "timing": timing,
        "settings": {"unparsed": "wrong", "instant_max_minutes": 0.0},
        "overall": {
            **{
                k: timing[k]
                for k in (
                    "precision",
                    "recall",
                    "f1",
                    "fpr",
                    "rmsle",
                    "rmsle_target",
                    "target_precision",
                    "target_recall",
                    "target_f1",
                    "target_fpr",
                )
            },
            "bleu2": bleu2(hyps, refs),
            "rouge_l": rouge,
        },
        "samples": samples,
    }

    units = suite_units(report)
    assert units.unit == "dialog" and len(units) == 14  # a dialog's turns are drawn together
    for key, value in report["overall"].items():
        assert units.value(key) == pytest.approx(value, rel=1e-9), key
    block = attach_intervals(report, resamples=400, confidence=0.95)
    for key in ("f1", "rmsle", "rmsle_target", "bleu2", "rouge_l"):
        low, high = block["metrics"][key]
        assert low <= report["overall"][key] <= high, key


@pytest.mark.parametrize("unparsed", ["instant", "exclude"])
def test_units_of_a_timelychat_suite_report_give_its_numbers(tiny_tokenizer, unparsed):
    """On the suite's own report (a scripted TIMER backend from tests/helpers.py: a failed interval, an
    unparsed one), the full set of units gives every number the report states."""
    import copy

    from helpers import DIALOGS, scripted

    from timealign.render.timer import add_timer_tokens
    from timealign.suites.timelychat.turn_level import evaluate_timelychat

    tokenizer = copy.deepcopy(tiny_tokenizer)
    add_timer_tokens(tokenizer)
    report = evaluate_timelychat(scripted(tokenizer, fail_target_interval_of=1), DIALOGS, unparsed=unparsed)
    units = suite_units(json.loads(json.dumps({**report, "suite": "timelychat"})))  # as read back from its JSON
    assert report["timing"]["failed"] == 1 and report["timing"]["unparsed"] == 1
    for key in units.metrics:
        expected = report["overall"][key]
        assert units.value(key) == (None if expected is None else pytest.approx(expected, rel=1e-9)), key
    assert report["overall"]["target_fpr"] is None  # every target turn is delayed: undefined, as the units say
    assert set(units.metrics) >= {"f1", "fpr", "rmsle", "target_f1", "rmsle_target", "bleu2", "rouge_l"}


# ------------------------------------------------------------------------------------------- paired differences
def test_a_clear_improvement_is_outside_the_noise():
    n = 40
    before = tictoc_report(tictoc_samples([True] * n, [True] * n))  # always calls: NAR 0.5
    after_tool = [i % 10 != 0 for i in range(n)]  # 36/40 called when a call is wanted
    after_no_tool = [i % 8 == 0 for i in range(n)]  # 5/40 called when none is wanted
    after = tictoc_report(tictoc_samples(after_tool, after_no_tool))
    result = paired_differences(suite_units(before), suite_units(after), resamples=1000)
    nar = result["metrics"]["nar"]
    assert nar["difference"] == pytest.approx(after["overall"]["nar"] - before["overall"]["nar"])
    assert nar["interval"][0] > 0 and nar["outside_noise"] is True
    no_tool = result["metrics"]["attempt_rate_prefer_no_tool"]
    assert no_tool["interval"][1] < 0 and no_tool["outside_noise"] is True


def test_an_unchanged_model_is_within_the_noise():
    """Four samples flip each way within one label: every rate is the same, the samples are not."""
    tool = [i % 3 != 0 for i in range(30)]
    no_tool = [i % 4 == 0 for i in range(30)]
    after_tool = list(tool)
    flips = [i for i in range(30) if tool[i]][:4] + [i for i in range(30) if not tool[i]][:4]
    for i in flips:
        after_tool[i] = not after_tool[i]
    before, after = tictoc_report(tictoc_samples(tool, no_tool)), tictoc_report(tictoc_samples(after_tool, no_tool))
    result = paired_differences(suite_units(before), suite_units(after), resamples=1000)
    nar = result["metrics"]["nar"]
    assert nar["difference"] == pytest.approx(0.0, abs=1e-12)
    assert nar["interval"][0] < 0 < nar["interval"][1] and nar["outside_noise"] is False
    same = paired_differences(suite_units(before), suite_units(before), resamples=200)
    assert same["metrics"]["nar"]["interval"] == [0.0, 0.0] and same["metrics"]["nar"]["outside_noise"] is False


def test_pairing_matches_samples_by_id_and_refuses_different_sets():
    samples = tictoc_samples([True, False, True, False], [False, True, False])
    before = tictoc_report(samples)
    shuffled = tictoc_report(list(reversed(samples)))
    assert paired_differences(suite_units(before), suite_units(shuffled), resamples=100)["metrics"]["nar"][
        "interval"
    ] == [0.0, 0.0]  # the same outcomes in another order: matched by id, no difference
    fewer = tictoc_report(samples[1:])
    with pytest.raises(SampleSetMismatch, match=r"different sample sets .*1 only before, first: t0@0"):
        paired_differences(suite_units(before), suite_units(fewer))


def test_compare_prints_and_writes_the_paired_verdicts(tmp_path, capsys):
    from timealign.eval.compare import main

    before = tictoc_report(tictoc_samples([True] * 30, [True] * 30))
    after = tictoc_report(tictoc_samples([i % 6 != 0 for i in range(30)], [i % 5 == 0 for i in range(30)]))
    for report in (before, after):
        attach_intervals(report, resamples=500, confidence=0.95)
    paths = {}
    for name, report in (("before", before), ("after", after)):
        paths[name] = tmp_path / name / "tictoc.json"
        paths[name].parent.mkdir()
        paths[name].write_text(json.dumps(report))
    out = tmp_path / "cmp"
    assert (
        main([f"before={paths['before']}", f"after={paths['after'].parent}", f"out={out}", f"png={out / 'nar.png'}"])
        == 0
    )
    text = capsys.readouterr().out
    assert "| NAR | 0.500 [0.500, 0.500] |" in text and "outside noise" in text
    record = json.loads((out / "compare.json").read_text())["pairs"][0]
    assert record["paired"]["metrics"]["nar"]["outside_noise"] is True
    assert record["after"]["intervals"]["metrics"]["nar"] == after["intervals"]["metrics"]["nar"]
    assert "outside noise" in (out / "compare.md").read_text()
    assert (out / "nar.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    fewer = dict(after, samples=after["samples"][:-1])
    paths["after"].write_text(json.dumps(fewer))
    assert main([f"before={paths['before']}", f"after={paths['after']}"]) == 1
    err = capsys.readouterr().err
    assert "scored different sample sets" in err and str(paths["after"]) in err and "1 only before" in err


# ------------------------------------------------------------------------------------------- kept runs (real model)
def test_a_rerun_keeps_the_first_run_and_moves_latest(tiny_model_dir, tmp_path):
    from helpers import tictoc_rows

    from timealign.config import load_recipe
    from timealign.eval.runner import evaluate
    from timealign.eval.runs import report_path

    prepared = tmp_path / "prepared"
    tictoc_rows(prepared)
    overrides = {
        "data.prepared_dir": str(prepared),
        "data.synthetic_trajectories": "4",
        "eval.max_samples": "6",
        "eval.max_new_tokens": "4",
        "eval.bootstrap": "300",
    }
    out = tmp_path / "eval"
    first = evaluate(load_recipe("tiny", overrides), str(tiny_model_dir), ["tictoc"], out)["tictoc"]
    kept = (out / "runs" / "001" / "tictoc.json").read_bytes()
    assert first["run"] == "runs/001" and json.loads(kept)["intervals"]["resamples"] == 300
    assert "bootstrap intervals" in (out / "report.md").read_text()

    second = evaluate(load_recipe("tiny", {**overrides, "eval.bootstrap": "0"}), str(tiny_model_dir), ["tictoc"], out)[
        "tictoc"
    ]
    assert second["generation"]["cached"] == 6  # the generation cache is shared by the runs
    assert (out / "runs" / "001" / "tictoc.json").read_bytes() == kept  # the first run's report is kept
    assert second["run"] == "runs/002" and "intervals" not in second
    assert os.readlink(out / "latest") == os.path.join("runs", "002")
    assert (out / "tictoc.json").read_bytes() == (out / "runs" / "002" / "tictoc.json").read_bytes()
    assert json.loads((out / "runs" / "002" / "run.json").read_text())["complete"] is True
    assert report_path(out) == out / "latest" / "tictoc.json"
    assert report_path(out / "runs" / "001") == out / "runs" / "001" / "tictoc.json"


def test_the_recipe_refuses_bad_interval_settings():
    from timealign.config import RecipeError, load_recipe

    with pytest.raises(RecipeError, match=r"eval.bootstrap=-1 must be >= 0.*eval.confidence=1.0 must be in \(0, 1\)"):
        load_recipe("tiny", {"eval.bootstrap": "-1", "eval.confidence": "1.0"})
