"""One global batch: pairs (DPO) or rows (SFT) per optimizer step, whatever the process count at launch.

    global batch = per-device batch x processes x gradient accumulation

With `batch.global_size` the recipe states the left side and the run solves the right side for the world size it
was launched with (`plan_batch`): 16 on 4 GPUs is 1 per device x 4 x 4 accumulation, on 8 GPUs 1 x 8 x 2, on one
CPU process 1 x 1 x 16, and the same optimizer steps follow from the same data. Without it the recipe's
`training.per_device_train_batch_size` and `training.gradient_accumulation_steps` apply as given, and the global
batch grows with the process count. Either way the run logs the arithmetic, and `schedule_warnings` says when the
resulting schedule cannot do what the recipe asks (no loss logged in an epoch, warmup under one step, no checkpoint
before the end).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

from timealign.config import RecipeError

logger = logging.getLogger("timealign.train.batch")

PER_DEVICE = "training.per_device_train_batch_size"
ACCUMULATION = "training.gradient_accumulation_steps"


def _default(config_cls, name: str, fallback: int) -> int:
    for f in dataclasses.fields(config_cls):
        if f.name == name and f.default is not dataclasses.MISSING and f.default is not None:
            return int(f.default)
    return fallback


@dataclass(frozen=True)
class BatchPlan:
    """How the global batch is made on this launch."""

    global_size: int
    per_device: int
    processes: int
    accumulation: int
    source: str  # what stated it: batch.global_size=N, or the training.* values

    def describe(self) -> str:
        return (
            f"global batch {self.global_size} = {self.per_device} per device x {self.processes} "
            f"process{'es' if self.processes != 1 else ''} x {self.accumulation} accumulation ({self.source})"
        )

    def training_overrides(self) -> dict[str, int]:
        return {"per_device_train_batch_size": self.per_device, "gradient_accumulation_steps": self.accumulation}


def _divisors_up_to(n: int, limit: int) -> int:
    """The largest divisor of n that is <= limit (>= 1)."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def plan_batch(recipe, config_cls, processes: int) -> BatchPlan:
    """The per-device batch and accumulation for `processes` processes (RecipeError naming the arithmetic when the
    recipe's global batch cannot be made with them, or conflicts with the training.* values it also sets)."""
    training: dict[str, Any] = recipe.training or {}
    given_device, given_accumulation = (
        training.get("per_device_train_batch_size"),
        training.get("gradient_accumulation_steps"),
    )
    total = recipe.batch.global_size
    if total is None:
        per_device = int(given_device or _default(config_cls, "per_device_train_batch_size", 8))
        accumulation = int(given_accumulation or _default(config_cls, "gradient_accumulation_steps", 1))
        said = (
            ", ".join(
                f"{key}={training[key.split('.', 1)[1]]}"
                for key in (PER_DEVICE, ACCUMULATION)
                if training.get(key.split(".", 1)[1]) is not None
            )
            or "TRL's defaults"
        )
        return BatchPlan(
            per_device * processes * accumulation, per_device, processes, accumulation, f"{said}; no batch.global_size"
        )
    source = f"batch.global_size={total}"
    if total % processes:
        raise RecipeError(
            f"batch.global_size={total} cannot be split over {processes} processes: {total} is not a "
            f"multiple of {processes} (global batch = per device x processes x accumulation); launch a "
            f"process count that divides {total}, or set batch.global_size to a multiple of "
            f"{processes}"
        )
    per_process = total // processes
    if given_device is not None:
        per_device = int(given_device)
        if per_process % per_device:
            raise RecipeError(
                f"batch.global_size={total} over {processes} processes is {per_process} per process, "
                f"not a multiple of {PER_DEVICE}={per_device}: set {PER_DEVICE} to a divisor of "
                f"{per_process}, or leave it out (the largest that divides is then chosen)"
            )
    else:  # the largest micro-batch up to TRL's default that divides the share of each process
        per_device = _divisors_up_to(per_process, _default(config_cls, "per_device_train_batch_size", 8))
    accumulation = per_process // per_device
    if given_accumulation is not None and int(given_accumulation) != accumulation:
        raise RecipeError(
            f"batch.global_size={total} and {ACCUMULATION}={given_accumulation} disagree on "
            f"{processes} processes: {per_device} per device x {processes} x {given_accumulation} = "
            f"{per_device * processes * int(given_accumulation)}, not {total}; leave "
            f"{ACCUMULATION} out (it follows from the global batch) or set batch.global_size=null"
        )
    return BatchPlan(total, per_device, processes, accumulation, source)


