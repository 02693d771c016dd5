"""Resume: which checkpoint `training.resume_from_checkpoint` continues from, and whether it may.

`auto` (what the cluster launcher passes) continues from the newest `checkpoint-N` in output_dir that loads
completely (`timealign.train.checkpoints.checkpoint_problem`), warning about each newer one it skips and why, or
starts fresh when there is none (a skipped folder is left as it is: the resumed run overwrites it when it saves that
step); a path resumes from that checkpoint (refused, with the reason, when it does not load completely);
`false`/unset starts fresh. transformers restores the model, optimizer, scheduler, RNG states and the data position,
so the resumed run repeats the uninterrupted run's steps exactly. With `auto`, a checkpoint written under a different
recipe (model, data settings, learning rate, ...) is refused instead of silently continued (`RecipeSnapshotCallback`
writes the resolved recipe into every checkpoint for this check). Either way the checkpoint must fit the recipe's
model (`check_checkpoint_fits`): its config.json's model_type, adapter or full model, every parameter's name and
shape, and every torch file the Trainer loads must pass torch's weights-only loader; a path whose saved recipe names
another model, LoRA setup or task is refused too (its other differences, a learning rate say, are logged: resuming
with them is the user's call).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml
from transformers import TrainerCallback

from timealign.config import RecipeError
from timealign.config.secrets import is_secret_key, redact
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train.checkpoints import checkpoint_folders, checkpoint_model_problem, checkpoint_problem

logger = logging.getLogger(__name__)

AUTO_WORDS = ("auto", "true", "latest", "last", "yes", "1", "on")

# Recipe keys that may change between a run and its resumption (bookkeeping, not what is trained).
RESUME_IGNORED = (
    "output_dir",
    "overwrite_output_dir",
    "description",
    "wandb",
    "launch",
    "eval",
    "live_eval",
    "data.path",
    "data.prepared_dir",
    "data.prep_timeout",
    "training.resume_from_checkpoint",
    "training.report_to",
    "training.run_name",
    "training.logging_steps",
    "training.save_steps",
    "training.save_strategy",
    "training.save_total_limit",
    "training.max_steps",
    "training.num_train_epochs",
    "training.eval_strategy",
    "training.eval_steps",
    "training.dataloader_num_workers",
    "training.logging_dir",
)


def newest_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoint-N` that loads completely; each newer one is skipped with a warning saying why (from
    rank 0; every rank decides the same on the shared output_dir)."""
    from timealign.config.cli import launcher_rank

    warn = logger.warning if launcher_rank() == 0 else logger.debug
    skipped = 0
    for path in reversed(checkpoint_folders(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            if skipped:
                warn("resuming from the older %s instead", path)
            return str(path)
        skipped += 1
        warn("skipping checkpoint %s: %s", path, problem)
    if skipped:
        warn("none of the %d checkpoints in %s loads completely: starting fresh", skipped, output_dir)
    return None


def resolve_resume(value, output_dir: str | Path) -> str | None:
    """`training.resume_from_checkpoint` -> the checkpoint folder to resume from, or None (start fresh)."""
    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in ("", "false", "no", "none", "null", "0", "off"):
        return None
    if text.lower() in AUTO_WORDS:
        newest = newest_checkpoint(output_dir)
        if newest is None:
            logger.info("resume=auto: no checkpoint in %s, starting fresh", output_dir)
        return newest
    path = Path(text)
    if not (path / "trainer_state.json").is_file():
        raise RecipeError(
            f"training.resume_from_checkpoint={text!r}: not a checkpoint folder (no trainer_state.json). "
            "Use auto, false or a checkpoint-N folder."
        )
    problem = checkpoint_problem(path)
    if problem:
        raise RecipeError(
            f"training.resume_from_checkpoint={text}: it does not load completely: {problem}. Use auto "
            "(the newest checkpoint that does), false, or another checkpoint-N folder."
        )
    return str(path)


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def recipe_differences(saved: dict, current: dict) -> list[str]:
    """Keys (dotted) whose values differ between two resolved recipes, ignoring RESUME_IGNORED."""

    def ignored(key: str) -> bool:
        return is_secret_key(key) or any(key == k or key.startswith(k + ".") for k in RESUME_IGNORED)

    a, b = _flatten(saved), _flatten(current)
    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k) != b.get(k))


