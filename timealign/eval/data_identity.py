"""A checkpoint is evaluated on what it was trained for, unless told otherwise, and every report says on what.

- `eval/run.py checkpoint=DIR` without recipe= reads DIR's `timealign_recipe.yaml` (the resolved recipe training
  saved: data source, path, splits, protocol, render settings, task); overrides (`data.eval_split=...`) still apply,
  and recipe=NAME / --config replace it (`recipe_from_checkpoint`, the eval command's `Command.recipe_from`). The
  prepared data is then read from, or prepared into, the run's own `<output_dir>/data/` (the checkpoint's output_dir:
  the folder, or the one around a `checkpoint-N`), not `outputs/NAME/` under the current folder.
- `training_differences`: how the evaluated data differs from the data the checkpoint was trained with (its saved
  recipe): the prepared-data fingerprint's differences (`timealign.data.fingerprint.Fingerprint.differences`: source,
  files, split names, data settings) and the render settings (`RENDER_SETTINGS`). Logged as a warning and written
  into each report's `data.differs_from_training`.
- `run_label`: the W&B name of one evaluation: short (no absolute paths) and unique per run,
  `eval:FOLDER:SUITE@DATA#RUN`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.tracking import CHECKPOINT_DIR, run_folders
from timealign.render.checkpoint import CHECKPOINT_RECIPE

logger = logging.getLogger("timealign.eval")

# The recipe settings that shape a rendered prompt, not the data, compared with the checkpoint's training: the data.*
# fields the prompt renderers read (`PromptRenderer.for_data`, `ChatRequestRenderer.for_data`; timealign serve
# compares these too) ...
RENDER_KEYS = ("timestamps", "elapsed", "elapsed_separator", "protocol")
# ... and what training hands the renderer besides (`PromptRenderer.for_data`'s keywords, train/dpo.py), by where it
# comes from: eval.reasoning is the Qwen3 thinking switch of the template. None: a choice of the evaluation, not of
# the recipe: prompt_mode (the eval command's; training renders none) and family (read off the checkpoint's own
# tokenizer). The TIMER renderer's timer.special_tokens and timer.order are read from the checkpoint itself
# (`timealign.render.checkpoint.timer_renderer_for_checkpoint`), so they cannot differ unless the suite is told to.
# tests/test_user_mistakes.py derives both lists from the render code: a new setting the renderer reads fails there.
RENDER_ARGUMENTS = {
    "timestamps": "data.timestamps",
    "reasoning": "eval.reasoning",
    "prompt_mode": None,
    "family": None,
}
RENDER_SETTINGS = (*(f"data.{key}" for key in RENDER_KEYS), "eval.reasoning")


def saved_recipe_file(checkpoint: str | Path | None) -> Path | None:
    """`<checkpoint>/timealign_recipe.yaml` when the checkpoint is a local folder holding one."""
    if not checkpoint:
        return None
    path = Path(str(checkpoint)) / CHECKPOINT_RECIPE
    return path if path.is_file() else None


def recipe_from_checkpoint(options: dict[str, str]) -> tuple[str, str] | None:
    """For the eval command without recipe=: (the checkpoint's saved recipe, "checkpoint DIR"), the recipe of the same
    name for a model timealign builds (`checkpoint=smol`: recipes/smol.yaml), or None (no checkpoint= given, or a hub
    id: recipe= is needed). A local folder without a saved recipe is refused with the way out."""
    checkpoint = options.get("checkpoint")
    if not checkpoint:
        return None
    path = saved_recipe_file(checkpoint)
    if path is not None:
        return str(path), f"checkpoint {checkpoint}"
    if Path(checkpoint).is_dir():
        raise RecipeError(
            f"checkpoint={checkpoint} holds no {CHECKPOINT_RECIPE} (not trained by timealign, or "
            "trained before checkpoints carried their recipe): name the recipe to evaluate it with, "
            "recipe=NAME or --config PATH"
        )
    from timealign.config.recipes import available_recipes
    from timealign.models import is_local_model

    if is_local_model(checkpoint) and checkpoint in available_recipes():
        # A model timealign builds (`smol`, `tiny`) is evaluated with its own recipe, as training would use it.
        return str(
            available_recipes()[checkpoint]
        ), f"recipe {checkpoint} (the recipe of the local model {checkpoint})"
    return None  # a hub id: the usual "recipe= needs a name"


def run_output_dir(checkpoint: str | Path) -> Path:
    """The training output_dir of a checkpoint folder (the folder, or the one around a `checkpoint-N`)."""
    return run_folders(checkpoint)[-1]


def adopt_checkpoint_recipe(recipe, checkpoint: str | Path) -> None:
    """A recipe read from the checkpoint: its prepared data lives in the checkpoint's own output_dir (where training
    prepared it), unless output_dir= or data.prepared_dir= say otherwise."""
    overrides = getattr(recipe, "overrides", None) or {}
    if "output_dir" not in overrides and not recipe.data.prepared_dir:
        recipe.output_dir = str(run_output_dir(checkpoint)).replace("{", "{{").replace("}", "}}")


def trained_recipe(checkpoint: str | Path | None):
    """The Recipe the checkpoint was trained with (its saved recipe), or None when it has none."""
    from timealign.config.recipes import load_recipe

    path = saved_recipe_file(checkpoint)
    if path is None:
        return None
    recipe = load_recipe(None, config=path)
    adopt_checkpoint_recipe(recipe, checkpoint)
    return recipe


def _fingerprint(recipe, kind: str):
    """The recipe's data fingerprint; its source files left out (and said so) when they are not on this machine."""
    from timealign.data.prepared import fingerprint_of
    from timealign.data.records import MissingData

    try:
        return fingerprint_of(recipe, kind), None
    except MissingData:  # only the data being absent; another FileNotFoundError is a failure and keeps its traceback
        import dataclasses

        data = dataclasses.replace(recipe.data, path=None)
        clone = dataclasses.replace(recipe, data=data)
        return fingerprint_of(clone, kind), f"data.path={recipe.data.path} is not on this machine: files not compared"