def world_size(recipe, config_cls, launched=None) -> int:
    """Processes of this run: what the launch check found running, else accelerate's state created here as the
    Trainer will create it (launch.check=off)."""
    if launched is not None:
        return launched.num_processes
    import os

    from timealign.train.launch_check import process_state

    return process_state(recipe.training, config_cls, os.environ).num_processes


# ---------------------------------------------------------------------------------------------- the schedule


def _steps_of(value: float, total: int) -> int:
    """transformers' reading of logging_steps / save_steps / eval_steps: a float < 1 is a share of the total."""
    return math.ceil(total * value) if 0 < value < 1 else int(value)


def optimizer_steps(rows: int, plan: BatchPlan) -> int:
    """Optimizer steps per epoch as transformers counts them: each process's share of the rows (the distributed
    sampler pads to equal shares) in micro-batches, then ceil(micro-batches / accumulation)."""
    batches = math.ceil(math.ceil(rows / plan.processes) / plan.per_device)
    return max(math.ceil(batches / plan.accumulation), 1)


def schedule_warnings(args, rows: int, plan: BatchPlan) -> list[str]:
    """What the schedule cannot do with `rows` training rows per epoch: an epoch shorter than logging_steps, a
    warmup under one step, no checkpoint before the end. Empty when all is well."""
    per_epoch = optimizer_steps(rows, plan)
    epochs = float(args.num_train_epochs)
    total = int(args.max_steps) if args.max_steps and args.max_steps > 0 else math.ceil(epochs * per_epoch)
    steps_text = (
        f"{rows} rows / global batch {plan.global_size} = {per_epoch} optimizer step"
        f"{'s' if per_epoch != 1 else ''} per epoch, {total} in all"
    )
    out = []
    strategy = str(getattr(args.logging_strategy, "value", args.logging_strategy))
    if strategy == "steps":
        every = _steps_of(float(args.logging_steps), total)
        if per_epoch < every:
            logged = "no loss is logged at all" if total < every else "an epoch ends before a loss is logged"
            out.append(
                f"training.logging_steps={args.logging_steps} but {steps_text}: {logged}; lower "
                f"training.logging_steps (e.g. {max(1, per_epoch // 4)}) or batch.global_size"
            )
    warmup = float(args.warmup_steps or 0)
    if 0 < warmup < 1 and total * warmup < 1:
        out.append(
            f"training.warmup_steps={args.warmup_steps} is {total * warmup:.2g} of {total} steps "
            f"({steps_text}): transformers rounds it up to 1 step, so there is no warmup to speak of; lower "
            "batch.global_size or drop the warmup"
        )
    save = str(getattr(args.save_strategy, "value", args.save_strategy))
    if save == "steps" and _steps_of(float(args.save_steps), total) >= total:
        out.append(
            f"training.save_steps={args.save_steps} but {steps_text}: no checkpoint before the end (a "
            f"preempted or failed run restarts from step 0); set training.save_steps below {total}"
        )
    elif save == "epoch" and total <= per_epoch:
        out.append(
            f"training.save_strategy=epoch with {steps_text}: the only checkpoint is at the end (a preempted "
            "run restarts from step 0); use save_strategy=steps with save_steps below "
            f"{total}"
        )
    return out


def log_plan(plan: BatchPlan, args=None, rows: int | None = None) -> None:
    """The arithmetic at INFO, each schedule problem as a WARNING (the caller logs on rank 0 only)."""
    logger.info("%s", plan.describe())
    if args is not None and rows is not None:
        for warning in schedule_warnings(args, rows, plan):
            logger.warning("%s", warning)
