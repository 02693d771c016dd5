"""W&B names shared by training and evaluation: one project rule, run names from the overrides, eval runs grouped
with the training run they score.

- Project: `WANDB_PROJECT` when set, else the recipe's `wandb.project`; entity likewise (`WANDB_ENTITY`, else
  `wandb.entity`). Training and eval both call `wandb_project` / `wandb_entity`.
- Training run name: `wandb.name` (or `training.run_name`) when set, else the recipe's name followed by what the
  command line changed that changes what is trained: `tiny:lr=1e-5,beta=0.2` (`run_name`; a path value by its last
  component: `tiny:source=v1,path=tictoc-v1`).
- Group: the training run's `NAME (ID)` (or `WANDB_RUN_GROUP`). Training records its id, name, group and project in
  `<output_dir>/wandb_run.json`; an evaluation of that folder, or of a `checkpoint-N` inside it, joins the group
  (`training_run_of`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from timealign.config.secrets import is_secret_key

TRAINING_RUN_FILE = "wandb_run.json"
# What a training run leaves beside its model: the launch, provenance and stop record, and the trainer's log_history.
RUN_INFO_FILE = "run_info.json"
TRAIN_LOG = "train_log.json"
MAX_NAME = 128  # W&B shows longer display names cut

# Overrides that change where things go or how they are logged, not what is trained: left out of run names.
NAME_IGNORED = (
    "name",
    "description",
    "output_dir",
    "wandb",
    "launch",
    "eval",
    "live_eval",
    "data.prepared_dir",
    "data.prep_timeout",
    "training.resume_from_checkpoint",
    "training.report_to",
    "training.run_name",
    "training.logging_steps",
    "training.logging_strategy",
    "training.logging_first_step",
    "training.logging_dir",
    "training.save_steps",
    "training.save_strategy",
    "training.save_total_limit",
    "training.eval_strategy",
    "training.eval_steps",
    "training.dataloader_num_workers",
)
SHORT_KEYS = {
    "training.learning_rate": "lr",
    "training.per_device_train_batch_size": "bs",
    "training.gradient_accumulation_steps": "grad_acc",
    "training.num_train_epochs": "epochs",
    "training.max_steps": "steps",
    "model.name_or_path": "model",
}
# A Trainer checkpoint folder inside a run's output_dir (transformers' `checkpoint-N`); group 1: the step.
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


def run_folders(folder: str | Path) -> list[Path]:
    """Where a run's records are for `folder`: the folder itself, then, for a `checkpoint-N`, the output_dir around
    it (the run's files live there)."""
    folder = Path(str(folder))
    return [folder, folder.parent] if CHECKPOINT_DIR.match(folder.name) else [folder]


def wandb_project(recipe, env: Mapping[str, str] | None = None) -> str:
    """The W&B project of every run of this recipe, training and eval: WANDB_PROJECT, else wandb.project."""
    env = os.environ if env is None else env
    return env.get("WANDB_PROJECT") or recipe.wandb.project


def wandb_entity(recipe, env: Mapping[str, str] | None = None) -> str | None:
    """WANDB_ENTITY, else wandb.entity (None: the user's default entity)."""
    env = os.environ if env is None else env
    return env.get("WANDB_ENTITY") or recipe.wandb.entity


def _ignored(key: str) -> bool:
    return is_secret_key(key) or any(key == k or key.startswith(k + ".") for k in NAME_IGNORED)


def _short_value(value: str) -> str:
    """A path's last component (`data.path=/abs/data/tictoc-v1` -> `tictoc-v1`): names stay short and say nothing
    about the machine; other values as given."""
    text = str(value)
    if "/" in text and (text.startswith(("/", ".", "~")) or Path(text).exists()):
        return Path(text).name or text
    return text


def run_name(recipe) -> str:
    """wandb.name or training.run_name when set; else `RECIPE[:key=value,...]` from the command line's overrides
    that change what is trained (`tiny:lr=1e-5,beta=0.2`), short keys where they stay unambiguous."""
    explicit = recipe.wandb.name or recipe.training.get("run_name")
    if explicit:
        return str(explicit)
    changed = {k: v for k, v in (getattr(recipe, "overrides", None) or {}).items() if not _ignored(k)}
    if not changed:
        return recipe.name
    short = {k: SHORT_KEYS.get(k, k.rsplit(".", 1)[-1]) for k in changed}
    taken = list(short.values())
    parts = [f"{short[k] if taken.count(short[k]) == 1 else k}={_short_value(v)}" for k, v in changed.items()]
    name = f"{recipe.name}:{','.join(parts)}"
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 3] + "..."


def run_group(name: str, run_id: str, env: Mapping[str, str] | None = None) -> str:
    """The group a training run and the evaluations of its checkpoints share: WANDB_RUN_GROUP, else `NAME (ID)`."""
    env = os.environ if env is None else env
    return env.get("WANDB_RUN_GROUP") or f"{name[: MAX_NAME - len(run_id) - 3]} ({run_id})"


def training_run_of(checkpoint: str | Path) -> dict | None:
    """The W&B training run recorded in a checkpoint folder (or in the output_dir around a `checkpoint-N`), or
    None when it was trained without W&B, or is not a local folder."""
    for path in (place / TRAINING_RUN_FILE for place in run_folders(checkpoint)):
        if path.is_file():
            try:
                record = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: not valid JSON ({err}); delete it or rewrite it from the W&B run") from None
            if not isinstance(record, dict) or not record.get("id"):
                raise ValueError(f"{path}: expected a JSON object with the training run's id, name and group")
            return record
    return None
