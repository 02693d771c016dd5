"""`make demo`: the method learning on the tiny default, about 5 minutes on 2 CPU cores.

    python -m timealign.experiment.demo [out=outputs/demo] [seed=0] [ablations=false]

The experiment's design (`timealign.experiment`, recipes experiment-dpo and experiment-timer) on a shorter schedule
(`DEMO_OVERRIDES`), without its ablations unless `ablations=true`:
1. offset-DPO on the time-blind tiny agent (it calls a tool every time): held-out NAR before and after, and the
   same training without timestamps (the control: with no clock to read it stays near chance), the NAR curve over
   the training steps from evaluation while training (`live_eval`);
2. TIMER SFT on synthetic dialogs: delay F1 and RMSLE before and after.
Writes `<out>/summary.json` (nar_before, nar_after, nar_control, f1_before, f1_after, ... and the experiment's full
summary under `experiment`), `<out>/demo.png` (before/after bars with 95% intervals, the NAR curves) and the
experiment's report.md, and prints the before/after table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.experiment.report import fmt

# Shorter than `make experiment` (3 epochs): NAR flips from "always call" to time-aware in the second epoch
# (measured: 0.51 at step 123, 0.77 at step 164; a learning rate of 1e-3 instead collapses to "never call"). A seeded
# sample of 240 held-out pairs stratified by label and scenario (timealign/data/sampling.py) is scored every 20 steps
# for the curve (measured: 0.500 up to step 140, 0.749 at step 160).
DEMO_OVERRIDES = {
    "dpo": {
        "training.num_train_epochs": "2",
        "live_eval.every_steps": "20",
        "live_eval.max_samples": "240",
        "training.logging_steps": "20",
    },
    "timer": {},
}


@dataclass
class DemoOptions:
    out: str = opt("outputs/demo", "output folder: summary.json, demo.png, report.md, eval/, models/")
    seed: int = opt(0, "data and training seed")
    ablations: bool = opt(
        False,
        "also train `make experiment`'s ablations on the demo's schedule: plain DPO (delta = 0), TIMER with "
        "lambda = 0 and without special tokens (about 2 more minutes on 2 cores; tests/test_experiment.py reads them)",
    )


COMMAND = Command(
    prog="python -m timealign.experiment.demo",
    summary="The demo (`make demo`): offset-DPO teaches the time-blind tiny agent when to call a tool again "
    "(held-out NAR before/after, and a no-timestamp control), TIMER SFT teaches response delays; "
    "about 5 minutes on 2 CPU cores. Writes summary.json and demo.png.",
    options=DemoOptions,
    recipe="none",
)


def interval(report: dict, metric: str) -> list[float] | None:
    """The bootstrap interval of `metric` in an arm's numbers (None when the report has none)."""
    return (report.get("intervals") or {}).get(metric)


def demo_summary(summary: dict) -> dict:
    """The demo's headline numbers from the experiment summary."""
    d, t = summary["dpo"], summary["timer"]
    offset, control = d["arms"]["offset"], d["arms"]["no_timestamps"]
    return {
        "nar_before": d["nar_before"],
        "nar_after": d["nar_after"],
        "nar_control": d["nar_after_no_timestamps"],
        "nar_control_before": d["nar_before_no_timestamps"],
        "nar_before_ci": interval(d["base"]["timestamps"], "nar"),
        "nar_after_ci": interval(offset, "nar"),
        "nar_control_ci": interval(control, "nar"),
        "attempt_rate_prefer_tool": {
            "before": d["base"]["timestamps"]["attempt_rate_prefer_tool"],
            "after": offset["attempt_rate_prefer_tool"],
            "control": control["attempt_rate_prefer_tool"],
        },
        "attempt_rate_prefer_no_tool": {
            "before": d["base"]["timestamps"]["attempt_rate_prefer_no_tool"],
            "after": offset["attempt_rate_prefer_no_tool"],
            "control": control["attempt_rate_prefer_no_tool"],
        },
        "nar_curve": [{"step": p["step"], "nar": p.get("nar")} for p in offset["curve"]],
        "nar_curve_control": [{"step": p["step"], "nar": p.get("nar")} for p in control["curve"]],
        "f1_before": t["f1_before"],
        "f1_after": t["f1_after"],
        "rmsle_before": t["rmsle_before"],
        "rmsle_after": t["rmsle_after"],
        "fpr_before": t["fpr_before"],
        "fpr_after": t["fpr_after"],
        "seconds": summary["seconds"]["total"],
    }


