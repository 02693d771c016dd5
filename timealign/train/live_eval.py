"""Evaluation while training: a fixed held-out slice scored every `live_eval.every_steps` optimizer steps.

    trainer.add_callback(LiveEvalCallback(trainer, recipe, data))   # data: the prepared DatasetDict

The slice is `live_eval.max_samples` rows of the prepared data's `data.eval_split`, a seeded sample stratified by label
(`timealign.data.sampling`), the rows `eval/run.py` scores with `eval.max_samples` set to the same number. Scoring is
the evaluator's own code on the model being trained,
in memory (`HFBackend.from_model`: no save, no reload):

- offset-DPO (task: dpo): `timealign.suites.tictoc.suite.evaluate_tictoc` with the renderer and detection protocol
  `run_tictoc_suite` builds for the recipe (default eval options: no system-prompt strategy, the recipe's
  timestamps, tool-call family from the chat template). Logged: `eval_live/nar`, `eval_live/attempt_rate_prefer_tool`,
  `eval_live/attempt_rate_prefer_no_tool`, `eval_live/tool_calls`, `eval_live/empty_outputs`, `eval_live/samples`.
- TIMER SFT (task: sft): `timealign.suites.timelychat.turn_level.evaluate_timelychat` with the `TimerRenderer` training
  uses and the suite's default options (every turn's interval, extract reading, unparsed = instant). Logged: the
  target-turn delay metrics `eval_live/delay_f1`, `eval_live/delay_precision`, `eval_live/delay_recall`,
  `eval_live/rmsle`; the all-turn ones `eval_live/delay_f1_all_turns`, `eval_live/delay_fpr_all_turns`,
  `eval_live/rmsle_all_turns`; `eval_live/timing_unparsed`, `eval_live/bleu2`, `eval_live/rouge_l`,
  `eval_live/dialogs`.
- Both: `eval_live/seconds` (wall time of the evaluation). A metric that is undefined on the slice (None, e.g. NAR
  without both labels) is left out of that log entry, with a warning in the log naming why (and a note in the step's
  report).

Logging goes through the trainer's own `Trainer.log` (transformers' base method: the TRL and TIMER overrides would
flush their running training metrics into this entry), so the values land in `trainer.state.log_history` at the
current global step and reach W&B, TensorBoard, ... through `training.report_to` (W&B names them `eval/live/nar`:
transformers turns an `eval_` prefix into `eval/`). The full report of each evaluation (per-sample outputs) is written
to `<output_dir>/live_eval/step-NNNNNN.json` by the main process.

The model is put in eval mode (no dropout) and back into its previous mode, generation runs under `no_grad`, and the
Python, NumPy and torch (CPU and CUDA) random states are saved and restored around it, so a run with live evaluation
trains exactly the weights of a run without (sampling with `eval.temperature > 0` seeds torch). Under PEFT the
adapter being trained is active. Generation is always transformers' `generate` on the training process's model:
`eval.backend`, `eval.cache` and `eval.max_samples` do not apply; `eval.batch_size`, `eval.max_new_tokens` (TicToc),
the sampling settings and `eval.reasoning` do.

Several processes: under DDP (and ZeRO-1/2) the main process evaluates and the others wait for its metrics (a
broadcast, so every rank logs the same entry; an evaluation must end within `training.ddp_timeout`, 1800 s by
default, or the waiting ranks time out). Under DeepSpeed ZeRO-3 the parameters are sharded and every forward needs
every rank, so all ranks generate the same slice in step (`synced_gpus`, which transformers turns on under ZeRO-3) and
the main process's metrics are logged. FSDP is refused (its sharded generation is not supported here): score saved
checkpoints with `eval/run.py` instead.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback

from timealign.config import RecipeError

logger = logging.getLogger("timealign.train.live_eval")

PREFIX = "eval_live/"
REPORT_DIR = "live_eval"
# Report key of the evaluator -> logged name (after PREFIX).
TICTOC_METRICS = {
    "nar": "nar",
    "attempt_rate_prefer_tool": "attempt_rate_prefer_tool",
    "attempt_rate_prefer_no_tool": "attempt_rate_prefer_no_tool",
    "tool_calls": "tool_calls",
    "empty_outputs": "empty_outputs",
    "n": "samples",
}
TIMELYCHAT_METRICS = {
    "target_f1": "delay_f1",
    "target_precision": "delay_precision",
    "target_recall": "delay_recall",
    "rmsle_target": "rmsle",
    "f1": "delay_f1_all_turns",
    "fpr": "delay_fpr_all_turns",
    "rmsle": "rmsle_all_turns",
    "timing_unparsed": "timing_unparsed",
    "bleu2": "bleu2",
    "rouge_l": "rouge_l",
    "dialogs": "dialogs",
}

# Why a TimelyChat metric is None on a slice (the classes: delayed = positive).
TIMELYCHAT_UNDEFINED = {
    "precision": "no case was predicted delayed (precision has no denominator)",
    "recall": "no case has a delayed gold interval",
    "fpr": "no case has an instant gold interval",
    "f1": "precision or recall is undefined",
    "rmsle": "no predicted interval could be read",
    "bleu2": "no reply was generated",
    "rouge_l": "no reply was generated",
}

# ------------------------------------------------------------------------------------------------ the scorers


class TicTocScorer:
    """NAR and attempt rates of offset-DPO's held-out pairs, as `run_tictoc_suite` scores them."""

    suite = "tictoc"

    def __init__(self, recipe, rows: list[dict]):
        self.recipe, self.rows = recipe, rows

    def score(self, backend) -> tuple[dict, dict]:
        from timealign.render.chat import PromptRenderer
        from timealign.suites.tictoc.suite import evaluate_tictoc

        recipe = self.recipe
        # run_tictoc_suite's renderer and detection for a context with the eval command's defaults
        renderer = PromptRenderer.for_data(
            backend.tokenizer,
            recipe.data,
            timestamps=recipe.data.timestamps,
            prompt_mode="none",
            family=None,
            reasoning=recipe.eval.reasoning,
        )
        report = evaluate_tictoc(
            backend,
            self.rows,
            renderer,
            family=None,
            max_new_tokens=recipe.eval.max_new_tokens,
            cache_dir=None,
            protocol=renderer.protocol,
        )
        return _named(report["overall"], TICTOC_METRICS), report


