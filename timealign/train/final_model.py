"""The trained model folder: after `TrainingSession.finish()`, the model (or LoRA adapter), tokenizer, resolved
recipe and loss log go into output_dir (`save_trained_model`), then the model card README.md (`write_run_card`,
`timealign.train.model_card`).

A README.md timealign did not write is kept as it was (PEFT's save_pretrained appends its lines to an existing one)
and no card is written over it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml

from timealign.config.secrets import redact
from timealign.config.tracking import TRAIN_LOG
from timealign.config.written import card_may_replace, foreign_card_message
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train.card_facts import CARD_FILE
from timealign.train.model_card import write_model_card

logger = logging.getLogger(__name__)


def save_trained_model(trainer, recipe) -> Path:
    """Save the model, tokenizer, resolved recipe and the trainer's log_history into output_dir; returns it."""
    out = Path(recipe.resolved_output_dir())
    card = out / CARD_FILE
    users_card = None if card_may_replace(card) else card.read_bytes()  # a README.md timealign did not write
    trainer.save_model(str(out))
    if trainer.accelerator.is_main_process:
        if users_card is None:
            if not card_may_replace(card):
                card.unlink()  # PEFT's card, written by save_model just now (this folder had none of the user's)
        elif card.read_bytes() != users_card:  # PEFT's save_pretrained adds its lines to an existing README.md
            card.write_bytes(users_card)
        trainer.processing_class.save_pretrained(str(out))
        (out / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False))
        (out / TRAIN_LOG).write_text(json.dumps(trainer.state.log_history, indent=1))
    return out


def write_run_card(trainer, recipe, session) -> None:
    """Write the model card (README.md) of the saved model, last, and record what the run wrote (main process);
    every rank returns once it is done."""
    out = Path(recipe.resolved_output_dir())
    if trainer.accelerator.is_main_process:
        card = out / CARD_FILE
        if card_may_replace(card):
            write_model_card(out, recipe, data_dir=session.data_dir, wandb_url=session.wandb_url)
        else:
            logger.warning("no model card written: %s", foreign_card_message(card))
        session.record_files()
    trainer.accelerator.wait_for_everyone()
