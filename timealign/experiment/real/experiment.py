"""RealExperiment: every arm and seed of one run trained (or not) and scored on the held-out samples, and the TIMER
part; the summary and its files written when they are done."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timealign.experiment.real.arms import ARMS, RECIPE, TIMER_RECIPE
from timealign.experiment.real.identity import scored_on
from timealign.experiment.real.options import RealOptions, recipe_overrides
from timealign.experiment.real.outputs import write_outputs
from timealign.experiment.real.summary import analyse

logger = logging.getLogger("timealign.experiment.real")

# data.seed of every held-out evaluation, whatever the training seed (RealExperiment.recipe)
HELDOUT_SEED = 0
TIMELYCHAT_SYNTHETIC = {"data": "synthetic", "n": "60", "timing_turns": "all", "response_max_new_tokens": "24"}


@dataclass
class RealExperiment:
    out: Path
    opts: RealOptions
    arms: tuple[str, ...]
    seeds: tuple[int, ...]

    @property
    def steps(self) -> int:
        return math.ceil(self.opts.train_pairs / self.opts.batch_pairs)

    def recipe(self, arm: str, seed: int, evaluation: bool = False):
        """The arm's recipe on this seed; `evaluation`: with data.seed HELDOUT_SEED, so that a stratified held-out
        sample (eval_samples=N) is the same on every seed (data.seed picks it; training uses it for its subset)."""
        from timealign.config import load_recipe

        o = self.opts
        folder = arm if ARMS[arm].trained else "untrained"  # base and clock: the method's data, no training
        overrides = {
            "model.name_or_path": o.base,
            "data.path": o.data,
            "data.balance_train_labels": "true",
            "data.seed": str(HELDOUT_SEED if evaluation else seed),
            "training.seed": str(seed),
            "training.max_steps": str(self.steps),
            "training.per_device_train_batch_size": "1",
            "training.gradient_accumulation_steps": str(o.batch_pairs),
            "training.learning_rate": str(o.learning_rate),
            "training.beta": str(o.beta),
            "training.logging_steps": "1",
            "eval.backend": o.eval_backend,
            "training.use_cpu": str(o.device != "cuda").lower(),  # `auto` is resolved in run(), before this
            "eval.max_samples": str(o.eval_samples) if o.eval_samples > 0 else "null",
            "eval.bootstrap": str(o.resamples),
            "live_eval.every_steps": str(o.curve_every),
            "live_eval.max_samples": str(o.curve_samples),
            "output_dir": str(self.out / "models" / f"{folder}-seed{seed}"),
            **ARMS[arm].overrides,
        }
        if o.heldout == "validation":
            overrides.update(
                {
                    "data.validation_share": str(o.validation_share),
                    "data.validation_by": o.validation_by,
                    "data.eval_split": "validation",
                }
            )
        if ARMS[arm].trained:
            overrides.update(recipe_overrides(o.overrides))
        if o.eval_batch_size > 0:  # 0: not resolved yet (run() sets it), the recipe's
            overrides["eval.batch_size"] = str(o.eval_batch_size)
        return load_recipe(RECIPE, overrides, task="dpo")

    def eval_dir(self, arm: str, seed: int) -> Path:
        return self.out / "eval" / f"{arm}-seed{seed}"

    def train_arm(self, arm: str, seed: int) -> tuple[str, dict]:
        """(the checkpoint the arm's evaluation scores, its run facts): trained arms train here."""
        from timealign.eval.runner import clock_label
        from timealign.experiment.analysis import live_curve, train_summary
        from timealign.train import dpo

        recipe = self.recipe(arm, seed)
        t0 = time.perf_counter()
        facts: dict[str, Any] = {"arm": arm, "seed": seed}
        if ARMS[arm].trained:
            checkpoint = str(dpo.run(recipe))
            facts.update(train=train_summary(Path(checkpoint)), curve=live_curve(Path(checkpoint)))
        elif arm == "clock":
            checkpoint = clock_label(recipe.eval.clock_seconds)
        else:
            checkpoint = recipe.model.name_or_path
        facts["train_seconds"] = round(time.perf_counter() - t0, 1)
        return checkpoint, facts

    def evaluate_arm(self, arm: str, seed: int, checkpoint: str) -> dict:
        """The arm's TicToc report on the held-out samples (published under eval/<arm>-seed<seed>/)."""
        from timealign.eval.runner import evaluate

        recipe = self.recipe(arm, seed, evaluation=True)
        return evaluate(recipe, checkpoint, ["tictoc"], self.eval_dir(arm, seed))["tictoc"]

    def overlap_cores(self) -> tuple[list[int], list[int]] | None:
        """(evaluation cores, training cores) when evaluations run beside training (`overlap`), else None."""
        from timealign.experiment.background import split_cores

        if not self.opts.overlap:
            return None
        import torch

        if torch.cuda.is_available():  # training and the engine would share the GPU's memory: one after the other
            logger.info("overlap: a GPU is present, so arms are trained and evaluated one after the other")
            return None
        cores = split_cores()
        if cores is None:
            logger.info("overlap: one core only, so arms are trained and evaluated one after the other")
        return cores

    def run_timer(self) -> dict:
        from timealign.config import load_recipe
        from timealign.eval.runner import evaluate
        from timealign.experiment.analysis import timing_numbers, train_summary
        from timealign.experiment.design import save_timer_base
        from timealign.train import sft

        o = self.opts
        recipe = load_recipe(
            TIMER_RECIPE,
            {
                "model.name_or_path": o.base,
                "training.max_steps": str(o.timer_steps),
                "eval.backend": "hf",
                "eval.bootstrap": str(o.resamples),
                "output_dir": str(self.out / "models" / "timer"),
            },
            task="sft",
        )
        sets = {
            "synthetic": {**TIMELYCHAT_SYNTHETIC, "n": str(o.timer_dialogs)},
            "timelychat_sample": {"data": o.timelychat_sample, "timing_turns": "all"},
        }
        t0 = time.perf_counter()
        base = save_timer_base(recipe, self.out / "models" / "timer-base")
        result: dict[str, Any] = {}
        for name, options in sets.items():
            report = evaluate(recipe, str(base), ["timelychat"], self.out / "eval" / f"timer-base-{name}",
                              suite_options={"timelychat": options})["timelychat"]  # fmt: skip
            result[name] = {"before": timing_numbers(report)}
        t1 = time.perf_counter()
        checkpoint = sft.run(recipe)
        t2 = time.perf_counter()
        for name, options in sets.items():
            report = evaluate(recipe, str(checkpoint), ["timelychat"], self.out / "eval" / f"timer-{name}",
                              suite_options={"timelychat": options})["timelychat"]  # fmt: skip
            result[name]["after"] = timing_numbers(report)
        result["train"] = train_summary(Path(checkpoint))
        result["seconds"] = {
            "before": round(t1 - t0, 1),
            "train": round(t2 - t1, 1),
            "after": round(time.perf_counter() - t2, 1),
        }
        return result

    def check_recipes(self) -> None:
        """Every arm's recipe on every seed loads (and refuses bad input, e.g. a misspelt `overrides=` key) before
        anything runs: the caller's check, before the first training or the first `parallel=` unit."""
        for arm in self.arms:
            for seed in self.seeds:
                self.recipe(arm, seed)

    def run(self) -> dict:
        """Every arm and seed, then the TIMER part; the recipes were checked (`check_recipes`) and out= claimed
        (`timealign.experiment.real.claim`) by the caller."""
        from timealign.experiment.analysis import machine_info

        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        reports: dict[str, dict[int, dict]] = {arm: {} for arm in self.arms}
        runs: dict[str, dict] = {}
        self.train_and_evaluate(reports, runs)
        summary = analyse(reports, runs, self.opts, self.arms, self.seeds, self.steps)
        summary["settings"]["machine"] = machine_info()
        summary["seconds"] = round(time.perf_counter() - start, 1)
        write_outputs(summary, self.out)  # the DPO arms' result stands even if the TIMER part fails
        if self.opts.timer:
            summary["timer"] = self.run_timer()
            summary["seconds"] = round(time.perf_counter() - start, 1)
            write_outputs(summary, self.out)
        return summary

    def train_and_evaluate(self, reports: dict, runs: dict) -> None:
        """Every arm and seed, in order. With `overlap` an arm's evaluation runs in its own process on half the
        cores while the next arm trains on the other half (at most one evaluation at a time); else one after the
        other on all cores."""
        import os
        from functools import partial

        from timealign.experiment.background import BackgroundEvaluation, bind, train_on

        cores = self.overlap_cores()
        everything = sorted(os.sched_getaffinity(0))
        pending: tuple[str, int, dict, BackgroundEvaluation] | None = None

        def collect() -> None:
            arm, seed, facts, job = pending
            found, facts["eval_seconds"] = job.wait()
            reports[arm][seed], runs[f"{arm}-seed{seed}"] = found["tictoc"], facts
            logger.info("%s seed %d: NAR %s (evaluated in %.0f s)", arm, seed, found["tictoc"]["overall"]["nar"],
                        facts["eval_seconds"])  # fmt: skip

        if cores is not None:
            train_on(cores[1])
        try:
            for seed in self.seeds:
                for arm in self.arms:
                    if not ARMS[arm].trained and seed != self.seeds[0]:
                        continue  # greedy decisions of an untrained model ignore the seed: scored once, below
                    checkpoint, facts = self.train_arm(arm, seed)
                    facts["scored_on"] = scored_on(self.recipe(arm, seed, evaluation=True))  # rescore=, merge= check
                    if pending is not None:
                        collect()
                        pending = None
                    if cores is not None and arm != "clock":  # the clock rule runs no model: in line
                        call = partial(_evaluate_arm, str(self.out), self.opts, arm, seed, checkpoint)
                        job = BackgroundEvaluation(call, self.eval_dir(arm, seed), ["tictoc"], cores[0],
                                                   f"{arm}-seed{seed}")  # fmt: skip
                        pending, facts["eval_cores"] = (arm, seed, facts, job), cores[0]
                        continue
                    t0 = time.perf_counter()
                    reports[arm][seed] = self.evaluate_arm(arm, seed, checkpoint)
                    facts.update(eval_seconds=round(time.perf_counter() - t0, 1), eval_cores=None)  # None: in line
                    runs[f"{arm}-seed{seed}"] = facts
                    logger.info("%s seed %d: NAR %s", arm, seed, reports[arm][seed]["overall"]["nar"])
            if pending is not None:
                collect()
                pending = None
            for arm in self.arms:
                for seed in self.seeds[1:]:
                    if not ARMS[arm].trained:
                        reports[arm][seed] = reports[arm][self.seeds[0]]
                        runs[f"{arm}-seed{seed}"] = {"arm": arm, "seed": seed, "same_as_seed": self.seeds[0]}
        finally:
            if pending is not None:  # training or collecting failed: stop the evaluation too
                pending[3].stop()
            if cores is not None:
                bind(everything)


def _evaluate_arm(out: str, opts: RealOptions, arm: str, seed: int, checkpoint: str) -> None:
    """An arm's evaluation in a background process (`timealign.experiment.background`)."""
    RealExperiment(Path(out), opts, (arm,), (seed,)).evaluate_arm(arm, seed, checkpoint)
