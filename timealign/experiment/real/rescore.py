"""`rescore=RUN`: a finished run's models scored again (another backend, batch size or device), no training."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from timealign.config import RecipeError
from timealign.experiment.real.arms import ARMS
from timealign.experiment.real.claim import claim_out
from timealign.experiment.real.experiment import RealExperiment
from timealign.experiment.real.identity import check_rescore, read_run, scored_on
from timealign.experiment.real.options import RealOptions, refuse_options_not_used
from timealign.experiment.real.outputs import write_outputs
from timealign.experiment.real.summary import analyse
from timealign.experiment.seeds import agreement
from timealign.experiment.spec import comma_choices, comma_seeds
from timealign.train.checkpoints import weights_problem

logger = logging.getLogger("timealign.experiment.real")


# What `rescore=` takes from this invocation; every other option is the rescored run's own.
RESCORE_OWN = ("out", "device", "eval_backend", "eval_batch_size", "resamples", "rescore")


def model_problem(checkpoint: Path) -> str | None:
    """Why a run's trained model cannot be scored, found before any scoring (a removed or cut weights file too), or
    None."""
    if not checkpoint.is_dir():
        return "not a folder"
    if not any((checkpoint / name).is_file() for name in ("config.json", "adapter_config.json")):
        return "no config.json or adapter_config.json"
    return weights_problem(checkpoint)


def rescore_run(o: RealOptions) -> dict:
    """`rescore=RUN`: RUN's models scored again on the same held-out samples (this invocation's backend, batch size
    and device), no training; `rescore.agreement` in the summary: per arm and seed, the decisions RUN made alike."""
    from dataclasses import fields, replace

    from timealign.experiment.analysis import machine_info

    start = time.perf_counter()
    folder, original = read_run(o.rescore, "rescore")
    out = Path(o.out)
    if out.resolve() == folder.resolve():
        raise RecipeError(f"rescore: out={o.out} is the run {o.rescore} itself; give a new folder as out=")
    if original["settings"].get("sources") or original["settings"].get("parallel"):
        raise RecipeError(f"rescore: {o.rescore} joins runs made apart (merge= or parallel=): its models are in those "
                          "runs' folders (<out>/runs/<unit> for parallel=); rescore each, then merge= the rescored "
                          "folders")  # fmt: skip
    refuse_options_not_used(o, "rescore", (*RESCORE_OWN, "data"), "a rescored run keeps its")
    defaults = RealOptions()
    kept = {k: v for k, v in original["settings"]["options"].items() if k not in RESCORE_OWN}
    kept = {f.name: kept[f.name] for f in fields(RealOptions) if f.name in kept}
    if o.data != defaults.data or not Path(kept.get("data", o.data)).is_dir():
        kept["data"] = o.data  # given, or the run was made on another machine: the same samples are checked below
    opts = replace(o, **{**kept, "timer": False, "overlap": False, "parallel": 1, "merge": ""})
    if not Path(opts.data).is_dir():
        raise RecipeError(f"rescore: data={opts.data}: not a folder; give the v1 folder {o.rescore} was scored on")
    arms, seeds = comma_choices(opts.arms, tuple(ARMS), "arms"), comma_seeds(opts.seeds)
    experiment = RealExperiment(out, opts, arms, seeds)
    checkpoints = {}
    for seed in seeds:
        for arm in arms:
            if ARMS[arm].trained:
                checkpoint = checkpoints[arm, seed] = folder / "models" / f"{arm}-seed{seed}"
                problem = model_problem(checkpoint)
                if problem:
                    raise RecipeError(f"rescore: {checkpoint}: no trained model there ({problem}; the run's models "
                                      "are scored from <run>/models/; a run whose models were removed cannot be "
                                      "rescored)")  # fmt: skip
            elif seed == seeds[0]:  # untrained: scored once, standing for every seed (as in the run)
                checkpoints[arm, seed] = experiment.train_arm(arm, seed)[0]
    scored = {key: scored_on(experiment.recipe(*key, evaluation=True)) for key in checkpoints}
    check_rescore(folder, original, scored, opts.data)  # the data and prompts RUN scored, before any scoring
    claim_out(o)
    reports: dict[str, dict[int, dict]] = {arm: {} for arm in arms}
    runs: dict[str, dict] = {}
    for (arm, seed), checkpoint in checkpoints.items():
        t0 = time.perf_counter()
        reports[arm][seed] = experiment.evaluate_arm(arm, seed, str(checkpoint))
        facts = dict(original.get("runs", {}).get(f"{arm}-seed{seed}") or {"arm": arm, "seed": seed})
        seconds = round(time.perf_counter() - t0, 1)
        runs[f"{arm}-seed{seed}"] = {
            **facts,
            "scored_on": scored[arm, seed],
            "eval_seconds": seconds,
            "eval_cores": None,
        }
        logger.info("%s seed %d rescored: NAR %s", arm, seed, reports[arm][seed]["overall"]["nar"])
    for arm in arms:
        for seed in seeds[1:]:
            if not ARMS[arm].trained:
                reports[arm][seed] = reports[arm][seeds[0]]
                runs[f"{arm}-seed{seed}"] = {"arm": arm, "seed": seed, "same_as_seed": seeds[0]}
    summary = analyse(reports, runs, opts, arms, seeds, experiment.steps)
    before = (original["settings"].get("data") or {}).get("sample_sha256")
    if before != (summary["settings"].get("data") or {}).get("sample_sha256"):
        raise RecipeError(f"rescore: {o.rescore} was scored on other held-out samples than these (settings.data."
                          f"sample_sha256 differs; data={opts.data}): give data= the run's v1 folder")  # fmt: skip
    summary["settings"]["machine"] = machine_info()
    summary["rescore"] = {
        "from": str(folder),
        "eval_backend": original["settings"]["options"].get("eval_backend"),
        "device": original["settings"]["options"].get("device", "cpu"),
        "machine": original["settings"].get("machine"),
        "agreement": agreement(folder, original, summary),
    }
    summary["seconds"] = round(time.perf_counter() - start, 1)
    write_outputs(summary, out)
    return summary
