"""`python -m timealign.experiment.real` (`make experiment-real`): the command, its three modes (a run, `rescore=`,
`merge=`) and what it prints."""

from __future__ import annotations

from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.experiment.parallel import auto_processes, plan_units
from timealign.experiment.real.arms import TRAINED
from timealign.experiment.real.claim import check_out, claim_out
from timealign.experiment.real.experiment import RealExperiment
from timealign.experiment.real.markdown import markdown_report
from timealign.experiment.real.merge import merge_into, run_in_parallel
from timealign.experiment.real.options import RealOptions, resolve_device, validate
from timealign.experiment.real.rescore import rescore_run

COMMAND = Command(
    prog="python -m timealign.experiment.real",
    summary="Does timealign teach a real model time? SmolLM2-135M-Instruct trained with offset-DPO on the TicToc "
    "v1 release, against its base, a no-timestamp control, plain DPO, the elapsed badge and the elapsed-time rule, "
    "on the whole held-out v1 test split (eval_samples=N: a stratified sample); timer=true adds TIMER SFT of the "
    "same model. CPU, 2 cores: 86 minutes. Writes real.json, real.md, real.png.",
    options=RealOptions,
    recipe="none",
)


def run(invocation: Invocation) -> int:
    o = invocation.options
    if o.rescore:
        resolve_device(o)
        summary = rescore_run(o)
        print(markdown_report(summary))
        print(f"wrote {Path(o.out) / 'real.json'}, real.md and real.png ({summary['seconds']:.0f} s)")
        return 0
    if o.merge:
        summary = merge_into(o)
        print(markdown_report(summary))
        print(f"merged {len(summary['settings']['sources'])} runs into {Path(o.out) / 'real.json'}, real.md and "
              "real.png")  # fmt: skip
        return 0
    arms, seeds = validate(o)
    resolve_device(o)
    check_out(o)  # out= holds nothing but this command's own run (its options as resolved)
    units = plan_units(arms, seeds, TRAINED)
    processes = o.parallel or (1 if o.timer else auto_processes(o.device, len(units)))  # auto never refuses
    if processes > 1 and o.timer:
        raise RecipeError("timer=true runs in one process: parallel=1, or the TIMER part on its own (arms=clock "
                          "timer=true)")  # fmt: skip
    experiment = RealExperiment(Path(o.out), o, arms, seeds)
    experiment.check_recipes()  # every unit's too: a misspelt override is refused before the first one runs
    claim_out(o)
    if processes > 1:
        summary = run_in_parallel(o, units, processes)
    else:
        summary = experiment.run()
    print(markdown_report(summary))
    print(f"wrote {Path(o.out) / 'real.json'}, real.md and real.png ({summary['seconds']:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)
