"""TIMER-style multi-task SFT entry point (`train/sft.py` is the thin script that calls `main`).

    accelerate launch --config_file recipes/accelerate/zero3.yaml --num_processes N train/sft.py recipe=timer3b
    python train/sft.py recipe=tiny-timer

Steps (`run`, top to bottom): checks before any work (`timealign.train.preflight`) -> data prep (once per job, by rank
0, unless the prepared folder holds this recipe's data fingerprint; `timealign.data.prepared`) -> add the TIMER tokens
to the tokenizer and model -> render every dialog with the shared `TimerRenderer` into input ids, labels and
time/response token types -> `TimerSFTTrainer` (TRL SFTTrainer subclass, loss = L_response + lambda * L_time) -> train,
resuming and stopping for preemption (`timealign.train.session`) -> save the model (or LoRA adapter), tokenizer,
resolved recipe and training log, then the model card (`timealign.train.final_model`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import DATA_HINT, Command, run_command
from timealign.config.disk import NoSpaceLeft
from timealign.render.timer import LOSS_TURNS, TIMER_ORDERS

logger = logging.getLogger("timealign.train.sft")

COMMAND = Command(
    prog="[accelerate launch] train/sft.py",
    summary="TIMER-style multi-task SFT on TimelyChat-style dialogs (TimelyChat paper, Sec. 5.2):",
    examples="""  every turn is  <SPK> speaker <TIME> interval <UTT> utterance ;
  loss = CE(response) + lambda * CE(time)

Override any recipe field with dotted keys, for example:
  timer.lambda_time=0 (w/o time loss)   timer.special_tokens=false (w/o special tokens)
  timer.order=utterance_first           timer.emit_instant_counterpart=true   timer.loss_turns=target
  timer.packing=true (several dialogs per row of training.max_length tokens, no padding)
  data.source=timelychat data.path=/data/timelychat   lora.enabled=true   training.max_steps=100
  training.learning_rate=1e-4 output_dir=outputs/my-run training.report_to=wandb""",
    task="sft",
    recipe="required",
    reads_inputs=True,
)

NEW_TOKEN_MODES = ("trainable_tokens", "modules_to_save")


def run(recipe) -> Path:
    """Train and save, top to bottom: checks -> prepared data -> trainer -> train -> save -> model card, with the
    same resume and preemption handling as DPO (`timealign.train.session`). A run already finished in output_dir
    returns that folder."""
    from trl import SFTConfig

    from timealign.train.output_dir import AlreadyTrained
    from timealign.train.preflight import preflight
    from timealign.train.session import train_and_save

    check_timer_section(recipe.timer)
    try:
        ready = preflight(recipe, SFTConfig)  # launch, batch, TrainingArguments, release, model, output_dir claim
    except AlreadyTrained as done:
        logger.warning("%s", done)
        return done.output_dir
    return train_and_save(recipe, ready, prepare_data, make_trainer)


def check_timer_section(timer) -> None:
    """Refuse values the SFT pipeline does not know, naming the valid ones."""
    from timealign.train.timer import LOSS_NORMALIZATIONS

    choices = {
        "order": TIMER_ORDERS,
        "loss_turns": LOSS_TURNS,
        "loss_normalization": LOSS_NORMALIZATIONS,
        "lora_new_tokens": NEW_TOKEN_MODES,
    }
    for key, valid in choices.items():
        if getattr(timer, key) not in valid:
            raise RecipeError(f"timer.{key}={getattr(timer, key)!r} is not one of: {', '.join(valid)}")
    if not timer.lambda_time >= 0:
        raise RecipeError(f"timer.lambda_time must be >= 0, got {timer.lambda_time}")
    for key in ("synthetic_dialogs", "synthetic_eval_dialogs"):
        if getattr(timer, key) < 0:
            raise RecipeError(f"timer.{key} must be >= 0")


def featurize(
    dataset,
    renderer,
    timer,
    max_length: int | None,
    num_proc: int | None = None,
    desc: str = "Rendering TIMER sequences",
):
    """Prepared dialogs -> TIMER training rows (`input_ids`, `labels`, `token_types`, `id`), with batched
    tokenization; a dialog gives one row, two with `timer.emit_instant_counterpart`. Rows longer than `max_length`
    lose their oldest turns (`TimerRenderer.batch_features`), so TRL's own truncation never cuts a target turn."""
    from timealign.data.timelychat import TimerDialog, timer_sequences

    def render(batch):
        items, ids = [], []
        for i in range(len(batch["id"])):
            dialog = TimerDialog.from_row({k: batch[k][i] for k in batch})
            for n, item in enumerate(timer_sequences(dialog, timer.loss_turns, timer.emit_instant_counterpart)):
                items.append(item)
                ids.append(dialog.id if n == 0 else f"{dialog.id}#instant")
        rows = renderer.batch_features(items, max_length=max_length)
        out = {key: [r[key] for r in rows] for key in ("input_ids", "labels", "token_types")}
        out["id"] = ids
        return out

    return dataset.map(
        render, batched=True, batch_size=256, remove_columns=dataset.column_names, num_proc=num_proc, desc=desc
    )


