"""The real-model result across seeds (timealign/experiment/seeds.py): decisions kept in real.json rebuild the
evaluator's bootstrap units exactly, the across-seed summary is the hand-computed mean and range, and `merge=` pairs
arms of runs made apart (an untrained arm standing for every seed) and refuses runs that differ.

The reports are the evaluator's own (`tictoc_report` and `attach_intervals` on hand-made decisions), so every number
here is computed by the code that scores a real run.
"""

from __future__ import annotations

import json
import random
import sys

import pytest
from helpers import run_checked

from timealign.config import RecipeError
from timealign.eval.bootstrap import attach_intervals, paired_differences, suite_units
from timealign.experiment.real import COMPARISONS, TRAINED, RealOptions, analyse, markdown_report, write_outputs
from timealign.experiment.seeds import across_seeds, merge_runs, paired

RESAMPLES = 200
ROWS = [
    {"id": f"traj{i // 3}", "elapse_level": i % 3, "label": "prefer_tool" if i % 4 else "prefer_no_tool",
     "sensitivity": ("high", "medium", "low")[i % 3], "num_turns": 4 + i % 5}
    for i in range(60)
]  # fmt: skip


def report(called: list[bool], reverse: bool = False) -> dict:
    """The evaluator's TicToc report of these decisions on ROWS (`reverse`: the samples listed last to first)."""
    from timealign.suites.tictoc.metrics import tictoc_report

    rows, called = (ROWS[::-1], called[::-1]) if reverse else (ROWS, called)
    r = tictoc_report(rows, called)
    r["settings"] = {"protocol": "timealign", "family": "smol"}
    r["samples"] = [{**row, "tool_call": c, "output": "<tool_call>{}" if c else "An answer."}
                    for row, c in zip(rows, called)]  # fmt: skip
    r["data"] = {"sample_sha256": "same-samples", "label": "hand-made n=60"}
    attach_intervals(r, resamples=RESAMPLES, confidence=0.95)
    return r


def decided(seed: int, p_tool: float, p_no_tool: float) -> list[bool]:
    rng = random.Random(seed)
    return [rng.random() < (p_tool if row["label"] == "prefer_tool" else p_no_tool) for row in ROWS]


def run_summary(reports: dict, seeds: tuple[int, ...], **options) -> dict:
    opts = RealOptions(resamples=RESAMPLES, seeds=",".join(map(str, seeds)), **options)
    runs = {f"{a}-seed{s}": {"arm": a, "seed": s} for a in reports for s in seeds}
    summary = analyse(reports, runs, opts, tuple(reports), seeds, 23)
    summary["seconds"] = 1.0
    return summary


def test_decisions_rebuild_the_evaluators_units():
    """A paired difference from real.json's decisions equals the one from the two evaluator reports. When one report
    lists the samples in another order its decisions follow the summary's one list: the same numbers, and an
    interval from the same bootstrap drawn over units listed otherwise."""
    from_method = decided(1, 0.8, 0.3)
    for reverse in (False, True):
        method, clock = report(from_method), report(decided(2, 0.9, 0.6), reverse=reverse)
        summary = run_summary({"method": {0: method}, "clock": {0: clock}}, (0,))
        direct = paired_differences(suite_units(clock, "tictoc"), suite_units(method, "tictoc"), resamples=RESAMPLES)
        rebuilt = paired(summary["samples"], summary["arms"]["method"]["0"]["decisions"],
                         summary["arms"]["clock"]["0"]["decisions"], RESAMPLES)  # fmt: skip
        called = {f"{x['id']}@{x['elapse_level']}": "1" if x["tool_call"] else "0" for x in clock["samples"]}
        lined_up = "".join(called[key] for key in summary["samples"]["keys"])
        assert summary["arms"]["clock"]["0"]["decisions"] == lined_up  # each decision is its sample's
        expected = direct["metrics"]["nar"]
        assert summary["differences"]["method - clock, seed 0"] == {k: expected[k] for k in rebuilt}
        assert [rebuilt[k] for k in ("before", "after", "difference")] == [
            expected[k] for k in ("before", "after", "difference")
        ]
        if reverse:  # the bootstrap draws positions of the listed units: another listing, other draws
            assert rebuilt["interval"] == pytest.approx(expected["interval"], abs=0.05)
        else:
            assert rebuilt == {k: expected[k] for k in rebuilt}


def test_across_seeds_is_the_mean_and_range():
    nars = {0: decided(10, 0.9, 0.2), 1: decided(11, 0.6, 0.5), 2: decided(12, 0.95, 0.1)}
    clock = report(decided(3, 0.7, 0.4))
    reports = {"method": {s: report(c) for s, c in nars.items()}, "clock": dict.fromkeys(nars, clock)}
    summary = run_summary(reports, (0, 1, 2))
    values = [reports["method"][s]["overall"]["nar"] for s in (0, 1, 2)]
    arm = summary["across_seeds"]["arms"]["method"]
    assert arm["values"] == values and arm["seeds"] == [0, 1, 2]
    assert arm["mean"] == pytest.approx(sum(values) / 3) and (arm["min"], arm["max"]) == (min(values), max(values))
    c = summary["across_seeds"]["differences"]["method - clock"]
    diffs = [summary["differences"][f"method - clock, seed {s}"]["difference"] for s in (0, 1, 2)]
    assert c["differences"] == diffs and c["mean"] == pytest.approx(sum(diffs) / 3)
    assert c["same_sign"] == (all(d > 0 for d in diffs) or all(d < 0 for d in diffs))
    outside = [summary["differences"][f"method - clock, seed {s}"]["outside_noise"] for s in (0, 1, 2)]
    assert c["every_seed_outside_noise"] == all(outside)
    text = markdown_report(summary)
    assert "## Across seeds" in text and f"{arm['mean']:.3f}" in text


