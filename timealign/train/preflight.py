"""Before any work: does the run launch as the recipe asks, with which batch and TrainingArguments, are the data
release and the base model here, and is output_dir this run's. Shared by the DPO and SFT entry points.

    ready = preflight(recipe, DPOConfig)   # ready.launched, ready.batch, ready.args
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _no_lock():
    from timealign.train.run_lock import RunLock

    return RunLock()


@dataclass
class Preflight:
    """What the checks found: the launch (`timealign.train.launch_check`), the batch plan (`timealign.train.batch`)
    and the TRL config built from training.* with that plan; with a claim, output_dir's lock, held until released
    (`timealign.train.run_lock`)."""

    launched: Any
    batch: Any
    args: Any
    lock: Any = field(default_factory=_no_lock)


def preflight(recipe, config_class, claim: bool = True) -> Preflight:
    """Check and plan before data prep and the model; `claim`: take output_dir's lock (another training running
    there raises OutputDirBusy) and make the folder this run's (`timealign.train.output_dir`): another run there
    raises OutputDirInUse, this run finished raises AlreadyTrained. The caller releases `lock` when the run ends."""
    from timealign.data.hub import check_release
    from timealign.train.batch import plan_batch, world_size
    from timealign.train.fsdp_loading import check_reference_source
    from timealign.train.launch_check import check_launch
    from timealign.train.models import check_model_available
    from timealign.train.output_dir import claim_output_dir, refuse_unowned
    from timealign.train.run_lock import lock_output_dir
    from timealign.train.tracking import training_args

    launched = check_launch(recipe, config_class)  # before data prep and the model: runs as the recipe asks?
    batch = plan_batch(recipe, config_class, world_size(recipe, config_class, launched))  # per device x accumulation
    args = training_args(recipe, config_class, **batch.training_overrides())  # TRL checks training.* now
    # DPO only (SFTConfig has no reference): a precompute the FSDP weights-once loading cannot serve
    check_reference_source(getattr(args, "precompute_ref_log_probs", False), recipe.lora.enabled)
    check_release(recipe.data)  # data.source=hub: the release is here (or downloads now)
    check_model_available(recipe.model.name_or_path)  # offline: in the hub cache
    if not claim:
        return Preflight(launched, batch, args)
    out = Path(recipe.resolved_output_dir())
    refuse_unowned(out)  # a user's folder: refused before the lock is written into it
    lock = lock_output_dir(out)  # one training per output_dir at a time, until the run ends
    try:
        claim_output_dir(recipe)  # before data prep: output_dir holds no other run (or it is overwritten on purpose)
        lock.announce()  # this run, named for the next one into the folder
    except BaseException:  # AlreadyTrained included: no run goes on here
        lock.release()
        raise
    return Preflight(launched, batch, args, lock)
