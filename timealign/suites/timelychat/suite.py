"""The TimelyChat suite (`suites=timelychat`): turn-level evaluation (`timealign.suites.timelychat.turn_level`:
response timing and time-conditioned responses, Sec. 4.2) and, with `timelychat.level=dialog|both`, dialog-level
evaluation with a simulated user and an LLM judge (`timealign.suites.timelychat.dialog`, Sec. 6.3), on the dialogs
`timealign.suites.timelychat.eval_data` picks.

    python eval/run.py recipe=tiny-timer checkpoint=outputs/tiny-timer suites=timelychat \
        [timelychat.data=eval.jsonl] [timelychat.n=40] [timelychat.seed=12345] [timelychat.judge_url=http://...]
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from timealign.suites.registry import EvalContext, Suite
from timealign.suites.timelychat.eval_data import (
    SYNTHETIC,
    load_eval_dialogs_with_identity,
    overlap_notes,
    recipe_eval_dialogs,
)
from timealign.suites.timelychat.judge import chat_model
from timealign.suites.timelychat.options import TimelyChatOptions
from timealign.suites.timelychat.report import markdown_summary
from timealign.suites.timelychat.turn_level import evaluate_timelychat, timer_renderer_for_backend

logger = logging.getLogger(__name__)


def _judge_from_options(options: TimelyChatOptions, allow_insecure_key: bool = False) -> Any:
    """The OpenAI-compatible judge `judge_url=` / `judge_model=` name, or None when neither is given."""
    if not options.judge_url and not options.judge_model:
        return None
    if not (options.judge_url and options.judge_model):
        raise ValueError(
            "an LLM judge needs both timelychat.judge_url= (an OpenAI-compatible /v1 URL) and timelychat.judge_model="
        )
    return chat_model(options.judge_url, options.judge_model, options.judge_api_key_env, allow_insecure_key)


def run_timelychat_suite(backend, ctx: EvalContext) -> dict:
    from timealign.suites.registry import suite_cache_dir

    options: TimelyChatOptions = ctx.options or TimelyChatOptions()
    renderer = timer_renderer_for_backend(
        backend,
        checkpoint=options.checkpoint or ctx.checkpoint,
        special_tokens=options.special_tokens,
        order=options.order,
    )
    overlap: list[str] = []
    if options.data or ctx.recipe.task != "sft":  # explicit data, or a DPO recipe: no dialogs of its own
        dialogs, identity = load_eval_dialogs_with_identity(options.data, options.n, options.seed)
        if options.data not in (None, SYNTHETIC) and ctx.recipe.task == "sft":  # vs the recipe's training dialogs
            from timealign.data.prepared import ensure_prepared
            from timealign.data.timer_prep import load_timer_prepared

            trained = load_timer_prepared(ensure_prepared(ctx.recipe, kind="dialogs"))
            overlap = overlap_notes(dialogs, trained, ctx.recipe.data.train_split, None)
    else:  # an sft (TIMER) recipe: its own held-out split, as training and live evaluation read it
        dialogs, identity, overlap = recipe_eval_dialogs(ctx.recipe, options.n or ctx.recipe.eval.max_samples)
    try:
        cache_dir = suite_cache_dir(ctx)
    except AttributeError:  # a context without a recipe eval section
        cache_dir = Path(ctx.out_dir) / "generations"
    judge = getattr(ctx, "judge", None) or _judge_from_options(options, ctx.recipe.eval.allow_insecure_key)
    report: dict = {"overall": {}, "notes": [], "settings": {}}
    if options.level in ("turn", "both"):
        report = evaluate_timelychat(
            backend,
            dialogs,
            renderer=renderer,
            timing_turns=options.timing_turns,
            unparsed=options.unparsed,
            instant_max_minutes=options.instant_max_minutes,
            interval_reading=options.interval_reading,
            postprocess=options.postprocess,
            interval_max_new_tokens=options.interval_max_new_tokens,
            response_max_new_tokens=options.response_max_new_tokens,
            cache_dir=cache_dir,
            bertscore_model=options.bertscore_model,
            bertscore_num_layers=options.bertscore_num_layers,
            bertscore_batch_size=options.bertscore_batch_size,
            judge=judge,
            judge_max_samples=options.judge_max_samples,
        )
    if options.level in ("dialog", "both"):  # Sec. 6.3: timealign.suites.timelychat.dialog
        from timealign.suites.timelychat.dialog import evaluate_dialog_level, partner_from_options

        dialog = evaluate_dialog_level(
            backend,
            dialogs,
            renderer=renderer,
            partner=getattr(ctx, "partner", None) or partner_from_options(options, ctx.recipe.eval.allow_insecure_key),
            judge=judge,
            turns=options.dialog_turns,
            history=options.dialog_history,
            interval_reading=options.interval_reading,
            postprocess=options.postprocess,
            instant_max_minutes=options.instant_max_minutes,
            interval_max_new_tokens=options.interval_max_new_tokens,
            response_max_new_tokens=options.response_max_new_tokens,
            partner_temperature=options.partner_temperature,
            partner_structured=options.partner_structured,
            partner_max_new_tokens=options.partner_max_new_tokens,
            judge_max_new_tokens=options.dialog_judge_max_new_tokens,
            judge_structured=options.judge_structured,
            cache_dir=cache_dir,
        )
        report["dialog_level"] = dialog
        report["overall"].update(dialog["overall"])
        report["notes"] += [f"dialog-level: {note}" for note in dialog["notes"]]
    report["settings"]["level"] = options.level
    report["settings"]["data"] = identity["label"]
    report["data"] = identity
    report["notes"] = overlap + list(report.get("notes") or [])
    report["markdown"] = markdown_summary(report)
    return report


SUITE = Suite(
    "timelychat",
    "TimelyChat turn-level timing (F1, FPR, RMSLE) and response (BLEU-2, ROUGE-L) metrics; "
    "dialog-level (level=dialog|both): a simulated user and an LLM judge",
    run_timelychat_suite,
    options=TimelyChatOptions,
)