def check_resume_compatible(recipe, checkpoint: str | Path) -> None:
    """Refuse to auto-resume from a checkpoint trained under a different recipe."""
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    if not path.is_file():
        logger.warning(
            "%s has no %s; cannot check that it was trained with this recipe", checkpoint, CHECKPOINT_RECIPE
        )
        return
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        saved = err
    if not isinstance(saved, dict):
        logger.warning(
            "%s does not parse (%s); cannot check that %s was trained with this recipe",
            path,
            str(saved).splitlines()[0] if saved else "empty",
            checkpoint,
        )
        return
    diffs = recipe_differences(saved, recipe.to_dict())
    if diffs:
        before, now = _flatten(saved), _flatten(recipe.to_dict())
        shown = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in diffs[:6])
        more = ", ..." if len(diffs) > 6 else ""
        raise RecipeError(
            f"{checkpoint} was trained with a different recipe ({shown}{more})."
            " Use a new output_dir=, training.resume_from_checkpoint=false to start over in this one, or "
            f"training.resume_from_checkpoint={checkpoint} to resume from it anyway."
        )


# Recipe keys that decide what a checkpoint's weights are: an explicit resume path must agree on them.
MODEL_KEYS = ("task", "model", "lora")


def check_checkpoint_fits(recipe, model, checkpoint: str | Path, explicit: bool) -> None:
    """Refuse (RecipeError, one line) a checkpoint whose weights do not fit the recipe's model, or, given as a path,
    one trained with another model, LoRA setup or task; other recipe differences of a path are the user's call."""
    value = f"training.resume_from_checkpoint={recipe.training.get('resume_from_checkpoint')}"
    ways = (
        "Resume from a checkpoint of this recipe's model (training.resume_from_checkpoint=auto: the newest in "
        "output_dir), or start over: training.resume_from_checkpoint=false"
    )
    problem = checkpoint_model_problem(model, checkpoint)
    if problem:
        raise RecipeError(f"{value}: {checkpoint} does not fit this recipe's model: {problem}. {ways}")
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    saved = _read_snapshot(path) if explicit and path.is_file() else None
    if saved is None:
        return
    now = recipe.to_dict()
    diffs = recipe_differences(saved, now)
    before, after = _flatten(saved), _flatten(now)
    shown = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in diffs]
    decisive = [line for k, line in zip(diffs, shown) if k.split(".", 1)[0] in MODEL_KEYS]
    if decisive:
        raise RecipeError(
            f"{value}: {checkpoint} was trained with another model setup ({', '.join(decisive[:4])}). {ways}"
        )
    if shown:
        logger.warning("resuming from %s, trained with other settings: %s", checkpoint, ", ".join(shown[:6]))


def _read_snapshot(path: Path) -> dict | None:
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return saved if isinstance(saved, dict) else None


class RecipeSnapshotCallback(TrainerCallback):
    """Write the resolved recipe into every checkpoint, for the auto-resume compatibility check."""

    def __init__(self, recipe, files=None):
        self.text = yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False)
        self.files = files  # WrittenFiles on rank 0: the checkpoint's files go into the run's record

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            tmp = folder / f".{CHECKPOINT_RECIPE}.tmp"  # whole or absent: a torn copy would misreport differences
            tmp.write_text(self.text)
            os.replace(tmp, folder / CHECKPOINT_RECIPE)
        if self.files is not None:
            self.files.record()


# ---------------------------------------------------------------------------------------------- session
