"""Offset-DPO training entry point (`train/dpo.py` is the thin script that calls `main`).

    accelerate launch train/dpo.py recipe=llama8b [key=value ...]
    python train/dpo.py recipe=tiny

Steps: data prep (once, on the main process, unless `data.prepared_dir` already holds a prepared dataset) ->
render every pair with the shared PromptRenderer -> OffsetDPOTrainer (TRL DPOTrainer subclass) -> save the model,
tokenizer and resolved recipe to `output_dir`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import DATA_HINT, Command, run_command

logger = logging.getLogger("timealign.train.dpo")

COMMAND = Command(
    prog="[accelerate launch] train/dpo.py",
    summary="Offset-DPO (ODPO-style) on TicToc preference pairs:",
    examples="""  loss = -log sigmoid(beta * (logratio_chosen - logratio_rejected) - delta),  delta = |S - 1.5| per pair.

Override any recipe field with dotted keys, for example:
  training.learning_rate=1e-6 training.beta=0.05 data.timestamps=false lora.enabled=true
  data.source=v1 data.path=/data/tictoc-v1 output_dir=outputs/my-run training.report_to=wandb""",
    task="dpo",
    recipe="required",
)


def render_split(dataset, renderer, desc: str, offset_scale: float = 1.0):
    """Conversational pairs -> TRL's standard layout strings, through the shared renderer.

    `offset_scale` multiplies every offset (ODPO's alpha): 0 trains plain DPO on the same pairs.
    """
    if offset_scale < 0:
        raise RecipeError(f"data.offset_scale must be >= 0, got {offset_scale}")

    def render(row):
        out = renderer.pair(row["prompt"], row["chosen"][0], row["rejected"][0], row["tools"])
        if offset_scale != 1.0:
            out["margin"] = row["margin"] * offset_scale
        return out

    return dataset.map(render, remove_columns=["prompt", "chosen", "rejected", "tools"], desc=desc)


def build_trainer(recipe):
    """Everything up to a ready OffsetDPOTrainer (used by main and by tests/benchmarks)."""
    from trl import DPOConfig

    from timealign.data.pairs import load_prepared
    from timealign.data.prepared import ensure_prepared
    from timealign.render.chat import PromptRenderer
    from timealign.train.models import load_model, load_tokenizer, lora_config, resolve_base_model
    from timealign.train.odpo import OffsetDPOTrainer
    from timealign.train.tracking import training_args

    model_path = resolve_base_model(recipe.model.name_or_path)
    data = load_prepared(ensure_prepared(recipe))
    if recipe.data.train_split not in data:
        raise RecipeError(f"prepared data has no {recipe.data.train_split!r} split (has: {', '.join(data)})")

    tokenizer = load_tokenizer(model_path, recipe.model)
    renderer = PromptRenderer.for_data(tokenizer, recipe.data)
    scale = recipe.data.offset_scale
    train_ds = render_split(data[recipe.data.train_split], renderer, "Rendering train pairs", scale)
    eval_ds = None
    if recipe.data.eval_split in data and recipe.training.get("eval_strategy", "no") != "no":
        eval_ds = render_split(data[recipe.data.eval_split], renderer, "Rendering eval pairs", scale)

    model = load_model(model_path, recipe.model)
    return OffsetDPOTrainer(
        model=model,
        args=training_args(recipe, DPOConfig),
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=lora_config(recipe.lora) if recipe.lora.enabled else None,
    )


def run(recipe) -> Path:
    """Train and save; resumes per training.resume_from_checkpoint (auto|path|false). On SIGUSR1/SIGTERM (or the
    SLURM launcher's stop file) it checkpoints, stops and raises TrainingPreempted (exit code 75: requeue me)."""
    from timealign.data.prepared import prepared_dir_for
    from timealign.train.resume import train_and_save

    return train_and_save(build_trainer(recipe), recipe, data_dir=prepared_dir_for(recipe))


def main(argv: list[str] | None = None) -> int:
    """`train/dpo.py`: exit 0 after saving, 2 on a recipe error, 1 on bad input data (75 when preempted)."""
    from timealign.data.tictoc import TicTocFormatError

    def train(invocation) -> None:
        logger.info("saved model to %s", run(invocation.recipe))

    return run_command(COMMAND, argv, train, errors={TicTocFormatError: 1, FileNotFoundError: 1}, hint=DATA_HINT)