def table(s: dict) -> str:
    def ci(v):
        return "" if not v else f" [{fmt(v[0])}, {fmt(v[1])}]"

    rows = [
        (
            "TicToc NAR, held-out scenarios",
            f"{fmt(s['nar_before'])}{ci(s['nar_before_ci'])}",
            f"{fmt(s['nar_after'])}{ci(s['nar_after_ci'])}",
            f"{fmt(s['nar_control'])}{ci(s['nar_control_ci'])}",
        ),
        (
            "  attempt rate, prefer-Tool (gold: call)",
            fmt(s["attempt_rate_prefer_tool"]["before"]),
            fmt(s["attempt_rate_prefer_tool"]["after"]),
            fmt(s["attempt_rate_prefer_tool"]["control"]),
        ),
        (
            "  attempt rate, prefer-noTool (gold: answer)",
            fmt(s["attempt_rate_prefer_no_tool"]["before"]),
            fmt(s["attempt_rate_prefer_no_tool"]["after"]),
            fmt(s["attempt_rate_prefer_no_tool"]["control"]),
        ),
        ("TIMER delay F1, held-out dialogs", fmt(s["f1_before"]), fmt(s["f1_after"]), ""),
        ("TIMER delay RMSLE (lower is better)", fmt(s["rmsle_before"]), fmt(s["rmsle_after"]), ""),
    ]
    head = ("", "before", "after", "control: no timestamps")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(4)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in (head, *rows)]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(s: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curve) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = ["NAR\nbefore", "NAR\nafter", "NAR control\n(no timestamps)", "TIMER F1\nbefore", "TIMER F1\nafter"]
    values = [s["nar_before"], s["nar_after"], s["nar_control"], s["f1_before"], s["f1_after"]]
    cis = [s["nar_before_ci"], s["nar_after_ci"], s["nar_control_ci"], None, None]
    errs = [
        [0 if c is None or v is None else v - c[0] for v, c in zip(values, cis)],
        [0 if c is None or v is None else c[1] - v for v, c in zip(values, cis)],
    ]
    colors = ["#9aa5b1", "#2b7bba", "#d98c3f", "#9aa5b1", "#2b7bba"]
    bars.bar(names, [v or 0 for v in values], yerr=errs, color=colors, capsize=4)
    # Chance is a NAR notion: the line spans the three NAR bars only and is named in the legend, not on the plot.
    bars.hlines(0.5, -0.5, 2.5, color="grey", lw=0.8, ls="--", label="chance NAR (0.5)")
    for i, v in enumerate(values):  # above the error bar, so a value never sits on its whisker
        bars.text(i, (v or 0) + errs[1][i] + 0.02, fmt(v), ha="center", fontsize=8)
    bars.legend(fontsize=7, loc="upper center", frameon=False)
    bars.set_ylim(0, 1.1)
    bars.set_title("before / after training (95% bootstrap intervals)", fontsize=9)
    bars.tick_params(axis="x", labelsize=7)
    for key, label, color in (
        ("nar_curve", "offset-DPO, timestamps", "#2b7bba"),
        ("nar_curve_control", "control: no timestamps", "#d98c3f"),
    ):
        pts = [p for p in s[key] if p["nar"] is not None]
        curve.plot([p["step"] for p in pts], [p["nar"] for p in pts], marker="o", label=label, color=color)
    curve.axhline(0.5, color="grey", lw=0.8, ls="--")
    curve.set_ylim(0.3, 1.0)
    curve.set_xlabel("training step")
    curve.set_ylabel("held-out NAR")
    curve.set_title("NAR while training (live_eval)", fontsize=9)
    curve.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(invocation: Invocation) -> int:
    from timealign.experiment.design import Experiment

    opts = invocation.options
    out = Path(opts.out)
    summary = Experiment(
        out,
        seed=opts.seed,
        ablations=opts.ablations,
        overrides=DEMO_OVERRIDES,
        title="The method learning on the tiny default (`make demo`)",
    ).run()
    s = demo_summary(summary)
    (out / "summary.json").write_text(json.dumps({**s, "experiment": summary}, indent=1))
    png = plot(s, out / "demo.png")
    print(table(s))
    print(f"\n{fmt(s['seconds'], 0)} s. Wrote {out / 'summary.json'}, {png} and {out / 'report.md'}.")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
