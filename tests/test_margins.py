"""Issue 26: simulated annotator panels (timealign.data.synthetic.annotators) and `make experiment-margins`'s
machinery (timealign.experiment.margins), reduced: a few training steps of the random tiny model, so this checks
that the arms train, are scored on the same held-out pairs and are compared correctly, not what the margin does
(docs/experiment/margins.md has the measured result)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from timealign.data.synthetic.annotators import AnnotatorPanel, is_ambiguous, mean_score, retain
from timealign.data.synthetic.generator import generate_annotated
from timealign.data.synthetic.labels import DEFAULT_THRESHOLDS
from timealign.data.tictoc import load_annotated

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ annotator panel


@pytest.mark.parametrize(
    "gap, answer",
    [
        (1.0, 0),  # ln(1/30) = -3.4 < -1: Direct
        (20.0, 1),  # ln(20/30) = -0.41, in [-1, 0]: Lean-Direct
        (60.0, 2),  # ln(60/30) = 0.69, in (0, 1]: Lean-Tool
        (300.0, 3),  # ln(300/30) = 2.3 > 1: Tool
    ],
)
def test_noise_free_panel_answers_by_the_log_gap(gap, answer):
    panel = AnnotatorPanel(count=4, noise=0.0, lean=1.0)
    votes = panel.votes(np.random.default_rng(0), "Any Scenario", "high", gap)  # high: threshold 30 s
    assert DEFAULT_THRESHOLDS["high"] == 30.0
    assert votes == [answer] * 4
    assert mean_score(votes) == answer


def test_noisy_panel_matches_its_model():
    # sigma = noise * exp(disagreement * g_s); with disagreement 0 every scenario has sigma = noise, and the share of
    # Tool answers at evidence e is P(e + sigma * n > lean) = Phi((e - lean) / sigma).
    panel = AnnotatorPanel(count=20_000, noise=1.5, disagreement=0.0, lean=1.0)
    assert panel.scenario_sigma("A") == panel.scenario_sigma("B") == 1.5
    e = math.log(90.0 / 30.0)
    votes = np.array(panel.votes(np.random.default_rng(1), "A", "high", 90.0))
    expected = 0.5 * (1 + math.erf((e - 1.0) / 1.5 / math.sqrt(2)))
    assert abs((votes == 3).mean() - expected) < 0.015
    # Per-scenario disagreement: scenarios get different, stable noise levels.
    contested = AnnotatorPanel(noise=1.0, disagreement=0.5, seed=3)
    sigmas = {s: contested.scenario_sigma(s) for s in ("A", "B", "C", "D")}
    assert len(set(sigmas.values())) == 4 and sigmas == {s: contested.scenario_sigma(s) for s in sigmas}


def test_panel_refuses_bad_settings():
    with pytest.raises(ValueError, match="count"):
        AnnotatorPanel(count=0)
    with pytest.raises(ValueError, match="noise"):
        AnnotatorPanel(noise=-1.0)


def test_retention_rule_by_hand():
    train_scenario = "University Degree Requirements"  # a synthetic template of the train split
    records = [
        {"scenario": train_scenario, "score": 0.4},  # confident: kept everywhere
        {"scenario": train_scenario, "score": 0.5},  # ambiguous (the rule's bounds are inclusive)
        {"scenario": train_scenario, "score": 1.5},  # exact tie: always dropped
        {"scenario": train_scenario, "score": 2.6},
    ]
    from timealign.data.synthetic.templates import TEMPLATES

    test_scenario = next(t.scenario for t in TEMPLATES if t.split == "test")
    assert next(t.split for t in TEMPLATES if t.scenario == train_scenario) == "train"
    records.append({"scenario": test_scenario, "score": 2.0})  # ambiguous, held-out
    kept, counts = retain(records, "none")
    assert [r["score"] for r in kept] == [0.4, 2.6]
    assert counts == {"ties_dropped": 1, "ambiguous_dropped": 2, "kept": 2, "ambiguous_kept": 0}
    kept, counts = retain(records, "train")
    assert [r["score"] for r in kept] == [0.4, 0.5, 2.6]
    assert counts["ambiguous_dropped"] == 1 and counts["ambiguous_kept"] == 1
    kept, _ = retain(records, "all")
    assert [r["score"] for r in kept] == [0.4, 0.5, 2.6, 2.0]
    assert is_ambiguous(2.5) and not is_ambiguous(2.51)


def test_panel_records_read_back_by_the_annotated_loader(tmp_path):
    from timealign.data.records import write_jsonl

    panel = AnnotatorPanel(count=5, noise=1.5, disagreement=0.5, seed=7)
    records = generate_annotated(40, 7, split="train", max_rounds=1, annotators=panel)
    assert records == generate_annotated(40, 7, split="train", max_rounds=1, annotators=panel)  # seeded
    for r in records:
        assert len(r["votes"]) == 5 and set(r["votes"]) <= {0, 1, 2, 3}
        assert r["score"] == round(sum(r["votes"]) / 5, 4)
    assert any(is_ambiguous(r["score"]) for r in records) and any(not is_ambiguous(r["score"]) for r in records)
    kept, _ = retain(records, "all")
    write_jsonl(kept, tmp_path / "panel.jsonl")
    loaded = load_annotated(tmp_path / "panel.jsonl")
    assert len(loaded.samples) == len(kept) and not loaded.rejects
    for sample, record in zip(loaded.samples, kept):
        assert sample.score == record["score"]
        assert sample.label == ("prefer_tool" if record["score"] > 1.5 else "prefer_no_tool")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_generator_cli_writes_panel_data_and_refuses_bad_options(tmp_path):
    out = tmp_path / "panel.jsonl"
    proc = _cli("-m", "timealign.data.synthetic", "annotators=5", "n=60", "ambiguous_kept_in=train", f"out={out}")
    assert proc.returncode == 0, proc.stderr
    assert "ambiguous" in proc.stdout
    from timealign.data.synthetic.templates import TEMPLATES

    split_of = {t.scenario: t.split for t in TEMPLATES}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(not is_ambiguous(r["score"]) for r in records if split_of[r["scenario"]] == "test")
    assert any(is_ambiguous(r["score"]) for r in records if split_of[r["scenario"]] == "train")
    for args, message in (
        (("annotators=3", "layout=v1"), "needs layout=annotated"),
        (("annotators=-1",), "annotators must be 0"),
        (("annotators=5", "ambiguous_kept_in=test"), "ambiguous_kept_in must be one of"),
    ):
        proc = _cli("-m", "timealign.data.synthetic", *args, "n=3", f"out={tmp_path / 'x'}")
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = _cli("-m", "timealign.data.synthetic", "--help")
    assert "scenario_disagreement" in proc.stdout and "ambiguous_kept_in" in proc.stdout


# ------------------------------------------------------------------------------------------- the statistics


def _report(tool_calls: list[bool]) -> dict:
    """A TicToc report of 4 prefer-Tool then 4 prefer-noTool held-out pairs with the given decisions."""
    labels = ["prefer_tool"] * 4 + ["prefer_no_tool"] * 4
    samples = [
        {"id": f"t{i}", "elapse_level": i % 3, "label": lab, "tool_call": call}
        for i, (lab, call) in enumerate(zip(labels, tool_calls))
    ]
    tool_rate = sum(tool_calls[:4]) / 4
    no_tool_rate = sum(tool_calls[4:]) / 4
    return {
        "suite": "tictoc",
        "samples": samples,
        "overall": {
            "nar": (tool_rate + 1 - no_tool_rate) / 2,
            "attempt_rate_prefer_tool": tool_rate,
            "attempt_rate_prefer_no_tool": no_tool_rate,
        },
    }


def test_arm_and_difference_statistics_by_hand():
    from timealign.experiment.margins import arm_row, difference_row

    T, F = True, False
    # seed 0: baseline NAR (2/4 + 4/4) / 2 = 0.75, arm (4/4 + 3/4) / 2 = 0.875
    # seed 1: baseline NAR (1/4 + 2/4) / 2 = 0.375, arm (3/4 + 4/4) / 2 = 0.875
    base = {0: _report([T, T, F, F, F, F, F, F]), 1: _report([T, F, F, F, T, T, F, F])}
    arm = {0: _report([T, T, T, T, T, F, F, F]), 1: _report([T, T, T, F, F, F, F, F])}
    row = arm_row(base, resamples=500)
    assert row["nar_by_seed"] == {"0": 0.75, "1": 0.375}
    assert row["nar_mean"] == pytest.approx(0.5625)
    assert row["seed_sd"] == pytest.approx(0.375 / math.sqrt(2))
    assert (row["seed_min"], row["seed_max"]) == (0.375, 0.75)
    lo, hi = row["nar_mean_interval"]
    assert lo < 0.5625 < hi
    diff = difference_row(arm, base, resamples=500)
    assert diff["difference"] == pytest.approx(0.875 - 0.5625)
    assert diff["units"] == 16
    assert diff["by_seed"]["0"]["difference"] == pytest.approx(0.125)
    assert diff["by_seed"]["1"]["difference"] == pytest.approx(0.5)
    assert (diff["seeds_positive"], diff["seeds_negative"]) == (2, 0)
    assert diff["interval"][0] <= diff["difference"] <= diff["interval"][1]
    # Identical decisions: a difference of exactly 0 with a degenerate interval, never "outside noise".
    same = difference_row(base, base, resamples=200)
    assert same["difference"] == 0 and same["interval"] == [0.0, 0.0] and same["outside_noise"] is False


# ------------------------------------------------------------------------------------------- the experiment


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    """The real CLI on the random tiny model: 2 arms x 2 seeds x 2 data variants, 2 training steps each."""
    out = tmp_path_factory.mktemp("margins")
    proc = _cli(
        "-m",
        "timealign.experiment.margins",
        f"out={out}",
        "seeds=0,1",
        "modes=plain,weight",
        "base=tiny",
        "train_trajectories=14",
        "test_trajectories=7",
        "max_steps=2",
        "batch_size=2",
        "resamples=200",
        "curve_every=1",  # curve_samples (160) is above the ~20 held-out pairs: the curve scores them all
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "summary.json").read_text())


def test_reduced_experiment_trains_every_arm_on_its_data(reduced):
    out, summary = reduced
    assert sorted(summary["runs"]) == sorted(
        f"{v}-{m}-seed{s}" for v in ("confident", "with_ambiguous") for m in ("plain", "weight") for s in (0, 1)
    )
    for run in summary["runs"].values():
        assert run["train"]["steps"] == 2
        assert run["train"]["train_runtime"] > 0  # the Trainer's own seconds, kept from its log
    for seed in ("0", "1"):
        confident, ambiguous = summary["data"]["confident"][seed], summary["data"]["with_ambiguous"][seed]
        assert confident["train_ambiguous"] == 0
        assert ambiguous["train_ambiguous"] == ambiguous["generated_train_ambiguous"] > 0
        assert confident["test_records"] == ambiguous["test_records"]  # one held-out set for every run
        records = [json.loads(x) for x in (out / "data" / f"with_ambiguous-seed{seed}.jsonl").read_text().splitlines()]
        assert sum(is_ambiguous(r["score"]) for r in records) == ambiguous["train_ambiguous"]
    # The margin mode each run trained with is the one its arm names (the recipe saved with the model).
    import yaml

    from timealign.render.checkpoint import CHECKPOINT_RECIPE

    saved = yaml.safe_load((out / "models" / "with_ambiguous-weight-seed1" / CHECKPOINT_RECIPE).read_text())
    assert saved["dpo"]["margin_mode"] == "weight" and saved["data"]["source"] == "annotated"
    assert (out / "margins.png").stat().st_size > 1000
    assert "Paired differences" in (out / "report.md").read_text()


def test_reduced_experiment_statistics_match_the_runs(reduced):
    out, summary = reduced
    n = summary["test_pairs"]
    for variant, by_mode in summary["arms"].items():
        for mode, arm in by_mode.items():
            nars = [summary["runs"][f"{variant}-{mode}-seed{s}"]["nar"] for s in (0, 1)]
            assert list(arm["nar_by_seed"].values()) == nars
            assert arm["nar_mean"] == pytest.approx(sum(nars) / 2)
            assert arm["seed_sd"] == pytest.approx(abs(nars[0] - nars[1]) / math.sqrt(2))
            assert summary["runs"][f"{variant}-{mode}-seed0"]["n"] == n
        diff = summary["vs_baseline"][variant]["weight"]
        # The pooled paired difference is the difference of the mean NARs (same held-out pairs in every run), and
        # each seed's is the difference of that seed's NARs; the units are (seed, pair).
        assert diff["difference"] == pytest.approx(by_mode["weight"]["nar_mean"] - by_mode["plain"]["nar_mean"])
        assert diff["units"] == 2 * n
        for s in ("0", "1"):
            assert diff["by_seed"][s]["difference"] == pytest.approx(
                by_mode["weight"]["nar_by_seed"][s] - by_mode["plain"]["nar_by_seed"][s]
            )
        lo, hi = diff["interval"]
        assert lo <= diff["difference"] <= hi
    # The curves: the held-out set scored while training (before step 1, after steps 1 and 2) by the evaluator's
    # code on the model in memory; the last point is the final evaluation of the saved model on the same rows.
    for variant, by_mode in summary["curves"].items():
        for mode, curve in by_mode.items():
            assert curve["steps"] == [0, 1, 2]
            runs = [summary["runs"][f"{variant}-{mode}-seed{s}"] for s in (0, 1)]
            for run in runs:
                assert run["curve"]["2"] == pytest.approx(run["nar"])  # JSON: steps as text keys
            assert curve["nar_mean"][-1] == pytest.approx(by_mode_nar := summary["arms"][variant][mode]["nar_mean"])
            assert curve["nar_min"][-1] == min(r["nar"] for r in runs) <= by_mode_nar
    effect = summary["ambiguous_effect"]["plain"]
    assert effect["difference"] == pytest.approx(
        summary["arms"]["with_ambiguous"]["plain"]["nar_mean"] - summary["arms"]["confident"]["plain"]["nar_mean"]
    )


def test_experiment_refuses_bad_options_before_training(tmp_path):
    for args, message in (
        (("modes=plain,margin",), "modes takes a comma list"),
        (("seeds=0,zero",), "seeds takes a comma list of integers"),
        (("variants=all",), "variants takes a comma list"),
    ):
        proc = _cli("-m", "timealign.experiment.margins", f"out={tmp_path / 'x'}", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert not (tmp_path / "x" / "models").exists()
