"""Offset-DPO training entry point (`train/dpo.py` is the thin script that calls `main`).

    accelerate launch --config_file recipes/accelerate/fsdp_offload.yaml --num_processes N train/dpo.py recipe=llama8b
    python train/dpo.py recipe=tiny

Steps (`run`, top to bottom): checks before any work (`timealign.train.preflight`) -> data prep (once per job, by
rank 0, unless the prepared folder holds this recipe's data fingerprint; `timealign.data.prepared`) -> render every
pair with the shared PromptRenderer -> OffsetDPOTrainer (TRL DPOTrainer subclass) -> train, resuming and stopping
for preemption (`timealign.train.session`) -> save the model, tokenizer, resolved recipe and loss log, then the model
card (`timealign.train.final_model`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import DATA_HINT, Command, run_command
from timealign.config.disk import NoSpaceLeft

logger = logging.getLogger("timealign.train.dpo")

COMMAND = Command(
    prog="[accelerate launch] train/dpo.py",
    summary="Offset-DPO (ODPO-style) on TicToc preference pairs:",
    examples="""  loss = -log sigmoid(beta * (logratio_chosen - logratio_rejected) - delta),
         delta = |S - 1.5| per pair.

Override any recipe field with dotted keys, for example:
  training.learning_rate=1e-6 training.beta=0.05 data.timestamps=false lora.enabled=true
  data.source=v1 data.path=/data/tictoc-v1 output_dir=outputs/my-run training.report_to=wandb""",
    task="dpo",
    recipe="required",
    reads_inputs=True,
)


def run(recipe) -> Path:
    """Train and save, top to bottom: checks -> prepared data -> trainer -> train -> save -> model card.

    Resumes per training.resume_from_checkpoint (auto|path|false). On SIGUSR1/SIGTERM (or the SLURM launcher's stop
    file) it checkpoints, stops and raises TrainingPreempted (exit code 75: requeue me). A run already finished in
    output_dir returns that folder."""
    from trl import DPOConfig

    from timealign.train.lengths import check_mode
    from timealign.train.output_dir import AlreadyTrained
    from timealign.train.preflight import preflight
    from timealign.train.session import train_and_save

    check_mode(recipe.data.overlength)
    try:
        ready = preflight(recipe, DPOConfig)  # launch, batch, TrainingArguments, release, model, output_dir claim
    except AlreadyTrained as done:
        logger.warning("%s", done)
        return done.output_dir
    return train_and_save(recipe, ready, prepare_data, make_trainer)


def build_trainer(recipe, claim: bool = True):
    """`run`'s steps up to a ready OffsetDPOTrainer (for tests and benchmarks); `claim`: make output_dir this
    run's first (`timealign.train.preflight`)."""
    from trl import DPOConfig

    from timealign.train.lengths import check_mode
    from timealign.train.preflight import preflight

    check_mode(recipe.data.overlength)
    ready = preflight(recipe, DPOConfig, claim)
    with ready.lock:  # held while building only: the caller trains in this process
        return make_trainer(recipe, ready, prepare_data(recipe))


def prepare_data(recipe):
    """The prepared pairs (prepared once per job by rank 0, or reused when the folder holds this recipe's data
    fingerprint: `timealign.data.prepared`), as a DatasetDict with the recipe's train split."""
    from timealign.data.pairs import load_prepared
    from timealign.data.prepared import ensure_prepared

    data = load_prepared(ensure_prepared(recipe))
    if recipe.data.train_split not in data:
        raise RecipeError(f"prepared data has no {recipe.data.train_split!r} split (has: {', '.join(data)})")
    return data


