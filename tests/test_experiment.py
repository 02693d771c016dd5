"""The experiment's design end to end on a fixed seed: both effects have the expected direction and size.

This runs the real CLI of `make demo` with the experiment's ablations (`python -m timealign.experiment.demo
ablations=true`): tiny-agent-blind warm-up (cached), data prep, offset-DPO with the no-timestamp control and the
delta = 0 ablation, TIMER SFT with the lambda = 0 and no-special-token ablations, evaluation on held-out data while
training and after, report and plots. `make experiment` runs the same `Experiment` on the longer schedule (3 epochs,
no curve). About 5-6 minutes on 2 CPU cores, so it runs once per session and every assertion reads the same summary.

CI (`.ci/run`) runs exactly that as its `make demo` step just before `make test` and names the folder in
TIMEALIGN_DEMO_OUT: the tests then check that run instead of repeating it (the folder must hold a demo written with
ablations, newer than every source file and recipe; otherwise they fail).

The margins guard the effects we measured (seed 0, 2 CPU cores, the demo's 2 epochs: NAR 0.50 -> 0.77 with
timestamps, 0.52 without; TIMER delay F1 0 -> 1.0), not the issue's targets: the offset-DPO target (NAR >= 0.90) is
not reached by the tiny model, and the report says so with the reason (see docs/experiment/README.md).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def sources_newer_than(path: Path) -> list[str]:
    """Source files and recipes changed after `path` was written (a stale demo folder would test older code)."""
    written = path.stat().st_mtime
    files = [*(ROOT / "timealign").rglob("*.py"), *(ROOT / "recipes").glob("*.yaml")]
    return sorted(str(f.relative_to(ROOT)) for f in files if f.stat().st_mtime > written)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    given = os.environ.get("TIMEALIGN_DEMO_OUT")
    if given:
        out = Path(given)
        summary_path = out / "summary.json"
        assert summary_path.is_file(), f"{given}: no summary.json (make demo DEMO_ARGS=ablations=true)"
        newer = sources_newer_than(summary_path)
        assert not newer, f"TIMEALIGN_DEMO_OUT={given} is older than {newer[:3]}: run the demo again"
    else:
        out = tmp_path_factory.mktemp("demo")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
        proc = subprocess.run(
            [sys.executable, "-m", "timealign.experiment.demo", f"out={out}", "seed=0", "ablations=true"],
            check=False,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "TicToc NAR, held-out scenarios" in proc.stdout  # the demo's before/after table
    summary_path = out / "summary.json"
    try:
        demo = json.loads(summary_path.read_text())
    except json.JSONDecodeError as err:  # a demo killed while writing it, or another file: name it, not just the error
        message = f"{summary_path}: not JSON ({err}); run the demo again (make demo DEMO_ARGS=ablations=true)"
        raise pytest.fail.Exception(message, pytrace=False) from None  # the message alone, no chained decode error
    assert isinstance(demo, dict) and "experiment" in demo, f"{summary_path}: not a demo summary (no 'experiment')"
    summary = demo["experiment"]
    assert summary["settings"]["ablations"] and summary["settings"]["seed"] == 0, summary["settings"]
    return out, summary, demo


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
    # The curve from evaluation while training: chance ("always call") at the start, the learned rule at the end
    curve = [p["nar"] for p in after["curve"] if p.get("nar") is not None]
    assert len(curve) >= 5 and abs(curve[0] - 0.5) <= 0.1 and curve[-1] >= 0.68, curve


def test_without_timestamps_the_same_training_learns_nothing(experiment):
    _, summary, _ = experiment
    dpo = summary["dpo"]
    assert dpo["nar_after_no_timestamps"] <= 0.62  # measured 0.515: a per-scenario constant policy
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
    out, summary, demo = experiment
    assert set(summary["dpo"]["arms"]) == {"offset", "no_timestamps", "delta0"}
    assert set(summary["timer"]["arms"]) == {"timer", "lambda0", "no_special_tokens"}
    # Every DPO arm ran the same schedule and was scored on every held-out sample.
    arms = summary["dpo"]["arms"]
    schedule = {name: (arm["train"]["steps"], arm["n"]) for name, arm in arms.items()}
    assert len(set(schedule.values())) == 1 and schedule["offset"][0] > 0, schedule
    assert schedule["offset"][1] == summary["dpo"]["base"]["timestamps"]["n"], schedule
    assert summary["dpo"]["nar_after_delta0"] == arms["delta0"]["nar"]
    for name in ("summary.json", "report.md", "nar.png", "timing.png", "demo.png"):
        assert (out / name).stat().st_size > 0, name
    for png in ("nar.png", "demo.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    report = (out / "report.md").read_text()
    assert "nar_after" in report and "no_timestamps" in report and "lambda0" in report and "delta0" in report
    # The demo's headline numbers are the experiment's.
    assert (demo["nar_after"], demo["nar_control"]) == (summary["dpo"]["nar_after"], arms["no_timestamps"]["nar"])
    # Every arm's evaluator report is kept for inspection.
    assert (out / "eval" / "dpo-offset" / "tictoc.json").is_file()
    assert (out / "eval" / "dpo-delta0" / "tictoc.json").is_file()
    assert (out / "eval" / "timer-timer" / "timelychat.json").is_file()