class TimelyChatScorer:
    """TIMER's delay (F1, RMSLE) and reply metrics on the held-out dialogs, as `run_timelychat_suite` scores them."""

    suite = "timelychat"

    def __init__(self, recipe, rows: list[dict]):
        from timealign.data.timelychat import TimerDialog

        self.recipe = recipe
        self.dialogs = [TimerDialog.from_row(row) for row in rows]

    def score(self, backend) -> tuple[dict, dict]:
        from timealign.render.timer import TimerRenderer
        from timealign.suites.timelychat.options import TimelyChatOptions
        from timealign.suites.timelychat.turn_level import evaluate_timelychat

        o = TimelyChatOptions()
        renderer = TimerRenderer.for_timer(backend.tokenizer, self.recipe.timer)  # the training format
        report = evaluate_timelychat(
            backend,
            self.dialogs,
            renderer=renderer,
            timing_turns=o.timing_turns,
            unparsed=o.unparsed,
            instant_max_minutes=o.instant_max_minutes,
            interval_reading=o.interval_reading,
            postprocess=o.postprocess,
            interval_max_new_tokens=o.interval_max_new_tokens,
            response_max_new_tokens=o.response_max_new_tokens,
            cache_dir=None,
        )
        return _named(report["overall"], TIMELYCHAT_METRICS), report


SCORERS = {"dpo": TicTocScorer, "sft": TimelyChatScorer}


def _named(overall: dict, names: dict[str, str]) -> dict[str, float]:
    """The logged metrics: defined numbers only (None, e.g. NAR on a slice without both labels, is left out of the
    entry; `undefined_reasons` says why in the log)."""
    return {
        PREFIX + name: float(overall[key])
        for key, name in names.items()
        if isinstance(overall.get(key), (int, float)) and not isinstance(overall.get(key), bool)
    }


