"""`python -m timealign.experiment [out=DIR] [seed=N] [parts=dpo,timer] [ablations=false]` (`make experiment`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.experiment.design import Experiment
from timealign.experiment.report import fmt

PARTS = ("dpo", "timer")


@dataclass
class ExperimentOptions:
    out: str = opt("results/experiment", "output folder: summary.json, report.md, nar.png, timing.png, eval/, models/")
    seed: int = opt(0, "data and training seed")
    parts: str = opt("dpo,timer", "comma list of the experiments to run: dpo (offset-DPO, NAR), timer (TIMER SFT)")
    ablations: bool = opt(
        True, "also run delta = 0, lambda = 0 and no-special-tokens (false: method and control arms only)"
    )


COMMAND = Command(
    prog="python -m timealign.experiment",
    summary="Tiny-model experiments that show (or refute) that offset-DPO teaches the tool-call decision to follow "
    "elapsed time and TIMER SFT teaches response delays; 2 CPU cores, about 10 minutes. Recipes: "
    "recipes/experiment-dpo.yaml and recipes/experiment-timer.yaml.",
    options=ExperimentOptions,
    recipe="none",
)


def run(invocation: Invocation) -> int:
    opts = invocation.options
    parts = tuple(p.strip() for p in opts.parts.split(",") if p.strip())
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise RecipeError(f"parts takes dpo and/or timer, got {opts.parts!r}")
    summary = Experiment(Path(opts.out), seed=opts.seed, parts=parts, ablations=opts.ablations).run()
    print(
        json.dumps(
            {k: {m: v for m, v in summary[k].items() if not isinstance(v, dict)} for k in PARTS if k in summary},
            indent=1,
        )
    )
    for name, t in summary["targets"].items():
        print(f"target {name}: {t['target']}: {fmt(t['value'])} -> {'met' if t['met'] else 'NOT met'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)
