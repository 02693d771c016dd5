"""The `timealign` console command: one subcommand per entry point, the same key=value options and `--help`.

    timealign dpo recipe=tiny training.learning_rate=1e-6
    timealign eval recipe=tiny checkpoint=outputs/tiny suites=tictoc
    timealign prep tictoc recipe=tiny out=/tmp/pairs
    accelerate launch -m timealign dpo recipe=llama8b      (`python -m timealign` is the same command)

Each subcommand hands the rest of the command line to the entry point's `main(argv)` (the scripts train/dpo.py,
eval/run.py, ... call the same functions), so options, `--help` and exit codes are theirs. The table names modules
as text and imports only the one chosen: `timealign --help` stays fast and loads no torch.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

from timealign.config.cli import HELP_FLAGS, invoked_as

PROG = "timealign"


@dataclass(frozen=True)
class Subcommand:
    target: str  # "module:function" taking argv and returning the exit code
    summary: str  # one line for `timealign --help`
    script: str  # the script or module that runs the same thing


SUBCOMMANDS = {
    "dpo": Subcommand("timealign.train.dpo:main", "offset-DPO on TicToc preference pairs", "train/dpo.py"),
    "sft": Subcommand("timealign.train.sft:main", "TIMER-style SFT on dialogs with response delays", "train/sft.py"),
    "eval": Subcommand("timealign.eval.runner:main", "score a checkpoint on the evaluation suites", "eval/run.py"),
    "compare": Subcommand(
        "timealign.eval.compare:main",
        "base vs trained evaluation reports: deltas, noise, NAR chart",
        "eval/compare.py",
    ),
    "export": Subcommand(
        "timealign.train.export:main",
        "export a checkpoint as a standalone model folder (LoRA merged)",
        "train/export.py",
    ),
    "model-card": Subcommand(
        "timealign.train.model_card:main",
        "rewrite a trained folder's model card",
        "python -m timealign.train.model_card",
    ),
    "serve": Subcommand(
        "timealign.serve.__main__:main",
        "OpenAI-compatible gateway that stamps messages as the checkpoint was trained",
        "python -m timealign.serve",
    ),
    "infer": Subcommand(
        "timealign.suites.timelychat.infer:main",
        "two-step TIMER inference on a trained checkpoint",
        "python -m timealign.suites.timelychat.infer",
    ),
    "synthetic": Subcommand(
        "timealign.data.synthetic.cli:main",
        "write seeded synthetic TicToc trajectories or dialogs",
        "python -m timealign.data.synthetic",
    ),
    "cluster": Subcommand(
        "timealign.cluster.cli:main", "launch, plan, submit or evaluate on SLURM", "python -m timealign.cluster"
    ),
    "experiment": Subcommand(
        "timealign.experiment.cli:main",
        "tiny-model experiments with controls and ablations",
        "python -m timealign.experiment",
    ),
    "demo": Subcommand(
        "timealign.experiment.demo:main",
        "the demo: the method learning on the tiny model (~5 min)",
        "python -m timealign.experiment.demo",
    ),
}
# `timealign prep KIND`: the data preparation scripts (data_prep/*.py).
PREP = {
    "tictoc": Subcommand(
        "timealign.data.commands:pairs_main", "build and save offset-DPO pairs from TicToc data", "data_prep/tictoc.py"
    ),
    "timelychat": Subcommand(
        "timealign.data.commands:dialogs_main",
        "load, validate and save dialogs for TIMER SFT",
        "data_prep/timelychat.py",
    ),
    "reasoning": Subcommand(
        "timealign.suites.generate_sets:main",
        "generate a seeded evaluation set of one suite",
        "data_prep/reasoning.py",
    ),
}
GROUPS = {"prep": (PREP, "prepare data: tictoc | timelychat | reasoning")}


def listing(table: dict[str, Subcommand], groups: dict | None = None) -> str:
    rows = [(name, sub.summary, sub.script) for name, sub in table.items()]
    rows += [(f"{name} KIND", text, "data_prep/*.py") for name, (_, text) in (groups or {}).items()]
    return "\n".join(f"  {name:<16} {summary}  [{script}]" for name, summary, script in rows)


def usage(prog: str, table: dict[str, Subcommand], groups: dict | None = None) -> str:
    return (
        f"usage: {prog} SUBCOMMAND [recipe=NAME|--config PATH] [key=value ...]\n\n"
        f"Subcommands (the scripts in brackets run the same; `{prog} SUBCOMMAND --help` lists its options):\n"
        f"{listing(table, groups)}"
    )


def dispatch(prog: str, table: dict[str, Subcommand], groups: dict, argv: list[str]) -> int:
    if not argv or argv[0] in HELP_FLAGS:
        print(usage(prog, table, groups), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name in groups:
        return dispatch(f"{prog} {name}", groups[name][0], {}, rest)
    if name not in table:
        close = difflib.get_close_matches(name, [*table, *groups], n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        print(
            f"error: unknown subcommand {prog} {name!r}.{hint} Subcommands: {', '.join([*table, *groups])} "
            f"(see {prog} --help)",
            file=sys.stderr,
        )
        return 2
    module, function = table[name].target.split(":")
    main = getattr(importlib.import_module(module), function)
    with invoked_as(f"{prog} {name}"):
        return int(main(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    """`timealign SUBCOMMAND [arguments]`: runs the subcommand's entry point; returns its exit code."""
    return dispatch(PROG, SUBCOMMANDS, GROUPS, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
