"""The render settings a trained checkpoint carries: the resolved recipe saved beside its weights.

Training writes the recipe it ran with to `<output_dir>/timealign_recipe.yaml` (`CHECKPOINT_RECIPE`; written by
`timealign.train.final_model`, and into every checkpoint by `timealign.train.resume`). Evaluation reads the TIMER
settings back here and nowhere else, so the TimelyChat suite and two-step TIMER inference prompt a checkpoint in the
format it was trained on, and a checkpoint that was not TIMER-trained is refused with one clear message.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from timealign.config.schema import TimerSection
from timealign.render.timer import TIMER_TOKENS, TimerRenderer

logger = logging.getLogger(__name__)

CHECKPOINT_RECIPE = "timealign_recipe.yaml"

NOT_TIMER = (
    "the TimelyChat suite evaluates a TIMER-trained checkpoint (the two-step <SPK> s <TIME> tau <UTT> u format), but "
    "{what}. Train one first with `python train/sft.py recipe=tiny-timer` (or recipe=timer3b) and evaluate that "
    "output_dir; a checkpoint trained with timer.special_tokens=false (the no-special-tokens ablation) is read from "
    f"its {CHECKPOINT_RECIPE}, or say so with timelychat.special_tokens=false."
)


class TimerCheckpointError(ValueError):
    """The checkpoint cannot be run in the TIMER format; the message says how to get one that can."""


def missing_timer_markers(tokenizer: Any) -> list[str]:
    """The TIMER markers (`<SPK>`, `<TIME>`, `<UTT>`) the tokenizer's vocabulary lacks."""
    vocab = tokenizer.get_vocab()
    return [t for t in TIMER_TOKENS if t not in vocab]


def trained_timer_section(checkpoint: str | Path | None, tokenizer: Any = None) -> TimerSection | None:
    """The `timer` section a TIMER checkpoint was trained with, read from its saved recipe.

    None when there is no checkpoint folder or it holds no saved recipe (a model from elsewhere: callers use the
    defaults). A saved recipe of another task raises TimerCheckpointError: a DPO checkpoint's `timer` section is the
    unused default and says nothing about how it was trained. Given the tokenizer, the error also names the TIMER
    markers it lacks.
    """
    if checkpoint is None:
        return None
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    if not path.is_file():
        return None
    import yaml

    saved = yaml.safe_load(path.read_text()) or {}
    task = saved.get("task")
    if task != "sft":
        what = f"{path} is the recipe of a task: {task} run, not of TIMER SFT (task: sft)"
        missing = missing_timer_markers(tokenizer) if tokenizer is not None else []
        if missing:
            what += f", and its tokenizer lacks the TIMER markers {missing}"
        raise TimerCheckpointError(NOT_TIMER.format(what=what))
    known = {f.name for f in dataclasses.fields(TimerSection)}
    return TimerSection(**{k: v for k, v in (saved.get("timer") or {}).items() if k in known})


def timer_renderer_for_checkpoint(
    tokenizer: Any,
    checkpoint: str | Path | None = None,
    *,
    special_tokens: bool | None = None,
    order: str | None = None,
) -> TimerRenderer:
    """The `TimerRenderer` a checkpoint was trained with: what the TimelyChat suite and TIMER inference prompt with.

    Settings come from the checkpoint's saved recipe (`trained_timer_section`); `special_tokens` / `order` override
    them (the suite's options). Without a saved recipe: the recipe defaults (special tokens, time first). Special
    tokens with a tokenizer that lacks the TIMER markers (a checkpoint that was not TIMER-trained) raise
    `TimerCheckpointError`; the plain format needs the recipe's `timer.special_tokens: false` or the override.
    """
    if tokenizer is None:
        raise TimerCheckpointError(NOT_TIMER.format(what="the backend has no tokenizer to render TIMER prompts with"))
    trained = trained_timer_section(checkpoint, tokenizer)
    overrides = {
        key: value for key, value in (("special_tokens", special_tokens), ("order", order)) if value is not None
    }
    settings = dataclasses.replace(trained or TimerSection(), **overrides)
    missing = missing_timer_markers(tokenizer)
    if settings.special_tokens and missing:
        raise TimerCheckpointError(
            NOT_TIMER.format(
                what=f"its tokenizer lacks the TIMER markers {missing}" + (f" ({checkpoint})" if checkpoint else "")
            )
        )
    if not settings.special_tokens and trained is None:
        logger.warning(
            "TIMER: rendering without special tokens for a checkpoint with no TIMER recipe; the scores only "
            "mean something for a model trained with timer.special_tokens=false"
        )
    return TimerRenderer.for_timer(tokenizer, settings)


def trained_prompt_protocol(checkpoint: str | Path | None) -> str | None:
    """The `data.protocol` a DPO checkpoint was trained with (None: no saved recipe, or not a DPO run)."""
    if checkpoint is None:
        return None
    path = Path(checkpoint) / CHECKPOINT_RECIPE
    if not path.is_file():
        return None
    import yaml

    saved = yaml.safe_load(path.read_text()) or {}
    if saved.get("task") != "dpo":
        return None
    return (saved.get("data") or {}).get("protocol", "timealign")  # recipes saved before the field: timealign
