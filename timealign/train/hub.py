"""What `training.push_to_hub=true` uploads: the model files, the tokenizer and the model card, nothing else.

transformers 5.19's `Trainer.push_to_hub` (the end-of-training push, from `save_model`) and `_push_from_checkpoint`
(a push per checkpoint save, `hub_strategy`) upload the whole output_dir except `_*` and `checkpoint-*`. A timealign
output_dir also holds the prepared data (`data/`), `run_info.json` (git commit, SLURM node list),
`timealign_run.json`, `wandb_run.json`, `lengths.json`, the training log and evaluation folders. `HubUploadMixin`
(a base class of `OffsetDPOTrainer` and `TimerSFTTrainer`) keeps transformers' two methods as they are except for
what they upload: `allow_patterns` from `hub_upload_filter` (huggingface_hub applies them with
`filter_repo_objects` to paths relative to output_dir), and the card is timealign's (`timealign.train.model_card`)
instead of TRL's. The `hub_strategy=checkpoint|all_checkpoints` push of a whole `checkpoint-N` folder (it exists to
resume from) is unchanged.

Re-check on a transformers upgrade: the two methods below follow 5.19's line by line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch

from timealign.config.written import card_may_replace, foreign_card_message
from timealign.train.card_facts import CARD_FILE
from timealign.train.model_card import write_model_card

logger = logging.getLogger("timealign.train.hub")

# Model weights and config: a full checkpoint (one file or shards), a LoRA adapter, remote code of a
# trust_remote_code model. Patterns match paths relative to output_dir, so none may start with `*` (fnmatch's `*`
# also matches `/`: `*.safetensors` would take checkpoint-*/ and eval files too).
MODEL_PATTERNS = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model-*-of-*.bin",
    "pytorch_model.bin.index.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "configuration_*.py",
    "modeling_*.py",
)
# What `PreTrainedTokenizerBase.save_pretrained` writes besides the class's own vocabulary files.
TOKENIZER_PATTERNS = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*",
    "tokenization_*.py",
)
# Vocabulary files of the common tokenizer classes, for when the trainer has no tokenizer to ask.
VOCAB_FILES = ("vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


def upload_patterns(tokenizer=None) -> list[str]:
    """allow_patterns of a hub upload: model files, tokenizer files (its class's vocabulary files included), card."""
    vocab = list((getattr(tokenizer, "vocab_files_names", None) or {}).values()) if tokenizer is not None else []
    patterns = [*MODEL_PATTERNS, *TOKENIZER_PATTERNS, *(vocab or VOCAB_FILES), CARD_FILE]
    return list(dict.fromkeys(patterns))


class HubUploadMixin:
    """Trainer mixin: pushes model + tokenizer + timealign's card only; writes timealign's card where TRL writes its
    own (`create_model_card`, at every checkpoint save and before a push) once `attach_model_card` was called."""

    _card_context: dict | None = None

    def attach_model_card(self, recipe, data_dir=None, wandb_url: str | None = None) -> None:
        """The run the card describes (`timealign.train.session.TrainingSession.start` calls this before training)."""
        self._card_context = {"recipe": recipe, "data_dir": data_dir, "wandb_url": wandb_url}

    def create_model_card(self, *args, **kwargs) -> None:
        if self._card_context is None:  # a trainer used outside a TrainingSession: TRL's card
            return super().create_model_card(*args, **kwargs)
        if not self.is_world_process_zero():
            return None
        card = Path(self.args.output_dir) / CARD_FILE
        ours = self.__dict__.pop("_card_was_ours", None)  # push_to_hub: decided before save_model (PEFT's card)
        if not (card_may_replace(card) if ours is None else ours):
            logger.warning("no model card written: %s", foreign_card_message(card))
            return None
        if not card_may_replace(card):
            card.unlink()  # PEFT's save_pretrained rewrote timealign's card just now
        tags = kwargs.get("tags") or []
        write_model_card(
            self.args.output_dir, **self._card_context, extra_tags=[tags] if isinstance(tags, str) else list(tags)
        )
        return None

    def hub_upload_filter(self) -> dict:
        """The allow/ignore patterns of every upload of output_dir (transformers' own ignore patterns kept)."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        return {
            "allow_patterns": upload_patterns(self.processing_class),
            "ignore_patterns": ["_*", f"{PREFIX_CHECKPOINT_DIR}-*"],
        }

    # transformers 5.19 Trainer.push_to_hub, with hub_upload_filter's patterns.
    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        **kwargs,
    ):
        from transformers.utils.hub import hf_api

        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        token = token if token is not None else self.args.hub_token
        if self.hub_model_id is None:
            self.init_hf_repo(token=token)
        model_name = kwargs.pop("model_name", None)
        if model_name is None and self.args.should_save:
            model_name = (self.args.hub_model_id or Path(self.args.output_dir).name).split("/")[-1]
        self._card_was_ours = card_may_replace(Path(self.args.output_dir) / CARD_FILE)
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        tags = kwargs.pop("tags", None) or []
        tags = [tags] if isinstance(tags, str) else list(tags)
        tags += [t for t in (getattr(self.model, "model_tags", None) or []) if t not in tags]
        self.create_model_card(model_name=model_name, tags=tags or None, **kwargs)
        self._finish_current_push()
        return hf_api().upload_folder(
            repo_id=self.hub_model_id,
            folder_path=self.args.output_dir,
            commit_message=commit_message,
            token=token,
            run_as_future=not blocking,
            revision=revision if revision is not None else self.args.hub_revision,
            **self.hub_upload_filter(),
        )

    # transformers 5.19 Trainer._push_from_checkpoint, with hub_upload_filter's patterns for output_dir.
    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        from transformers.trainer import TRAINING_ARGS_NAME, PushInProgress
        from transformers.trainer_utils import HubStrategy, SaveStrategy
        from transformers.utils import (
            ADAPTER_CONFIG_NAME,
            ADAPTER_SAFE_WEIGHTS_NAME,
            ADAPTER_WEIGHTS_NAME,
            CONFIG_NAME,
            GENERATION_CONFIG_NAME,
            SAFE_WEIGHTS_INDEX_NAME,
            SAFE_WEIGHTS_NAME,
            WEIGHTS_INDEX_NAME,
            WEIGHTS_NAME,
        )
        from transformers.utils.hub import hf_api

        if not self.is_world_process_zero() or self.args.hub_strategy == HubStrategy.END:
            return
        if not self.args.hub_always_push and self.push_in_progress is not None and not self.push_in_progress.is_done():
            return
        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        output_dir = self.args.output_dir
        # The checkpoint's model files go to output_dir: that folder is what the repository shows.
        files = [
            CONFIG_NAME,
            GENERATION_CONFIG_NAME,
            WEIGHTS_NAME,
            SAFE_WEIGHTS_NAME,
            ADAPTER_CONFIG_NAME,
            ADAPTER_WEIGHTS_NAME,
            ADAPTER_SAFE_WEIGHTS_NAME,
        ]
        for index_file in (WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_INDEX_NAME):
            index_path = Path(checkpoint_folder, index_file)
            if index_path.is_file():
                files += [index_file, *sorted(set(json.loads(index_path.read_text())["weight_map"].values()))]
        for name in files:
            if os.path.isfile(os.path.join(checkpoint_folder, name)):
                shutil.copy(os.path.join(checkpoint_folder, name), os.path.join(output_dir, name))
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))  # kept local: not in the patterns
        if self.args.save_strategy == SaveStrategy.STEPS:
            commit_message = f"Training in progress, step {self.state.global_step}"
        else:
            commit_message = f"Training in progress, epoch {int(self.state.epoch)}"
        jobs = [
            hf_api().upload_folder(
                repo_id=self.hub_model_id,
                folder_path=output_dir,
                commit_message=commit_message,
                token=self.args.hub_token,
                run_as_future=True,
                revision=self.args.hub_revision,
                **self.hub_upload_filter(),
            )
        ]
        if self.args.hub_strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            path_in_repo = (
                "last-checkpoint" if self.args.hub_strategy == HubStrategy.CHECKPOINT else Path(checkpoint_folder).name
            )
            jobs.append(
                hf_api().upload_folder(
                    repo_id=self.hub_model_id,
                    folder_path=checkpoint_folder,
                    path_in_repo=path_in_repo,
                    commit_message=commit_message + ", checkpoint",
                    token=self.args.hub_token,
                    run_as_future=True,
                    revision=self.args.hub_revision,
                )
            )
        if self.push_in_progress is None or self.push_in_progress.is_done():
            self.push_in_progress = PushInProgress(jobs)
        else:
            self.push_in_progress.jobs.extend(jobs)