def undefined_reasons(suite: str, report: dict) -> dict[str, str]:
    """{logged name: why it is undefined} for each metric of the report that is None."""
    if suite == "tictoc":
        from timealign.data.sampling import undefined_tictoc_metrics

        labels = [s["label"] for s in report.get("samples") or [] if "error" not in s]
        undefined = undefined_tictoc_metrics(report["overall"], labels)
        return {PREFIX + TICTOC_METRICS[k]: why for k, why in undefined.items()}
    overall = report.get("overall") or {}
    return {
        PREFIX + name: TIMELYCHAT_UNDEFINED.get(
            key.removeprefix("target_").removesuffix("_target"), "undefined on the slice (see the report's notes)"
        )
        + (" (target turns)" if "target" in key else "")
        for key, name in TIMELYCHAT_METRICS.items()
        if key in overall and overall[key] is None
    }


def heldout_slice(recipe, data) -> list[dict]:
    """`live_eval.max_samples` rows of the prepared data's `data.eval_split`: a seeded sample stratified by label
    (and spread over the scenarios; `timealign.data.sampling`), the rows eval/run.py scores with eval.max_samples set
    to the same number."""
    return heldout_slice_with_info(recipe, data)[0]


def heldout_slice_with_info(recipe, data) -> tuple[list[dict], dict]:
    """`heldout_slice` and how it was drawn (`timealign.data.sampling`)."""
    from timealign.data.sampling import sample_dialogs, sample_pairs

    split = recipe.data.eval_split
    if split not in data:
        raise RecipeError(
            f"live_eval.every_steps={recipe.live_eval.every_steps} scores the held-out split "
            f"data.eval_split={split!r}, which the prepared data lacks (has: {', '.join(data)}); set "
            "data.eval_split to one of those or live_eval.every_steps=0"
        )
    rows = data[split]
    if min(recipe.live_eval.max_samples, len(rows)) < 1:
        raise RecipeError(
            f"live_eval: the held-out split {split!r} is empty (live_eval.max_samples={recipe.live_eval.max_samples})"
        )
    sample = sample_dialogs if recipe.task == "sft" else sample_pairs
    return sample(rows.to_list(), recipe.live_eval.max_samples, recipe.data.seed)


# ------------------------------------------------------------------------------------------------ the callback


@contextmanager
def preserved_rng():
    """Python, NumPy and torch (CPU, every CUDA device) random states restored afterwards: evaluation must not
    change what training draws (data order, dropout)."""
    import numpy as np
    import torch

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