def build_model_and_tokenizer(recipe, master_fp32: bool = False):
    """The model and tokenizer with the TIMER tokens (when `timer.special_tokens`); returns (model, tok, ids).
    `master_fp32`: see `timealign.train.models.load_model`."""
    from timealign.train.models import load_model, load_tokenizer, resolve_base_model
    from timealign.train.timer import add_timer_tokens_to_model

    model_path = resolve_base_model(recipe.model.name_or_path)
    tokenizer = load_tokenizer(model_path, recipe.model)
    if not tokenizer.is_fast:
        raise RecipeError(f"{model_path}: TIMER token masks need a fast tokenizer (character offsets)")
    model = load_model(model_path, recipe.model, master_fp32)
    token_ids = add_timer_tokens_to_model(model, tokenizer) if recipe.timer.special_tokens else None
    return model, tokenizer, token_ids


def build_trainer(recipe, claim: bool = True):
    """`run`'s steps up to a ready TimerSFTTrainer (for tests and benchmarks); `claim`: make output_dir this run's
    first (`timealign.train.preflight`)."""
    from trl import SFTConfig

    from timealign.train.preflight import preflight

    check_timer_section(recipe.timer)
    ready = preflight(recipe, SFTConfig, claim)
    with ready.lock:  # held while building only: the caller trains in this process
        return make_trainer(recipe, ready, prepare_data(recipe))


def prepare_data(recipe):
    """The prepared dialogs (prepared once per job by rank 0, or reused when the folder holds this recipe's data
    fingerprint: `timealign.data.prepared`), as a DatasetDict with the recipe's train split."""
    from timealign.data.prepared import ensure_prepared
    from timealign.data.timer_prep import load_timer_prepared

    data = load_timer_prepared(ensure_prepared(recipe))
    if recipe.data.train_split not in data:
        raise RecipeError(f"prepared data has no {recipe.data.train_split!r} split (has: {', '.join(data)})")
    return data


def make_trainer(recipe, ready, data):
    """Add the TIMER tokens, render the prepared dialogs and build the TimerSFTTrainer."""
    from timealign.render.timer import TimerRenderer
    from timealign.train.batch import log_plan
    from timealign.train.launch_check import check_trainer
    from timealign.train.timer import TimerSFTTrainer, timer_lora_config

    args = ready.args
    model, tokenizer, token_ids = build_model_and_tokenizer(
        recipe, master_fp32=(args.bf16 or args.fp16) and not recipe.lora.enabled
    )
    renderer = TimerRenderer.for_timer(tokenizer, recipe.timer)
    if recipe.timer.packing:
        # TimerSFTTrainer packs the rendered rows with their time-token mask (timealign.train.packing)
        args.packing = True
        if args.max_length is None:
            raise RecipeError("timer.packing=true needs training.max_length (the length of a packed row)")

    train_ds = featurize(
        data[recipe.data.train_split],
        renderer,
        recipe.timer,
        args.max_length,
        args.dataset_num_proc,
        "Rendering train dialogs",
    )
    eval_ds = None
    if recipe.data.eval_split in data and args.eval_strategy != "no":
        eval_ds = featurize(
            data[recipe.data.eval_split],
            renderer,
            recipe.timer,
            args.max_length,
            args.dataset_num_proc,
            "Rendering eval dialogs",
        )
    peft_config = None
    if recipe.lora.enabled:
        peft_config = timer_lora_config(recipe.lora, model, token_ids, recipe.timer.lora_new_tokens)
    trainer = TimerSFTTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=peft_config,
        lambda_time=recipe.timer.lambda_time,
        loss_normalization=recipe.timer.loss_normalization,
    )
    check_trainer(trainer, recipe, ready.launched)  # the Accelerator's real state, before the first step
    if trainer.is_world_process_zero():  # the arithmetic, and what the schedule cannot do with it
        log_plan(ready.batch, trainer.args, len(trainer.train_dataset))
    if recipe.live_eval.every_steps > 0:  # held-out metrics while training (timealign.train.live_eval)
        from timealign.train.live_eval import LiveEvalCallback

        trainer.add_callback(LiveEvalCallback(trainer, recipe, data))
    return trainer


def main(argv: list[str] | None = None) -> int:
    """`train/sft.py`: exit 0 after saving, 2 on a recipe error or data that is not there, 1 on bad input data
    (75 when preempted)."""
    from timealign.data.records import MissingData
    from timealign.data.timelychat import DialogFormatError

    def train(invocation) -> None:
        logger.info("saved model to %s", run(invocation.recipe))

    # Data that is not there is MissingData (exit 2, no skip hint); any other FileNotFoundError is internal
    # (e.g. in TRL's reference precompute) and keeps its traceback.
    return run_command(
        COMMAND, argv, train, errors={NoSpaceLeft: 2, DialogFormatError: 1, MissingData: 2}, hint=DATA_HINT
    )


if __name__ == "__main__":  # python -m timealign.train.sft
    raise SystemExit(main())
