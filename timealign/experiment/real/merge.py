"""Runs joined into one report: `merge=RUN,RUN,...` (runs made apart) and `parallel=N` (each arm and seed its own
process under <out>/runs/, then merged)."""

from __future__ import annotations

import time
from pathlib import Path

from timealign.config import RecipeError
from timealign.experiment.parallel import run_units
from timealign.experiment.real.arms import COMPARISONS, TRAINED
from timealign.experiment.real.claim import check_out, claim_out
from timealign.experiment.real.identity import check_merge, read_run
from timealign.experiment.real.options import RealOptions, refuse_options_not_used
from timealign.experiment.real.outputs import write_outputs
from timealign.experiment.seeds import merge_runs

# What `merge=` takes from this invocation; every other option is the merged runs' own (given: refused).
MERGE_OWN = ("out", "merge", "resamples")


def merge_into(o: RealOptions) -> dict:
    """`merge=RUN,RUN,...`: the runs joined into one summary, written into `out=`. Every check before anything is
    written: the options, each run's real.json, the data and prompts they scored (`timealign.experiment.real.
    identity`), out= (`timealign.experiment.real.claim`) and the runs' settings and samples (`merge_runs`)."""
    paths = [p.strip() for p in o.merge.split(",") if p.strip()]
    if not paths:
        raise RecipeError(f"merge={o.merge!r} names no run; give finished runs' folders (or real.json files), "
                          "separated by commas")  # fmt: skip
    refuse_options_not_used(o, "merge", MERGE_OWN, "merged runs keep their")
    if o.resamples < 1:
        raise RecipeError(f"resamples must be >= 1, got {o.resamples}")
    out = Path(o.out).resolve()
    for path in paths:  # the merged real.json, .md and .png must not replace a run's own
        if Path(path).resolve() in (out, out / "real.json"):
            raise RecipeError(f"merge: out={o.out} is the run {path} itself; give a new folder as out=")
    check_merge([read_run(path, "merge") for path in paths])
    check_out(o)
    summary = merge_runs(paths, TRAINED, COMPARISONS, o.resamples)
    claim_out(o)
    write_outputs(summary, Path(o.out))
    return summary


def run_in_parallel(o: RealOptions, units: list, processes: int) -> dict:
    """`parallel=N`: every unit (timealign.experiment.parallel) as its own run under <out>/runs/, merged into <out>."""
    start = time.perf_counter()
    processes = min(processes, len(units))  # no more processes than units
    folders = run_units(o, units, processes, Path(o.out) / "runs")
    summary = merge_runs([str(f) for f in folders], TRAINED, COMPARISONS, o.resamples)
    # what was asked, not the units' own options (one arm and seed each, parallel=1): the command that reruns it
    summary["settings"]["options"].update(out=o.out, arms=o.arms, parallel=o.parallel, merge="")
    summary["settings"]["parallel"] = {
        "processes": processes,
        "units": len(units),
        "seconds_of_the_runs": summary["seconds"],  # each run's own clock, slowed by the sharing
    }
    summary["seconds"] = round(time.perf_counter() - start, 1)
    write_outputs(summary, Path(o.out))
    return summary
