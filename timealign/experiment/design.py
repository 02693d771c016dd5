"""The experiments' design: recipes, arms, targets, and the runner that trains and scores every arm."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timealign.config.secrets import redact
from timealign.experiment.analysis import (
    best_blind_threshold,
    check_targets,
    live_curve,
    machine_info,
    nar_by_cell,
    tictoc_numbers,
    timing_numbers,
    train_summary,
)
from timealign.experiment.report import markdown_report, write_plots
from timealign.experiment.spec import CONTROL_MAX_NAR, DPO_RECIPE, TARGETS, TIMER_RECIPE

logger = logging.getLogger("timealign.experiment")

# Held-out synthetic dialogs (timealign.data.synthetic, split "heldout"), every turn scored.
TIMELYCHAT_OPTIONS = {"data": "synthetic", "n": "60", "timing_turns": "all", "response_max_new_tokens": "24"}


@dataclass
class Arm:
    """One training run of an experiment: recipe overrides on top of the experiment's recipe."""

    name: str
    overrides: dict[str, str]
    description: str


DPO_ARMS = (
    Arm("offset", {}, "offset-DPO, delta = |S - 1.5|, with timestamps"),
    Arm("no_timestamps", {"data.timestamps": "false"}, "offset-DPO trained and evaluated without timestamps"),
    Arm("delta0", {"data.offset_scale": "0"}, "plain DPO (delta = 0), with timestamps"),
)
TIMER_ARMS = (
    Arm("timer", {}, "TIMER SFT, lambda = 1, special tokens"),
    Arm("lambda0", {"timer.lambda_time": "0"}, "lambda = 0 (no loss on the interval tokens)"),
    Arm("no_special_tokens", {"timer.special_tokens": "false"}, "plain-text markers instead of special tokens"),
)


