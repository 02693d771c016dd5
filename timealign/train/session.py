"""The training session: resume, preemption, W&B and the run record around one `trainer.train()`.

    session = TrainingSession.start(trainer, recipe, data_dir=prepared_dir)   # resume, signals, W&B, provenance
    trainer.train(resume_from_checkpoint=session.resume_from)
    session.finish()   # raises TrainingPreempted (a SystemExit with code EXIT_REQUEUE) after a preemption checkpoint

`start` resolves the checkpoint to resume from (`timealign.train.resume`), installs the preemption handling
(`timealign.train.preemption`) and the checkpoint recipe snapshot, and opens the W&B run; `finish` writes
`run_info.json` (and `preempted.json` plus the requeue marker after a preemption stop) and closes W&B.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from timealign.config.tracking import RUN_INFO_FILE
from timealign.config.written import WrittenFiles
from timealign.train.preemption import (
    EXIT_REQUEUE,
    PREEMPTED_FILE,
    REQUEUE_SUFFIX,
    PreemptionCallback,
    SaveTimingCallback,
    TrainingPreempted,
    stop_outcome,
)
from timealign.train.resume import (
    AUTO_WORDS,
    RecipeSnapshotCallback,
    check_checkpoint_fits,
    check_resume_compatible,
    resolve_resume,
)

logger = logging.getLogger(__name__)


class TrainingSession:
    """Resume + preemption + W&B + run_info.json around one `trainer.train()` (DPO and SFT entry points)."""

    def __init__(
        self,
        trainer,
        recipe,
        resume_from: str | None,
        callback: PreemptionCallback,
        provenance: dict,
        wandb_run_id: str | None,
        files=None,
        data_dir=None,
        wandb_url: str | None = None,
    ):
        self.trainer, self.recipe, self.files = trainer, recipe, files
        self.resume_from, self.callback = resume_from, callback
        self.provenance, self.wandb_run_id = provenance, wandb_run_id
        self.data_dir, self.wandb_url = data_dir, wandb_url  # what the model card describes

    @classmethod
    def start(cls, trainer, recipe, data_dir=None) -> TrainingSession:
        from timealign.train.hub import HubUploadMixin
        from timealign.train.model_card import live_wandb_url
        from timealign.train.tracking import run_provenance, setup_wandb

        value = recipe.training.get("resume_from_checkpoint")
        resume_from = resolve_resume(value, trainer.args.output_dir)
        if resume_from is not None:
            explicit = str(value).strip().lower() not in AUTO_WORDS
            if not explicit:
                check_resume_compatible(recipe, resume_from)
            check_checkpoint_fits(recipe, trainer.model, resume_from, explicit)
            logger.info("resuming from %s", resume_from)
        callback = PreemptionCallback()
        callback.install()  # now, not at on_train_begin: a warning during model/data loading must not kill us
        trainer.add_callback(callback)
        files = WrittenFiles(trainer.args.output_dir) if trainer.is_world_process_zero() else None
        trainer.add_callback(RecipeSnapshotCallback(recipe, files))
        trainer.add_callback(SaveTimingCallback(recipe.launch.signal_seconds if recipe.launch.requeue else None))
        provenance = run_provenance(recipe, data_dir) if trainer.is_world_process_zero() else {}
        run_id = setup_wandb(trainer, recipe, provenance=provenance, resume_from=resume_from)
        wandb_url = live_wandb_url()  # the run is closed by finish(), before the card is written
        if isinstance(trainer, HubUploadMixin):  # its checkpoint cards and hub pushes describe this run
            trainer.attach_model_card(recipe, data_dir, wandb_url)
        return cls(trainer, recipe, resume_from, callback, provenance, run_id, files, data_dir, wandb_url)

    def record_files(self) -> None:
        """Add what this run wrote since the last look to its record (rank 0; `timealign.config.written`)."""
        if self.files is not None:
            self.files.record()

    @property
    def preempted(self) -> bool:
        state = self.trainer.state
        return self.callback.stopped_at is not None and state.global_step < state.max_steps

    def run_info(self) -> dict:
        trainer, state = self.trainer, self.trainer.state
        accelerator = trainer.accelerator
        return {
            "world_size": accelerator.num_processes,
            # the batch this launch trained with (batch.global_size solves these for the world size)
            "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
            "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
            "distributed_type": str(accelerator.distributed_type),
            "mixed_precision": str(accelerator.mixed_precision),
            "model_wrapper": type(trainer.model_wrapped).__name__,
            "zero_stage": (
                trainer.model_wrapped.zero_optimization_stage()
                if hasattr(trainer.model_wrapped, "zero_optimization_stage")
                else None
            ),
            "global_step": state.global_step,
            "max_steps": state.max_steps,
            "resumed_from": self.resume_from,
            "preempted": self.preempted,
            "stop_reason": self.callback.reason,
            "wandb_run_id": self.wandb_run_id,
            **self.provenance,
        }

    def finish(self) -> None:
        """After `trainer.train()`: record the run; after a preemption stop, raise TrainingPreempted."""
        trainer = self.trainer
        trainer.accelerator.wait_for_everyone()  # every rank has finished writing its part of the checkpoint
        self.callback.uninstall()
        out = Path(trainer.args.output_dir)
        checkpoint = str(out / f"checkpoint-{trainer.state.global_step}")
        if trainer.is_world_process_zero():
            from timealign.train.tracking import finish_wandb

            info = self.run_info()
            out.mkdir(parents=True, exist_ok=True)
            (out / RUN_INFO_FILE).write_text(json.dumps(info, indent=1))
            marker = out / PREEMPTED_FILE
            if self.preempted:
                record = {"checkpoint": checkpoint, "step": trainer.state.global_step, "reason": self.callback.reason}
                marker.write_text(json.dumps(record, indent=1))
                if self.callback.stop_file:
                    Path(self.callback.stop_file + REQUEUE_SUFFIX).write_text(json.dumps(record) + "\n")
                finish_wandb({"preempted_at_step": trainer.state.global_step})
            else:
                marker.unlink(missing_ok=True)
                finish_wandb()
            self.record_files()
        if self.preempted:
            error = TrainingPreempted(checkpoint, trainer.state.global_step, self.callback.reason or "?")
            if trainer.is_world_process_zero():  # one scontrol, one line
                logger.warning("%s; %s (exit %d)", error, stop_outcome(self.callback.reason)[1], EXIT_REQUEUE)
            raise error
        if getattr(trainer, "is_fsdp_enabled", False):  # the final model as one full state dict, not shards
            trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")


def train_and_save(recipe, ready, prepare_data, make_trainer) -> Path:
    """The part of `timealign dpo` and `timealign sft` after the checks (`ready`: their preflight): data prep, the
    trainer, training with resume and preemption, the saved model and its card, all while output_dir's lock is held
    (`timealign.train.run_lock`). `prepare_data(recipe)` and `make_trainer(recipe, ready, data)` are the task's."""
    from timealign.config.disk import writing
    from timealign.data.prepared import prepared_dir_for
    from timealign.train.final_model import save_trained_model, write_run_card

    with ready.lock:  # output_dir is this run's alone until it returns or raises
        data = prepare_data(recipe)
        trainer = make_trainer(recipe, ready, data)
        with writing(trainer.args.output_dir, "checkpoints and the model"):  # a full disk: one line naming it
            session = TrainingSession.start(trainer, recipe, data_dir=prepared_dir_for(recipe))  # resume, W&B, ...
            trainer.train(resume_from_checkpoint=session.resume_from)
            session.finish()  # after a preemption checkpoint: raises TrainingPreempted
            out = save_trained_model(trainer, recipe)  # model, tokenizer, recipe, loss log
            write_run_card(trainer, recipe, session)  # README.md, last
    return out