def write_run(folder, reports, seeds, **options):
    summary = run_summary(reports, seeds, **options)
    folder.mkdir(parents=True)
    write_outputs(summary, folder)
    return summary


def test_merge_pairs_runs_made_apart(tmp_path):
    """Seed 0 with the base, seed 1 apart: the merge pairs seed 1's method with seed 0's base (untrained: it ignores
    the seed) and with seed 1's control, as a single run of both would."""
    base = report([False] * len(ROWS))
    m0, m1, c1 = report(decided(20, 0.8, 0.2)), report(decided(21, 0.7, 0.4)), report(decided(22, 1.0, 1.0))
    write_run(tmp_path / "a", {"base": {0: base}, "method": {0: m0}}, (0,))
    write_run(tmp_path / "b", {"method": {1: m1}, "control": {1: c1}}, (1,))
    merged = merge_runs([str(tmp_path / "a"), str(tmp_path / "b")], TRAINED, COMPARISONS, RESAMPLES)
    assert merged["settings"]["seeds"] == [0, 1] and list(merged["arms"]) == ["base", "method", "control"]
    one_run = run_summary({"base": {0: base, 1: base}, "method": {0: m0, 1: m1}}, (0, 1))
    for seed in (0, 1):
        key = f"method - base, seed {seed}"
        got = {k: v for k, v in merged["differences"][key].items() if k != "merged"}
        assert got == one_run["differences"][key]
    assert merged["differences"]["method - base, seed 1"]["merged"] is True
    assert "method - control, seed 0" not in merged["differences"]  # no control on seed 0: not invented
    assert merged["across_seeds"]["arms"]["method"]["seeds"] == [0, 1]
    # the CLI writes the same, and refuses to write over a run it merges
    out = tmp_path / "merged"
    runs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    run_checked([sys.executable, "-m", "timealign.experiment.real", f"out={out}", f"merge={runs}",
                 f"resamples={RESAMPLES}"], None, timeout=300)  # fmt: skip
    written = json.loads((out / "real.json").read_text())
    assert written["differences"] == json.loads(json.dumps(merged["differences"]))
    assert (out / "real.md").read_text() == markdown_report(written)
    assert (out / "real.png").stat().st_size > 10_000


def test_merge_refuses_runs_that_differ(tmp_path):
    m0, m1 = report(decided(30, 0.8, 0.2)), report(decided(31, 0.8, 0.2))
    write_run(tmp_path / "a", {"method": {0: m0}}, (0,))
    write_run(tmp_path / "lr", {"method": {1: m1}}, (1,), learning_rate=2e-5)
    write_run(tmp_path / "again", {"method": {0: m1}}, (0,))
    with pytest.raises(RecipeError, match="learning_rate"):
        merge_runs([str(tmp_path / "a"), str(tmp_path / "lr")], TRAINED, COMPARISONS, RESAMPLES)
    with pytest.raises(RecipeError, match="method seed 0 is in"):
        merge_runs([str(tmp_path / "a"), str(tmp_path / "again")], TRAINED, COMPARISONS, RESAMPLES)
    base, other_base = report([False] * len(ROWS)), report(decided(32, 0.1, 0.1))
    write_run(tmp_path / "base", {"base": {0: base}}, (0,))
    write_run(tmp_path / "base-again", {"base": {0: base}, "method": {0: m1}}, (0,))
    write_run(tmp_path / "base-other", {"base": {0: other_base}}, (0,))
    merged = merge_runs([str(tmp_path / p) for p in ("base", "base-again")], TRAINED, COMPARISONS, RESAMPLES)
    assert merged["settings"]["repeated"] == [f"base seed 0: {tmp_path / 'base'} and {tmp_path / 'base-again'}"]
    with pytest.raises(RecipeError, match="base seed 0 is in"):  # an untrained arm scored twice must agree
        merge_runs([str(tmp_path / p) for p in ("base", "base-other")], TRAINED, COMPARISONS, RESAMPLES)
    with pytest.raises(RecipeError, match="no real.json"):
        merge_runs([str(tmp_path / "a"), str(tmp_path / "nowhere")], TRAINED, COMPARISONS, RESAMPLES)
    result = run_checked([sys.executable, "-m", "timealign.experiment.real", f"out={tmp_path / 'a'}",
                          f"merge={tmp_path / 'a'}"], None, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 2 and "merge" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert across_seeds({"arms": {}, "differences": {}}, TRAINED) == {"arms": {}, "differences": {}}