@dataclass
class Experiment:
    out: Path
    seed: int = 0
    parts: tuple[str, ...] = ("dpo", "timer")
    ablations: bool = True
    # recipe overrides per part ("dpo", "timer") on top of the part's recipe, for every arm (e.g. the demo's)
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    title: str = "Does the pipeline teach time? (`make experiment`)"  # report.md's heading
    timings: dict[str, float] = field(default_factory=dict)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _recipe(self, name: str, task: str, overrides: dict[str, str]):
        from timealign.config import load_recipe

        part = "dpo" if task == "dpo" else "timer"
        merged = {
            "data.seed": str(self.seed),
            "training.seed": str(self.seed),
            **self.overrides.get(part, {}),
            **overrides,
        }
        return load_recipe(name, merged, task=task)

    def _timed(self, key: str, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[key] = round(time.perf_counter() - start, 1)
            logger.info("%s: %.1f s", key, self.timings[key])

    def _evaluate(self, recipe, checkpoint: str, suite: str, tag: str, **kwargs) -> dict:
        from timealign.eval.runner import evaluate

        return evaluate(recipe, checkpoint, [suite], self.out / "eval" / tag, **kwargs)[suite]

    # -- 1. offset-DPO ----------------------------------------------------------------------------------------
    def run_dpo(self) -> dict:
        from timealign.data.pairs import load_prepared, prepare
        from timealign.models import resolve_model_path
        from timealign.train import dpo

        data_dir = self.out / "data" / "tictoc"
        common = {"data.prepared_dir": str(data_dir)}
        recipe = self._recipe(DPO_RECIPE, "dpo", common)
        manifest = self._timed("dpo/data_prep", prepare, recipe.data, data_dir)
        base = self._timed("dpo/base_model", resolve_model_path, recipe.model.name_or_path)
        before = {
            "timestamps": self._timed("dpo/eval_base", self._evaluate, recipe, base, "tictoc", "dpo-base"),
            "no_timestamps": self._timed(
                "dpo/eval_base_no_timestamps",
                self._evaluate,
                recipe,
                base,
                "tictoc",
                "dpo-base-no-timestamps",
                timestamps=False,
            ),
        }
        test_rows = load_prepared(data_dir)[recipe.data.eval_split].to_list()
        arms = {}
        for arm in DPO_ARMS if self.ablations else DPO_ARMS[:2]:
            arm_recipe = self._recipe(
                DPO_RECIPE,
                "dpo",
                {**common, **arm.overrides, "output_dir": str(self.out / "models" / f"dpo-{arm.name}")},
            )
            checkpoint = self._timed(f"dpo/train_{arm.name}", dpo.run, arm_recipe)
            report = self._timed(
                f"dpo/eval_{arm.name}", self._evaluate, arm_recipe, str(checkpoint), "tictoc", f"dpo-{arm.name}"
            )
            arms[arm.name] = {
                "description": arm.description,
                "train": train_summary(Path(checkpoint)),
                **tictoc_numbers(report),
                "by_cell": nar_by_cell(test_rows, report["samples"]),
                "curve": live_curve(Path(checkpoint)),
            }
        result = {
            "nar_before": before["timestamps"]["overall"]["nar"],
            "nar_before_no_timestamps": before["no_timestamps"]["overall"]["nar"],
            "nar_after": arms["offset"]["nar"],
            "nar_after_no_timestamps": arms["no_timestamps"]["nar"] if "no_timestamps" in arms else None,
            "base": {
                "checkpoint": recipe.model.name_or_path,
                "timestamps": tictoc_numbers(before["timestamps"]),
                "no_timestamps": tictoc_numbers(before["no_timestamps"]),
                "by_cell": nar_by_cell(test_rows, before["timestamps"]["samples"]),
            },
            "best_scenario_blind_threshold": best_blind_threshold(test_rows),
            "arms": arms,
            "data": {
                "train_pairs": manifest["splits"]["train"]["pairs"],
                "test_pairs": manifest["splits"]["test"]["pairs"],
                "train_scenarios": manifest["splits"]["train"]["scenarios"],
                "test_scenarios": manifest["splits"]["test"]["scenarios"],
                "test_labels": manifest["splits"]["test"]["by_label"],
                "balance_dropped": manifest.get("balance_dropped", 0),
            },
        }
        if "delta0" in arms:
            result["nar_after_delta0"] = arms["delta0"]["nar"]
        return result

    # -- 2. TIMER SFT -----------------------------------------------------------------------------------------
    def run_timer(self) -> dict:
        from timealign.train import sft

        arms, befores = {}, {}
        for arm in TIMER_ARMS if self.ablations else TIMER_ARMS[:1]:
            arm_recipe = self._recipe(
                TIMER_RECIPE,
                "sft",
                {
                    **arm.overrides,
                    "output_dir": str(self.out / "models" / f"timer-{arm.name}"),
                    "data.prepared_dir": str(self.out / "data" / "timelychat"),
                },
            )
            suite_opts = {"timelychat": dict(TIMELYCHAT_OPTIONS)}
            base = self._timed(
                f"timer/base_{arm.name}", save_timer_base, arm_recipe, self.out / "models" / f"timer-base-{arm.name}"
            )
            befores[arm.name] = timing_numbers(
                self._timed(
                    f"timer/eval_base_{arm.name}",
                    self._evaluate,
                    arm_recipe,
                    str(base),
                    "timelychat",
                    f"timer-base-{arm.name}",
                    suite_options=suite_opts,
                )
            )
            checkpoint = self._timed(f"timer/train_{arm.name}", sft.run, arm_recipe)
            report = self._timed(
                f"timer/eval_{arm.name}",
                self._evaluate,
                arm_recipe,
                str(checkpoint),
                "timelychat",
                f"timer-{arm.name}",
                suite_options=suite_opts,
            )
            arms[arm.name] = {
                "description": arm.description,
                "before": befores[arm.name],
                "train": train_summary(Path(checkpoint)),
                **timing_numbers(report),
                "curve": live_curve(Path(checkpoint)),
            }
        main = arms["timer"]
        return {
            "f1_before": main["before"]["f1"],
            "f1_after": main["f1"],
            "fpr_before": main["before"]["fpr"],
            "fpr_after": main["fpr"],
            "rmsle_before": main["before"]["rmsle"],
            "rmsle_after": main["rmsle"],
            "rmsle_target_before": main["before"]["rmsle_target"],
            "rmsle_target_after": main["rmsle_target"],
            "arms": arms,
        }

    # -- all --------------------------------------------------------------------------------------------------
    def run(self) -> dict:
        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        summary: dict[str, Any] = {}
        if "dpo" in self.parts:
            summary["dpo"] = self.run_dpo()
        if "timer" in self.parts:
            summary["timer"] = self.run_timer()
        summary["targets"] = check_targets(summary)
        summary["settings"] = {
            "seed": self.seed,
            "parts": list(self.parts),
            "ablations": self.ablations,
            "recipes": {"dpo": DPO_RECIPE, "timer": TIMER_RECIPE},
            "targets": TARGETS,
            "control_max_nar": CONTROL_MAX_NAR,
            "machine": machine_info(),
        }
        self.timings["total"] = round(time.perf_counter() - start, 1)
        summary["seconds"] = dict(self.timings)
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        write_plots(summary, self.out)
        (self.out / "report.md").write_text(markdown_report(summary, self.out, title=self.title))
        logger.info("wrote %s and %s", self.out / "summary.json", self.out / "report.md")
        return summary


def save_timer_base(recipe, out_dir: Path) -> Path:
    """The TIMER run's starting point as a checkpoint: the base model with the TIMER tokens added exactly as training
    adds them (new rows at the mean embedding), plus the recipe, so "before" is scored in the arm's own format."""
    import yaml

    from timealign.render.checkpoint import CHECKPOINT_RECIPE
    from timealign.train.sft import build_model_and_tokenizer

    model, tokenizer, _ = build_model_and_tokenizer(recipe)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(redact(recipe.to_dict()), sort_keys=False))
    return out_dir
