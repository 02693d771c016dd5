"""`python -m timealign.data.synthetic`: write seeded synthetic TicToc trajectories or TimelyChat-style dialogs.

python -m timealign.data.synthetic n=100 seed=0 out=data/synthetic.jsonl
python -m timealign.data.synthetic split=test layout=v1 confident_only=true out=data/synthetic-v1
python -m timealign.data.synthetic layout=timelychat n=1000 out=data/dialogs.jsonl
python -m timealign.data.synthetic annotators=5 annotator_noise=1.5 ambiguous_kept_in=train out=data/panel.jsonl
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Iterable

from timealign.config.cli import Command, Invocation, run_command
from timealign.config.options import RecipeError
from timealign.data.records import write_jsonl
from timealign.data.synthetic.annotators import AMBIGUOUS_KEPT_IN, AnnotatorPanel, retain
from timealign.data.synthetic.dialogs import generate_timelychat
from timealign.data.synthetic.generator import generate_annotated
from timealign.data.synthetic.layouts import to_v1_layout, write_v1_layout

LAYOUTS = ("annotated", "v1", "timelychat")
SCENARIO_SPLITS = ("train", "test", "all")
STDOUT = "-"


@dataclass
class SyntheticOptions:
    out: str = field(
        metadata={"help": "layout=annotated|timelychat: a JSONL file, or - for stdout; layout=v1: a folder"}
    )
    n: int = field(
        default=100,
        metadata={
            "help": "trajectories (3 annotated records each, one per elapse level), or dialogs for layout=timelychat"
        },
    )
    seed: int = field(default=0, metadata={"help": "the same (n, seed, split) gives the same records"})
    split: str | None = field(
        default=None,
        metadata={
            "help": "annotated and v1: the scenarios' split (Appendix D.1), train | test | all (default all); "
            "timelychat: a name that is part of the seed and of the ids (default train)"
        },
    )
    layout: str = field(
        default="annotated",
        metadata={
            "help": "annotated: TicToc trajectories, one JSONL record per elapse level with its annotator score | "
            "v1: the same in the v1 release's folder layout, prefer{Tool,NoTool}_elapse_{k}.json | "
            "timelychat: TimelyChat-style dialogs (the TimelyChat evaluation layout), JSONL"
        },
    )
    confident_only: bool = field(
        default=False, metadata={"help": "layout=v1: drop records with 0.5 <= S <= 2.5, as the paper's filtering did"}
    )
    annotators: int = field(
        default=0,
        metadata={
            "help": "layout=annotated: 0 scores each record with 5 votes that always side with the time rule; N > 0 "
            "asks a seeded panel of N simulated annotators for the survey's four answers (Direct, Lean-Direct, "
            "Lean-Tool, Tool = 0..3; written as `votes`, S = their mean), which near the rule's threshold "
            "disagree and may side against it (timealign/data/synthetic/annotators.py)"
        },
    )
    annotator_noise: float = field(
        default=1.5,
        metadata={
            "help": "annotators > 0: each annotator's judgment noise, in units of ln(gap / threshold) (0 = every "
            "annotator applies the time rule; 1.5 leaves about a third of the samples ambiguous)"
        },
    )
    scenario_disagreement: float = field(
        default=0.5,
        metadata={
            "help": "annotators > 0: spread of the noise across scenarios (a scenario's noise is annotator_noise * "
            "exp(scenario_disagreement * g), g ~ N(0, 1) per scenario; 0 = all scenarios alike)"
        },
    )
    ambiguous_kept_in: str = field(
        default="all",
        metadata={
            "help": "annotators > 0: where records with 0.5 <= S <= 2.5 stay: all | train (train-split scenarios "
            "only: "
            "the held-out ones keep the paper's retention rule, S outside [0.5, 2.5]) | none; exact ties "
            "(S = 1.5) are always dropped"
        },
    )


COMMAND = Command(
    prog="python -m timealign.data.synthetic",
    summary="Generates seeded synthetic TicToc-style trajectories with time-rule labels, or TimelyChat-style "
    "dialogs, and writes them to a file or folder.",
    options=SyntheticOptions,
    recipe="none",
    examples="examples:\n" + "\n".join(__doc__.splitlines()[2:5]),  # the module docstring's examples
)


def _write_jsonl(lines: Iterable[str], out: str) -> None:
    if out == STDOUT:
        sys.stdout.writelines(line + "\n" for line in lines)
        return
    with open(out, "w", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in lines)


def write(options: SyntheticOptions) -> str:
    """Generate and write what `options` ask for; returns a one-line summary."""
    if options.layout not in LAYOUTS:
        raise RecipeError(f"layout must be one of {', '.join(LAYOUTS)}, got {options.layout!r}")
    if options.layout == "timelychat":
        split = options.split or "train"
        dialogs = generate_timelychat(options.n, options.seed, split)
        _write_jsonl((json.dumps(d) for d in dialogs), options.out)
        return f"wrote {len(dialogs)} dialogs ({split}) to {options.out}"
    split = options.split or "all"
    if split not in SCENARIO_SPLITS:
        raise RecipeError(
            f"split must be one of {', '.join(SCENARIO_SPLITS)} for layout={options.layout}, got {split!r}"
        )
    panel = None
    if options.annotators < 0:
        raise RecipeError(
            f"annotators must be 0 (votes that follow the time rule) or a panel size >= 1, got {options.annotators}"
        )
    if options.annotators:
        if options.layout != "annotated":
            raise RecipeError(f"annotators={options.annotators} needs layout=annotated (the v1 layout has no votes)")
        if options.ambiguous_kept_in not in AMBIGUOUS_KEPT_IN:
            raise RecipeError(
                f"ambiguous_kept_in must be one of {', '.join(AMBIGUOUS_KEPT_IN)}, got {options.ambiguous_kept_in!r}"
            )
        try:
            panel = AnnotatorPanel(
                count=options.annotators,
                noise=options.annotator_noise,
                disagreement=options.scenario_disagreement,
                seed=options.seed,
            )
        except ValueError as err:
            raise RecipeError(str(err)) from None
    records = generate_annotated(options.n, options.seed, split=None if split == "all" else split, annotators=panel)
    dropped = ""
    if panel is not None:
        records, counts = retain(records, options.ambiguous_kept_in)
        dropped = f"; dropped {counts['ambiguous_dropped']} ambiguous, {counts['ties_dropped']} ties"
    if options.layout == "annotated":
        n_tool = sum(r["score"] > 1.5 for r in records)
        if options.out == STDOUT:
            _write_jsonl((json.dumps(r, ensure_ascii=False) for r in records), STDOUT)
        else:
            write_jsonl(records, options.out)
        return f"wrote {len(records)} records ({n_tool} prefer tool{dropped}) to {options.out}"
    files = to_v1_layout(records, confident_only=options.confident_only)
    write_v1_layout(files, options.out)
    return ", ".join(f"{k}: {len(v)}" for k, v in files.items()) + f" -> {options.out}"


def _run(invocation: Invocation) -> int:
    summary = write(invocation.options)
    # With out=- the records are the output; the summary goes to stderr so a pipe gets JSONL only.
    print(summary, file=sys.stderr if invocation.options.out == STDOUT else sys.stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, _run)