def training_differences(recipe, checkpoint: str | Path | None, *, timestamps: bool | None = None) -> list[str]:
    """How the data `recipe` evaluates on differs from the data the checkpoint was trained with (empty when the
    same, or when the checkpoint has no saved recipe)."""
    trained = trained_recipe(checkpoint)
    if trained is None:
        return []
    lines = []
    if trained.task != recipe.task:
        return [f"task: {trained.task} (trained) -> {recipe.task} (evaluated recipe)"]
    kind = "dialogs" if recipe.task == "sft" else "pairs"
    (before, note_a), (after, note_b) = _fingerprint(trained, kind), _fingerprint(recipe, kind)
    lines += [note for note in (note_a, note_b) if note]
    if before.sha256 != after.sha256:
        lines += [
            line.replace("(prepared)", "(trained)").replace("(this run)", "(evaluated)")
            for line in before.differences(after)
        ]
    elif trained.data.path != recipe.data.path and recipe.data.source != "synthetic":
        lines.append(f"data.path: {trained.data.path} (trained) -> {recipe.data.path} (evaluated; same files)")
    for key in RENDER_SETTINGS:
        section, field = key.split(".")
        old, new = getattr(getattr(trained, section), field), getattr(getattr(recipe, section), field)
        if key == "data.timestamps" and timestamps is not None:
            new = timestamps
        if old != new:
            lines.append(f"{key}: {old} (trained) -> {new} (evaluated)")
    if recipe.data.eval_split == recipe.data.train_split:
        lines.append(f"data.eval_split={recipe.data.eval_split!r} is the training split: the samples were trained on")
    return lines


def run_label(checkpoint: str | Path, suites: list[str], identities: dict[str, dict], run: str) -> str:
    """The W&B name of one evaluation: `eval:FOLDER:SUITE@DATA#NNN` (FOLDER: the checkpoint folder's name, with its
    run folder for a checkpoint-N; DATA: `timealign.data.identity.data_tag`)."""
    from timealign.data.identity import data_tag, short_path

    folder = Path(str(checkpoint))
    if folder.is_dir():
        name = f"{folder.parent.name}/{folder.name}" if CHECKPOINT_DIR.match(folder.name) else folder.name
    else:
        name = short_path(str(checkpoint)) or str(checkpoint)
    parts = [f"{suite}@{data_tag(identities[suite])}" if suite in identities else suite for suite in suites]
    return f"eval:{name}:{'+'.join(parts)}#{run.rsplit('/', 1)[-1]}"