class LiveEvalCallback(TrainerCallback):
    """Scores the held-out slice at the start (`live_eval.at_start`), every `live_eval.every_steps` optimizer steps
    and after the last step, and logs the metrics through the trainer (module docstring)."""

    def __init__(self, trainer: Trainer, recipe, data):
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

        from timealign.backends.base import sampling_settings, set_reasoning

        cfg = recipe.live_eval
        if cfg.every_steps < 1:
            raise RecipeError(f"live_eval.every_steps={cfg.every_steps}: the callback needs >= 1 (0 turns it off)")
        if recipe.task not in SCORERS:
            raise RecipeError(
                f"live_eval: no held-out evaluation for task {recipe.task!r} (known: {', '.join(SCORERS)})"
            )
        if getattr(trainer, "is_fsdp_enabled", False):
            raise RecipeError(
                "live_eval.every_steps > 0 under FSDP is not supported (generation with sharded "
                "parameters needs every rank in step); set live_eval.every_steps=0 and score saved "
                "checkpoints with eval/run.py"
            )
        self.trainer, self.recipe = trainer, recipe
        self.every, self.at_start = cfg.every_steps, cfg.at_start
        rows, self.sample_info = heldout_slice_with_info(recipe, data)
        self.scorer = SCORERS[recipe.task](recipe, rows)
        logger.info(
            "live eval slice: %d of %d %s rows (%s, by label %s)",
            len(rows),
            self.sample_info["available"],
            recipe.data.eval_split,
            self.sample_info["sampling"],
            self.sample_info["by_label"],
        )
        if self.sample_info.get("missing_labels"):
            logger.warning(
                "the live eval slice holds no %s rows (live_eval.max_samples=%d is below the number of "
                "labels): a metric that needs every label is not logged",
                " / ".join(self.sample_info["missing_labels"]),
                recipe.live_eval.max_samples,
            )
        # A copy: the backend sets left padding and a pad token, which the training collator must not see.
        self.tokenizer = set_reasoning(copy.deepcopy(trainer.processing_class), recipe.eval.reasoning)
        self.sampling = sampling_settings(recipe.eval)
        self.every_rank = is_deepspeed_zero3_enabled()  # sharded parameters: every rank must join each forward
        self.scored_steps: list[int] = []

    # -- when -------------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if self.at_start and state.global_step == 0:  # not on resume: that step was scored by the first run
            self.evaluate(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.every == 0 or (state.max_steps and step >= state.max_steps):
            self.evaluate(step)

    # -- how --------------------------------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        """Score the slice at `step` (once per step), log the metrics on every rank, return them."""
        from accelerate.utils import broadcast_object_list

        if step in self.scored_steps:
            return {}
        accelerator = self.trainer.accelerator
        payload: dict[str, Any] = {}
        if self.every_rank or accelerator.is_main_process:
            try:
                payload = {"metrics": self._score(step)}
            except Exception:
                if accelerator.num_processes == 1 or self.every_rank:
                    raise
                payload = {"error": traceback.format_exc()}
                broadcast_object_list([payload], from_process=0)  # let the waiting ranks stop too
                raise
        if accelerator.num_processes > 1:  # the others wait here for the main process's metrics
            payload = broadcast_object_list([payload], from_process=0)[0]
            if "error" in payload:
                raise RuntimeError(f"live evaluation failed on the main process at step {step}:\n{payload['error']}")
        metrics = dict(payload["metrics"])
        # transformers' Trainer.log, not the TRL/TIMER override: that one would flush (and clear) the running
        # training metrics (rewards/margins, loss_time, ...) into this entry. Its on_log clears should_log, which
        # would drop this step's own training log: restored.
        should_log = self.trainer.control.should_log
        Trainer.log(self.trainer, dict(metrics))
        self.trainer.control.should_log = should_log
        self.scored_steps.append(step)
        return metrics

    def _score(self, step: int) -> dict[str, float]:
        import torch

        from timealign.backends.hf import HFBackend

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)  # the module under DDP / DeepSpeed
        was_training = model.training
        started = time.perf_counter()
        backend = HFBackend.from_model(
            model,
            self.tokenizer,
            batch_size=self.recipe.eval.batch_size,
            sampling=self.sampling,
            model_id=f"training@step-{step}",
        )
        model.eval()
        try:
            with torch.no_grad(), preserved_rng():
                metrics, report = self.scorer.score(backend)
        finally:
            model.train(was_training)
        metrics[PREFIX + "seconds"] = round(time.perf_counter() - started, 3)
        report["notes"] = list(report.get("notes") or [])
        for name, why in undefined_reasons(self.scorer.suite, report).items():
            note = f"{name} is not logged at step {step}: {why}"
            report["notes"].append(note)
            if self.trainer.accelerator.is_main_process:
                logger.warning(note)
        report["data"] = {
            "split": self.recipe.data.eval_split,
            "source": self.recipe.data.source,
            "path": self.recipe.data.path,
            **self.sample_info,
        }
        if self.trainer.accelerator.is_main_process:
            self._write(step, report)
            logger.info("live eval (%s) at step %d: %s", self.scorer.suite, step, metrics)
        return metrics

    def _write(self, step: int, report: dict) -> None:
        folder = Path(self.trainer.args.output_dir) / REPORT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        report = {k: v for k, v in report.items() if k != "markdown"}
        (folder / f"step-{step:06d}.json").write_text(
            json.dumps({"step": step, "suite": self.scorer.suite, **report}, indent=1, default=str)
        )
