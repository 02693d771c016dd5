"""`make experiment` end to end on a fixed seed: both effects have the expected direction and size.

This runs the real CLI (`python -m timealign.experiment`, the command `make experiment` runs): tiny-agent-blind
warm-up (cached), data prep, offset-DPO with the no-timestamp control and the delta = 0 ablation, TIMER SFT with the
lambda = 0 and no-special-token ablations, evaluation on held-out data, report and plots. About 15 minutes on 2
CPU cores, so it runs once per session and every assertion reads the same summary.

The margins guard the effects we measured (seed 0, 2 CPU cores: NAR 0.50 -> 0.74-0.80 with timestamps, 0.50 without;
TIMER delay F1 0 -> 1.0), not the issue's targets: the offset-DPO target (NAR >= 0.90) is not reached by the tiny
model, and the report says so with the reason (see docs/experiment/README.md).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("experiment")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(
        [sys.executable, "-m", "timealign.experiment", f"out={out}", "seed=0"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "summary.json").read_text()), proc.stdout


def test_offset_dpo_teaches_the_tool_call_decision(experiment):
    _, summary, _ = experiment
    dpo = summary["dpo"]
    # The base is time-blind: near chance with and without timestamps.
    assert abs(dpo["nar_before"] - 0.5) <= 0.1
    assert abs(dpo["nar_before_no_timestamps"] - 0.5) <= 0.1
    # Offset-DPO with timestamps: a large gain on held-out scenarios.
    assert dpo["nar_after"] >= 0.68
    assert dpo["nar_after"] - dpo["nar_before"] >= 0.18
    # Both decisions moved the right way: calls on prefer-Tool, restraint on prefer-noTool.
    after = dpo["arms"]["offset"]
    assert after["attempt_rate_prefer_tool"] - after["attempt_rate_prefer_no_tool"] >= 0.35
    # What it learned is the gap: the cells a single gap threshold decides (seconds: answer; hours, months: call)
    cells = after["by_cell"]
    for decided_by_gap in ("high/small", "medium/small", "low/small", "high/large", "low/large"):
        gold = cells[decided_by_gap]["gold_tool_rate"]
        assert abs(cells[decided_by_gap]["attempt_rate"] - gold) <= 0.25, decided_by_gap


def test_without_timestamps_the_same_training_learns_nothing(experiment):
    _, summary, _ = experiment
    dpo = summary["dpo"]
    assert (
        dpo["nar_after_no_timestamps"] <= 0.62
    )  # measured 0.537: a per-scenario constant policy, 0.50 per sensitivity
    assert dpo["nar_after"] - dpo["nar_after_no_timestamps"] >= 0.15


def test_timer_sft_teaches_when_to_respond(experiment):
    _, summary, _ = experiment
    timer = summary["timer"]
    assert timer["f1_after"] >= 0.80  # the target, with room: we measured 1.0
    assert timer["f1_after"] - timer["f1_before"] >= 0.5
    assert timer["rmsle_after"] < 0.6 * timer["rmsle_before"]
    # Table 5's direction: without the time loss the model never learns to produce intervals.
    assert timer["arms"]["lambda0"]["f1"] < 0.5


def test_ablations_and_report_are_written(experiment):
    out, summary, stdout = experiment
    assert set(summary["dpo"]["arms"]) == {"offset", "no_timestamps", "delta0"}
    assert set(summary["timer"]["arms"]) == {"timer", "lambda0", "no_special_tokens"}
    # plain DPO with timestamps learns the gap rule too (measured 0.779), well above the control (0.538)
    assert summary["dpo"]["nar_after_delta0"] - summary["dpo"]["nar_after_no_timestamps"] >= 0.15
    for name in ("summary.json", "report.md", "nar.png", "timing.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "nar.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "nar_after" in report and "no_timestamps" in report and "lambda0" in report
    assert "target nar_after" in stdout
    # Every arm's evaluator report is kept for inspection.
    assert (out / "eval" / "dpo-offset" / "tictoc.json").is_file()
    assert (out / "eval" / "timer-timer" / "timelychat.json").is_file()
