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

logger = logging.getLogger("timealign.train.dpo")

HELP = """usage: [accelerate launch] train/dpo.py recipe=NAME [key=value ...]

Offset-DPO (ODPO-style) on TicToc preference pairs:
  loss = -log sigmoid(beta * (logratio_chosen - logratio_rejected) - delta),  delta = |S - 1.5| per pair.

Recipes (recipes/NAME.yaml):
{recipes}

Override any recipe field with dotted keys, for example:
  training.learning_rate=1e-6 training.beta=0.05 data.timestamps=false lora.enabled=true
  data.source=v1 data.path=/data/tictoc-v1 output_dir=outputs/my-run training.report_to=wandb

Fields:
{fields}
"""


def _torch_dtype(name: str):
    import torch

    if name == "auto":
        return "auto"
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise RecipeError(f"model.dtype must be float32, bfloat16, float16 or auto, got {name!r}") from None


def prepared_dir_for(recipe) -> Path:
    return Path(recipe.data.prepared_dir or Path(recipe.resolved_output_dir()) / "data")


def ensure_prepared(recipe) -> Path:
    """Run data prep on the main process if needed; every process then reads the saved dataset."""
    from accelerate import PartialState

    from timealign.data.prepare import prepare

    state = PartialState()
    path = prepared_dir_for(recipe)
    if state.is_main_process and not (path / "manifest.json").exists():
        logger.info("preparing %s data into %s", recipe.data.source, path)
        prepare(recipe.data, path)
    state.wait_for_everyone()
    return path


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
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig

    from timealign.data.prepare import load_prepared
    from timealign.rendering import PromptRenderer
    from timealign.tiny import resolve_model_path
    from timealign.train.odpo import OffsetDPOTrainer

    from accelerate import PartialState

    with PartialState().main_process_first():  # `tiny`/`tiny-agent` are built once, by the main process
        model_path = resolve_model_path(recipe.model.name_or_path)
    data = load_prepared(ensure_prepared(recipe))
    if recipe.data.train_split not in data:
        raise RecipeError(f"prepared data has no {recipe.data.train_split!r} split (has: {', '.join(data)})")

    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=recipe.model.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    renderer = PromptRenderer.for_data(tokenizer, recipe.data)
    scale = recipe.data.offset_scale
    train_ds = render_split(data[recipe.data.train_split], renderer, "Rendering train pairs", scale)
    eval_ds = None
    if recipe.data.eval_split in data and recipe.training.get("eval_strategy", "no") != "no":
        eval_ds = render_split(data[recipe.data.eval_split], renderer, "Rendering eval pairs", scale)

    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=_torch_dtype(recipe.model.dtype),
        attn_implementation=recipe.model.attn_implementation,
        trust_remote_code=recipe.model.trust_remote_code,
    )
    peft_config = None
    if recipe.lora.enabled:
        from peft import LoraConfig

        peft_config = LoraConfig(r=recipe.lora.r, lora_alpha=recipe.lora.alpha, lora_dropout=recipe.lora.dropout,
                                 target_modules=recipe.lora.target_modules, task_type="CAUSAL_LM")

    from timealign.train.tracking import training_args

    args = training_args(recipe, DPOConfig)
    return OffsetDPOTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def run(recipe) -> Path:
    """Train and save; resumes per training.resume_from_checkpoint (auto|path|false). On SIGUSR1/SIGTERM (or the
    SLURM launcher's stop file) it checkpoints, stops and raises TrainingPreempted (exit code 75: requeue me)."""
    from timealign.train.resume import train_and_save

    return train_and_save(build_trainer(recipe), recipe, data_dir=prepared_dir_for(recipe))


def main(argv: list[str] | None = None) -> int:
    from timealign.cli import recipe_main
    from timealign.data.tictoc import TicTocFormatError

    return recipe_main(argv, task="dpo", help_text=HELP, run=run, logger=logger,
                       data_errors=(TicTocFormatError, FileNotFoundError))