def make_trainer(recipe, ready, data):
    """Render the prepared pairs (fitted to training.max_length) and build the OffsetDPOTrainer on the base model."""
    from timealign.render.chat import PromptRenderer
    from timealign.train.batch import log_plan
    from timealign.train.fsdp_loading import efficient_loading
    from timealign.train.launch_check import check_trainer
    from timealign.train.lengths import LengthReportCallback, PairFitter, check_against_trainer, write_reports
    from timealign.train.models import load_model, load_tokenizer, lora_config, resolve_base_model
    from timealign.train.odpo import OffsetDPOTrainer

    args = ready.args
    model_path = resolve_base_model(recipe.model.name_or_path)
    tokenizer = load_tokenizer(model_path, recipe.model)
    renderer = PromptRenderer.for_data(tokenizer, recipe.data, reasoning=recipe.eval.reasoning)
    scale = recipe.data.offset_scale
    fits = {}  # split -> PairFitter: pairs within args.max_length per data.overlength, counted

    def fitter(split: str) -> PairFitter:
        fits[split] = PairFitter(
            renderer, tokenizer, args.max_length, recipe.data.overlength, split, args.truncation_mode
        )
        return fits[split]

    train_split, eval_split = recipe.data.train_split, recipe.data.eval_split
    train_ds = render_split(data[train_split], renderer, "Rendering train pairs", scale, fitter(train_split))
    eval_ds = None
    if eval_split in data and args.eval_strategy != "no":
        eval_ds = render_split(data[eval_split], renderer, "Rendering eval pairs", scale, fitter(eval_split))

    model = load_model(model_path, recipe.model, master_fp32=(args.bf16 or args.fp16) and not recipe.lora.enabled)
    # Under FSDP efficient loading the reference is built here, read by rank 0 only, and broadcast into its shards by
    # the trainer (TRL's own would hold zeros on ranks > 0); otherwise TRL builds it (none with LoRA).
    ref_model = load_model(model_path, recipe.model) if efficient_loading() and not recipe.lora.enabled else None
    trainer = OffsetDPOTrainer(
        model=model,
        ref_model=ref_model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=lora_config(recipe.lora) if recipe.lora.enabled else None,
        shared_prompt=recipe.dpo.shared_prompt,  # one prompt forward per pair (timealign.train.shared_prompt)
        padding_free=recipe.dpo.padding_free,
        prompt_cache=recipe.dpo.prompt_cache,  # the shared prompt as a key/value cache (timealign.train.prompt_cache)
        margin_mode=recipe.dpo.margin_mode,
    )
    reports = {split: fit.report for split, fit in fits.items()}
    tokenized = {train_split: trainer.train_dataset, eval_split: trainer.eval_dataset}
    for split, report in reports.items():  # TRL's own tokenization agrees with the counts
        check_against_trainer(report, tokenized[split], args.max_length, args.truncation_mode)
    if trainer.is_world_process_zero():
        write_reports(reports, args.output_dir)
    trainer.add_callback(LengthReportCallback(reports))
    check_trainer(trainer, recipe, ready.launched)  # the Accelerator's real state, before the first step
    if trainer.is_world_process_zero():  # the arithmetic, and what the schedule cannot do with it
        log_plan(ready.batch, trainer.args, len(trainer.train_dataset))
    if recipe.live_eval.every_steps > 0:  # held-out metrics while training (timealign.train.live_eval)
        from timealign.train.live_eval import LiveEvalCallback

        trainer.add_callback(LiveEvalCallback(trainer, recipe, data))
    return trainer


def render_split(dataset, renderer, desc: str, offset_scale: float = 1.0, fit=None):
    """Conversational pairs -> TRL's standard layout strings, through the shared renderer.

    `offset_scale` multiplies every offset (ODPO's alpha): 0 trains plain DPO on the same pairs. `fit`: a
    `timealign.train.lengths.PairFitter` that keeps every pair within training.max_length per data.overlength
    (shortening prompts by whole oldest turns, dropping or refusing pairs) and counts what it did (`fit.report`).
    """
    if offset_scale < 0:
        raise RecipeError(f"data.offset_scale must be >= 0, got {offset_scale}")

    from timealign.render.paper import UnrenderableSample

    def render(row):
        try:
            if fit is None:
                out = renderer.pair(row["prompt"], row["chosen"][0], row["rejected"][0], row["tools"])
            else:
                out = fit.pair(row)
            out["unrenderable"] = ""
        except UnrenderableSample as err:  # paper protocol only: the authors' code skipped these samples too
            out = {
                "prompt": "",
                "chosen": "",
                "rejected": "",
                "unrenderable": str(err),
                **(fit.columns if fit else {}),
            }
        out["margin"] = row["margin"] * offset_scale
        return out

    rendered = dataset.map(render, remove_columns=["prompt", "chosen", "rejected", "tools"], desc=desc)
    refused = [(i, reason) for i, reason in enumerate(rendered["unrenderable"]) if reason]
    if refused:
        if len(refused) == len(rendered):
            raise RecipeError(
                f"{desc}: no pair can be rendered in the {renderer.protocol} protocol; first: {refused[0][1]}"
            )
        logger.warning(
            "%s: %d of %d pairs cannot be rendered in the %s protocol and are left out (the authors' code "
            "skipped them too), e.g. %s: %s",
            desc,
            len(refused),
            len(rendered),
            renderer.protocol,
            rendered[refused[0][0]]["id"],
            refused[0][1],
        )
        rendered = rendered.filter(lambda reason: not reason, input_columns=["unrenderable"])
    rendered = rendered.remove_columns(["unrenderable"])
    return rendered if fit is None else fit.finish(rendered)


def main(argv: list[str] | None = None) -> int:
    """`train/dpo.py`: exit 0 after saving, 2 on a recipe error or data that is not there, 1 on bad input data
    (75 when preempted)."""
    from timealign.data.records import MissingData
    from timealign.data.tictoc_layout import TicTocFormatError

    def train(invocation) -> None:
        logger.info("saved model to %s", run(invocation.recipe))

    # Data that is not there is MissingData (exit 2, no skip hint); any other FileNotFoundError is internal
    # (e.g. in TRL's reference precompute) and keeps its traceback.
    return run_command(
        COMMAND, argv, train, errors={NoSpaceLeft: 2, TicTocFormatError: 1, MissingData: 2}, hint=DATA_HINT
    )


if __name__ == "__main__":  # python -m timealign.train.dpo
    raise SystemExit(main())
