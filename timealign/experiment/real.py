"""Does timealign teach a real model time? `make experiment-real` (`python -m timealign.experiment.real`), issue 34.

A real pretrained model (`smol`: SmolLM2-135M-Instruct, real weights and tokenizer) is trained with offset-DPO on the
released TicToc v1 data and scored on held-out samples of the v1 test split (the paper's scenario split), against its
untrained self, a no-timestamp control, plain DPO, an elapsed-badge variant and the elapsed-time rule, all on the same
samples and by the same evaluator code. Everything runs through the commands users run (`timealign.train.dpo.run`,
`timealign.eval.runner.evaluate`) on recipe `smol`.

Arms (`arms=`):
- base: `smol` untrained, prompts with timestamps;
- method: offset-DPO with timestamps (the v1 release has no annotator scores: every pair's offset is the recipe's
  data.margin_prefer_* = 1.0);
- elapsed: the same with the elapsed badge (`data.elapsed=true`: the prompt says how old the last tool result is);
- control: offset-DPO without timestamps, trained and scored without them (what is learnt without time);
- plain: plain DPO with timestamps (`dpo.margin_mode=plain`);
- clock: the elapsed-time rule (`eval.backend=clock`, 1800 s), no model.

The budget (90 minutes on 2 CPU cores for the default options) decides the training size: each trained arm sees the
same `train_pairs` pairs (the label-balanced v1 train split, `data.balance_train_labels`, read in the same seeded
order), one optimizer step per `batch_pairs` of them, full fine-tuning in fp32, the reference on the fly (a
precomputed reference would first score all 182 balanced pairs, more than one epoch of the subsample costs). The
held-out evaluation is the whole test split by default (`eval_samples=0`, 685 samples) or a seeded sample of it,
stratified by label and spread over its scenarios, the same in every arm. The vLLM CPU engine computes on one core
here, so with `overlap` (the default on a CPU with two or more cores) each arm is evaluated in its own process on half
the cores while the next arm trains on the other half (`timealign.experiment.background`): the six arms on the
whole split took 86 minutes on 2 cores. The learning curve scores `curve_samples` stratified held-out samples
every `curve_every` steps (the evaluator's hf code on the model in memory, the same rows in all arms).
`call_forms` tells calls in the trained form from other call-shaped JSON.

TIMER (`timer=true`): recipe `smol-timer` (LoRA and the TIMER tokens' rows) on synthetic dialogs; delay F1 and RMSLE
before and after, on held-out synthetic dialogs and on the authors' TimelyChat sample (`timelychat_sample=`).

Seeds (`seeds=0,1,2`): a seed changes each trained arm's label-balanced train subset and its order, never the held-out
samples; the untrained arms are scored once and stand for every seed. real.json keeps every arm's per-sample
decisions, and `merge=` joins runs made apart (other seeds, other arms) into one report with the across-seed tables
and picture (`timealign.experiment.seeds`). `heldout=validation` scores on a validation split carved from the train
split (`data.validation_share`) instead of the test split, and `overrides=` changes the trained arms' recipe: the
two together choose a configuration without looking at the test split. `rescore=RUN` scores a finished run's models
again (another backend, batch size or device; no training) and counts, per arm and seed, the held-out samples on which
it decides as RUN did: a number checked with a second backend before it is believed.

Writes `<out>/real.json` (every number), `<out>/real.md` (the report, made from that JSON alone), `<out>/real.png`,
every evaluator report under `<out>/eval/` and the models under `<out>/models/`.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.eval.bootstrap import fmt_interval
from timealign.experiment.parallel import auto_processes, plan_units, run_units
from timealign.experiment.report import fmt
from timealign.experiment.seeds import across_seeds, agreement, decisions, load_run, merge_runs, sample_keys
from timealign.experiment.spec import comma_choices, comma_seeds

logger = logging.getLogger("timealign.experiment.real")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_V1 = REPO_ROOT.parent / "shared" / "data" / "tictoc-v1"
DEFAULT_TIMELYCHAT = REPO_ROOT.parent / "shared" / "data" / "timelychat-sample" / "eval.jsonl"
RECIPE, TIMER_RECIPE = "smol", "smol-timer"


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: dict[str, str]
    trained: bool
    description: str
    color: str


ARMS = {
    a.name: a
    for a in (
        Arm("base", {}, False, "smol untrained, timestamps", "#7f7f7f"),
        Arm("method", {}, True, "offset-DPO, timestamps", "#1f77b4"),
        Arm("elapsed", {"data.elapsed": "true"}, True, "offset-DPO, timestamps + elapsed badge", "#17becf"),
        Arm("control", {"data.timestamps": "false"}, True, "offset-DPO, no timestamps (control)", "#ff7f0e"),
        Arm("plain", {"dpo.margin_mode": "plain"}, True, "plain DPO, timestamps", "#2ca02c"),
        Arm("clock", {"eval.backend": "clock"}, False, "the elapsed-time rule (1800 s), no model", "#d62728"),
    )
}
TRAINED = {name: arm.trained for name, arm in ARMS.items()}
# (a, b): the paired differences NAR(a) - NAR(b) the report shows (those whose arms both ran)
COMPARISONS = (
    ("method", "base"),
    ("method", "control"),
    ("method", "clock"),
    ("method", "plain"),
    ("elapsed", "method"),
    ("elapsed", "clock"),
)
# data.seed of every held-out evaluation, whatever the training seed (RealExperiment.recipe)
HELDOUT_SEED = 0
READABLE_CURVE_SAMPLES = 64  # fewer held-out samples a curve point are noise (16 untrained ones read 0.654, not 0.500)
TIMELYCHAT_SYNTHETIC = {"data": "synthetic", "n": "60", "timing_turns": "all", "response_max_new_tokens": "24"}


@dataclass
class RealOptions:
    out: str = opt("results/experiment-real", "output folder: real.json, real.md, real.png, eval/, models/")
    data: str = opt(str(DEFAULT_V1), "the TicToc v1 release's data/ folder (prefer{Tool,NoTool}_elapse_*.json)")
    arms: str = opt(
        ",".join(ARMS), "comma list of arms: " + ", ".join(f"{a.name} ({a.description})" for a in ARMS.values())
    )
    seeds: str = opt(
        "0",
        "comma list of seeds: each trained arm's label-balanced train subset and order; the held-out samples are the "
        "same on every seed, and the untrained arms (base, clock) are scored once and stand for every seed",
    )
    train_pairs: int = opt(
        48, "pairs each trained arm sees (the label-balanced train split, in the seed's order; steps = this / batch)"
    )
    batch_pairs: int = opt(8, "pairs per optimizer step (one pair per forward, accumulated)")
    learning_rate: float = opt(
        1e-4, "training.learning_rate of every trained arm (full fine-tuning, fp32; 2e-5 moved nothing in 6 steps)"
    )
    beta: float = opt(0.1, "training.beta of every trained arm")
    device: str = opt(
        "auto",
        "where arms train and are evaluated: auto (a CUDA GPU when torch sees one, else the CPU) | cpu | cuda "
        "(training.use_cpu=false: one GPU; `make experiment-real` on a GPU node, docs/experiment/real.md)",
        choices=("auto", "cpu", "cuda"),
    )
    eval_backend: str = opt(
        "auto",
        "held-out evaluation: auto (vllm when this Python has it, else hf) | vllm (the vLLM engine: make "
        "experiment-real's venv on CPU) | hf (transformers, on the training device)",
        choices=("auto", "vllm", "hf"),
    )
    eval_batch_size: int = opt(
        0,
        "eval.batch_size of the held-out evaluation (hf: prompts per generate call); 0: the recipe's 8 on a CPU, "
        "64 on a GPU",
    )
    eval_samples: int = opt(
        0,
        "held-out samples scored, the same in every arm: 0, the whole test split (685; 8-18 minutes per arm with "
        "the vLLM CPU engine here); N: a seeded sample of N, stratified by label and spread over the scenarios",
    )
    curve_every: int = opt(3, "learning curve: score curve_samples held-out samples every N steps (0: no curve)")
    curve_samples: int = opt(
        READABLE_CURVE_SAMPLES,
        "learning curve: held-out samples per point (stratified, the same in every arm). 64 is the fewest that can "
        "be read (16 are noise: an untrained step-0 point read 0.654 where the whole split reads 0.500); each point "
        "is hf generation in the training process",
    )
    timer: bool = opt(
        False,
        "also TIMER SFT of smol (recipe smol-timer): delay F1 and RMSLE before and after (about 16 minutes on 2 idle "
        "cores, beyond the 86 of the DPO arms)",
    )
    timer_steps: int = opt(-1, "TIMER: training.max_steps (-1: the recipe's epochs)")
    timer_dialogs: int = opt(20, "TIMER: held-out synthetic dialogs scored")
    timelychat_sample: str = opt(str(DEFAULT_TIMELYCHAT), "TIMER: the authors' TimelyChat sample (eval.jsonl)")
    resamples: int = opt(1000, "bootstrap resamples for intervals and paired differences")
    overlap: bool = opt(
        True,
        "CPU: evaluate each arm in its own process on half the cores while the next arm trains on the other half "
        "(the vLLM CPU engine computes on one core of this 2-core machine); false, or a GPU: one after the other",
    )
    base: str = opt("smol", "model.name_or_path of every arm")
    heldout: str = opt(
        "test",
        "what every arm is scored on: test (the v1 test split, the paper's held-out scenarios) | validation "
        "(validation_share of the train split's trajectories, set aside before training: for choosing a "
        "configuration without looking at the test split)",
        choices=("test", "validation"),
    )
    validation_share: float = opt(0.25, "with heldout=validation: data.validation_share (the v1 train split: 169 "
                                  "validation samples at 0.25, 138 balanced pairs left to train on)")  # fmt: skip
    overrides: str = opt(
        "",
        "recipe overrides of every trained arm, `key=value` separated by `;` (e.g. 'lora.enabled=true;lora.r=16' or "
        "'training.lr_scheduler_type=cosine'): the configuration a search varies, the report lists them; epochs are "
        "train_pairs (steps = train_pairs / batch_pairs: 364 is two epochs of the 182 balanced pairs)",
    )
    parallel: int = opt(
        0,
        "runs at once: N > 1 runs each trained arm and seed (and the untrained arms together) as its own process, N "
        "at a time, in <out>/runs/, then merges them into <out> as merge= does; 1: one process, arms one after the "
        "other; 0: 1 on a CPU or with timer=true, on a GPU as many as its free memory holds at 10 GB a run (at "
        "most 8, the most measured: 8 smol runs on one H200 finished together in 253 s)",
    )
    merge: str = opt(
        "",
        "comma list of finished runs (folders holding real.json, or the files) to combine into <out> without "
        "training: seeds and arms run apart, one report with the across-seed summary; the runs must share model, "
        "pairs, batch, lr, beta and held-out samples (timealign/experiment/seeds.py)",
    )
    rescore: str = opt(
        "",
        "a finished run's folder (real.json, models/) to score again without training: its models on the same "
        "held-out samples with this eval_backend, eval_batch_size and device (every other option is the run's), "
        "into out=; real.json and real.md then say per arm and seed on how many samples it decides as the run did "
        "(a number checked with a second backend). A parallel or merged run: rescore each run it joined "
        "(<out>/runs/<unit>), then merge= the rescored folders",
    )


COMMAND = Command(
    prog="python -m timealign.experiment.real",
    summary="Does timealign teach a real model time? SmolLM2-135M-Instruct trained with offset-DPO on the TicToc "
    "v1 release, against its base, a no-timestamp control, plain DPO, the elapsed badge and the elapsed-time rule, "
    "on the whole held-out v1 test split (eval_samples=N: a stratified sample); timer=true adds TIMER SFT of the "
    "same model. CPU, 2 cores: 86 minutes. Writes real.json, real.md, real.png.",
    options=RealOptions,
    recipe="none",
)


# ----------------------------------------------------------------------------------------------------- runner


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
            overrides.update({"data.validation_share": str(o.validation_share), "data.eval_split": "validation"})
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

    def run(self) -> dict:
        from timealign.experiment.analysis import machine_info

        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        for arm in self.arms:  # every recipe loads (and refuses bad input) before the first training starts
            for seed in self.seeds:
                self.recipe(arm, seed)
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


def recipe_overrides(text: str) -> dict[str, str]:
    """`overrides=` as {dotted key: value}; one RecipeError line for a part that is not `key=value`."""
    pairs = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or "." not in key:
            raise RecipeError(f"overrides={text!r}: {part!r} is not a dotted recipe key=value (e.g. "
                              "'training.num_train_epochs=2'); separate several with ';'")  # fmt: skip
        pairs[key.strip()] = value.strip()
    return pairs


def _evaluate_arm(out: str, opts: RealOptions, arm: str, seed: int, checkpoint: str) -> None:
    """An arm's evaluation in a background process (`timealign.experiment.background`)."""
    RealExperiment(Path(out), opts, (arm,), (seed,)).evaluate_arm(arm, seed, checkpoint)


# --------------------------------------------------------------------------------------------------- analysis


def arm_numbers(report: dict, keys: list[str]) -> dict:
    """NAR with its interval, attempt rates per label, and the breakdowns by gap level and sensitivity."""
    intervals = (report.get("intervals") or {}).get("metrics") or {}

    def cells(block: dict) -> dict:
        keep = ("n", "nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool")
        return {name: {k: row.get(k) for k in keep} for name, row in block.items()}

    return {
        **{k: report["overall"][k] for k in ("n", "nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool")},
        "nar_interval": intervals.get("nar"),
        "attempt_rate_prefer_tool_interval": intervals.get("attempt_rate_prefer_tool"),
        "attempt_rate_prefer_no_tool_interval": intervals.get("attempt_rate_prefer_no_tool"),
        "by_elapse_level": cells(report.get("by_elapse_level") or {}),
        "by_sensitivity": cells(report.get("by_sensitivity") or {}),
        "call_forms": call_forms(report),
        "decisions": decisions(report, keys),  # in the order of the summary's `samples`
    }


def call_forms(report: dict) -> dict:
    """How the counted calls are written: `tagged` with the family's call marker (smol: `<tool_call>`, as trained),
    or `untagged` (call-shaped JSON without it, e.g. `{"type": "function", "function": {...}}`, the shape of the
    system prompt's tool list). A model that only echoes its tool list is counted as calling; this tells them apart."""
    import re

    from timealign.render.families import FAMILIES

    family = FAMILIES.get(report["settings"].get("family") or "")
    calls = [s["output"] for s in report["samples"] if s.get("tool_call")]
    if family is None:
        return {"calls": len(calls), "tagged": None, "untagged": None}
    tagged = sum(bool(re.search(family.call_markers, text)) for text in calls)
    return {"calls": len(calls), "tagged": tagged, "untagged": len(calls) - tagged}


def analyse(reports, runs, opts: RealOptions, arms, seeds, steps) -> dict:
    """The summary: per arm and seed its numbers, the paired differences, the curves, the settings."""
    from timealign.eval.bootstrap import paired_differences, suite_units

    first = reports[arms[0]][seeds[0]]
    keys = sample_keys(first)["keys"]
    differences = {}
    for a, b in COMPARISONS:
        if a in reports and b in reports:
            for seed in seeds:
                d = paired_differences(
                    suite_units(reports[b][seed], "tictoc"),
                    suite_units(reports[a][seed], "tictoc"),
                    resamples=opts.resamples,
                )["metrics"]["nar"]
                differences[f"{a} - {b}, seed {seed}"] = {
                    k: d[k] for k in ("before", "after", "difference", "interval", "outside_noise")
                }
    summary = {
        "settings": {
            "arms": {a: ARMS[a].description for a in arms},
            "seeds": list(seeds),
            "steps": steps,
            "options": {k: getattr(opts, k) for k in opts.__dataclass_fields__},
            "recipe": RECIPE,
            "data": first.get("data"),
        },
        "test_samples": first["overall"]["n"],
        "samples": sample_keys(first),
        "arms": {a: {str(s): arm_numbers(reports[a][s], keys) for s in seeds} for a in arms},
        "differences": differences,
        "curves": {
            key: [{"step": p["step"], "nar": p.get("nar")} for p in facts.get("curve") or []]
            for key, facts in runs.items()
            if facts.get("curve")
        },
        "runs": runs,
    }
    summary["across_seeds"] = across_seeds(summary, TRAINED)
    return summary


# ----------------------------------------------------------------------------------------------------- output


def before_after(before: dict, after: dict, key: str) -> str:
    """A TIMER table cell: `before -> after [interval of after]`."""
    return f"{fmt(before[key])} -> {fmt(after[key])} {fmt_interval(after.get('intervals', {}).get(key))}"


def rescore_markdown(summary: dict) -> list[str]:
    """A rescored run's lines (`rescore=`): where its models were trained and first scored, and per arm and seed the
    decisions made alike."""
    r = summary.get("rescore")
    if not r:
        return []
    lines = ["", f"Scored again (`rescore=`): the models of `{r['from']}`, trained and first scored there with "
             f"eval.backend={r['eval_backend']} on {r['device']}. The same decision as there:", ""]  # fmt: skip
    for key, a in r["agreement"].items():
        shown = ", ".join(a["differ"][:10]) + (" ..." if len(a["differ"]) > 10 else "")
        lines.append(f"- {key}: {a['same']} of {a['of']} samples" + (f" (differ: {shown})" if a["differ"] else ""))
    return lines


def markdown_report(summary: dict, picture: str = "real.png") -> str:
    """real.md, made from real.json alone (a test checks the committed pair agrees)."""
    s = summary["settings"]
    o = s["options"]
    data = s.get("data") or {}
    where = f" on {o['device']}" if o.get("device") else ""  # summaries before the GPU path have no device
    lines = [
        "# Does timealign teach a real model time? (`make experiment-real`)",
        "",
        f"Model `{o['base']}` (SmolLM2-135M-Instruct), recipe `{s['recipe']}`; held-out: {data.get('label', 'n/a')}, "
        f"{summary['test_samples']} samples ({'the whole split' if not o['eval_samples'] else 'a stratified sample'}, "
        f"evaluated with eval.backend={o['eval_backend']}{where}). Trained arms: {o['train_pairs']} label-balanced "
        f"v1 train pairs, {s['steps']} steps of {o['batch_pairs']}, lr {o['learning_rate']:g}, beta {o['beta']:g}, "
        f"full fine-tuning in fp32; seeds {s['seeds']}. Total {summary['seconds']:.0f} s."
        + (f" Trained arms' overrides: `{o['overrides']}`." if o.get("overrides") else ""),
        *rescore_markdown(summary),
        "",
        "## Held-out NAR and attempt rates per arm",
        "",
        "| arm | seed | NAR [95% CI] | calls, prefer-Tool [95% CI] | calls, prefer-noTool [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for arm, by_seed in summary["arms"].items():
        for seed, a in by_seed.items():
            lines.append(
                f"| {arm}: {s['arms'][arm]} | {seed} | {fmt(a['nar'])} {fmt_interval(a['nar_interval'])} | "
                f"{fmt(a['attempt_rate_prefer_tool'])} {fmt_interval(a['attempt_rate_prefer_tool_interval'])} | "
                f"{fmt(a['attempt_rate_prefer_no_tool'])} {fmt_interval(a['attempt_rate_prefer_no_tool_interval'])} |"
            )
    forms = []
    for arm, by_seed in summary["arms"].items():
        for seed, a in by_seed.items():
            f = a.get("call_forms")  # absent from summaries written before it was counted
            if f and f["calls"] and f["tagged"] is not None:
                forms.append(f"- {arm}, seed {seed}: {f['calls']} calls, {f['tagged']} tagged, "
                             f"{f['untagged']} untagged")  # fmt: skip
    if forms:
        lines += ["", "How the counted calls are written (tagged: the `<tool_call>` form trained on; untagged: "
                  "call-shaped JSON without it, e.g. the system prompt's tool-list shape):", "", *forms]  # fmt: skip
    lines += across_seeds_markdown(summary)
    lines += ["", "## Paired differences (the same held-out samples)", ""]
    lines += ["| comparison | NAR a / b | difference [95% CI] | outside noise |", "|---|---|---|---|"]
    for key, d in summary["differences"].items():
        lines.append(
            f"| {key} | {fmt(d['after'])} / {fmt(d['before'])} | {d['difference']:+.3f} "
            f"{fmt_interval(d['interval'])} | {d['outside_noise']} |"
        )
    for group, title in (("by_elapse_level", "gap level"), ("by_sensitivity", "sensitivity")):
        keys = sorted({k for by_seed in summary["arms"].values() for a in by_seed.values() for k in a[group]})
        lines += ["", f"## By {title}: NAR (calls on prefer-Tool / prefer-noTool)", ""]
        lines += ["| arm | seed | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
        for arm, by_seed in summary["arms"].items():
            for seed, a in by_seed.items():
                cells = [
                    f"{fmt(a[group][k]['nar'])} ({fmt(a[group][k]['attempt_rate_prefer_tool'])} / "
                    f"{fmt(a[group][k]['attempt_rate_prefer_no_tool'])}), n={a[group][k]['n']}"
                    if k in a[group]
                    else "n/a"
                    for k in keys
                ]
                lines.append(f"| {arm} | {seed} | " + " | ".join(cells) + " |")
    if summary["curves"]:
        lines += ["", f"## Learning curves: NAR on {o['curve_samples']} held-out samples while training", ""]
        if o["curve_samples"] < READABLE_CURVE_SAMPLES:
            lines += [
                f"Fewer than {READABLE_CURVE_SAMPLES} samples a point: these points are noise (16 untrained samples "
                "read 0.654 where the whole split reads 0.500).",
                "",
            ]
        for key, points in summary["curves"].items():
            lines.append(f"- {key}: " + ", ".join(f"step {p['step']}: {fmt(p['nar'])}" for p in points))
    train = {k: r["train"] for k, r in summary["runs"].items() if r.get("train")}
    if train:
        lines += ["", "## Training (last logged step)", "", "| run | loss | reward accuracy | reward margin |"]
        lines.append("|---|---|---|---|")
        for key, t in train.items():
            lines.append(
                f"| {key} | {fmt(t.get('loss'))} | {fmt(t.get('rewards/accuracies'))} | "
                f"{fmt(t.get('rewards/margins'))} |"
            )
    timer = summary.get("timer")
    if timer:
        lines += ["", "## TIMER SFT of smol (recipe smol-timer)", ""]
        lines += [
            "Before -> after training, every turn of each held-out dialog scored (delayed = the positive class); "
            "the interval is the after-training number's (95% bootstrap over dialogs). RMSLE in minutes; the target "
            "turn is the one Table 2 of the TimelyChat paper scores.",
            "",
            "| held-out dialogs | turns (delayed) | delay F1 | FPR | RMSLE, every turn | RMSLE, target turn |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("synthetic", "timelychat_sample"):
            b, a = timer[name]["before"], timer[name]["after"]
            cells = [before_after(b, a, key) for key in ("f1", "fpr", "rmsle", "rmsle_target")]
            lines.append(f"| {name} | {a['cases']} ({a['delayed']}) | " + " | ".join(cells) + " |")
        sec, train = timer["seconds"], timer["train"]
        lines += [
            "",
            f"Training: {train['steps']} steps, last loss {fmt(train.get('loss'))} (time "
            f"{fmt(train.get('loss_time'))}, response {fmt(train.get('loss_response'))}). Seconds: "
            f"{sec['before']} scoring the base, {sec['train']} training, {sec['after']} scoring the trained model.",
        ]
    lines += ["", f"![NAR and attempt rates per arm]({picture})", ""]
    return "\n".join(lines)


def across_seeds_markdown(summary: dict) -> list[str]:
    """The across-seed tables (when some arm ran on two or more seeds) and, for a merge, the runs merged."""
    spread = summary.get("across_seeds")  # absent from summaries written before seeds were summarised
    if not spread or not any(len(a["seeds"]) > 1 for a in spread["arms"].values()):
        return []
    lines = ["", "## Across seeds", "", "An untrained arm (base, clock) is one number whatever the seed.", ""]
    lines += ["| arm | seeds | NAR per seed | mean | min - max |", "|---|---|---|---|---|"]
    for arm, a in spread["arms"].items():
        per_seed = ", ".join(f"{fmt(v)} (s{seed})" for seed, v in zip(a["seeds"], a["values"]))
        lines.append(f"| {arm} | {len(a['seeds'])} | {per_seed} | {fmt(a['mean'])} | {fmt(a['min'])} - "
                     f"{fmt(a['max'])} |")  # fmt: skip
    lines += ["", "| comparison | difference per seed [95% CI] | mean | min - max | every seed outside noise | "
              "same sign on every seed |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in spread["differences"].items():
        per_seed = "; ".join(
            f"s{seed}: {v:+.3f} {fmt_interval(ci)}" if v is not None else f"s{seed}: n/a"
            for seed, v, ci in zip(c["seeds"], c["differences"], c["intervals"])
        )
        mean = "n/a" if c["mean"] is None else f"{c['mean']:+.3f}"
        low_high = "n/a" if c["min"] is None else f"{c['min']:+.3f} - {c['max']:+.3f}"
        lines.append(f"| {name} | {per_seed} | {mean} | {low_high} | {c['every_seed_outside_noise']} | "
                     f"{c['same_sign']} |")  # fmt: skip
    sources = summary["settings"].get("sources")
    parallel = summary["settings"].get("parallel")
    if sources and parallel:
        own = parallel["seconds_of_the_runs"]
        lines += ["", f"Run as {parallel['units']} processes, {parallel['processes']} at a time (`parallel=`), and "
                  f"merged: {summary['seconds']:.0f} s from the first start to the last end, {own:.0f} s on the "
                  "runs' own clocks (each slowed by the sharing); differences between arms of different runs are "
                  "paired from their per-sample decisions:", ""]  # fmt: skip
    elif sources:
        lines += ["", "Merged from these runs (`merge=`); differences between arms of different runs are paired from "
                  "their per-sample decisions:", ""]  # fmt: skip
    for src in sources or ():
        lines.append(f"- {src['run']}: arms {', '.join(src['arms'])}, seeds {src['seeds']}, on {src['device']}, "
                     f"{src['seconds'] or 0:.0f} s")  # fmt: skip
    return lines


def write_plot(summary: dict, path: Path) -> None:
    seeds = summary.get("across_seeds") and any(len(a["seeds"]) > 1 for a in summary["across_seeds"]["arms"].values())
    if seeds:
        return write_seeds_plot(summary, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(summary["arms"])
    fig, axes = plt.subplots(1, 2 if summary["curves"] else 1, figsize=(13 if summary["curves"] else 7, 4.4))
    axes = axes if summary["curves"] else [axes]
    ax = axes[0]
    metrics = (("nar", "NAR"), ("attempt_rate_prefer_tool", "calls, prefer-Tool"),
               ("attempt_rate_prefer_no_tool", "calls, prefer-noTool"))  # fmt: skip
    width = 0.8 / len(metrics)
    for i, arm in enumerate(arms):
        a = next(iter(summary["arms"][arm].values()))  # the first seed
        for j, (key, label) in enumerate(metrics):
            value = a[key] if a[key] is not None else float("nan")
            ci = a.get(f"{key}_interval")
            err = None if not ci or a[key] is None else [[value - ci[0]], [ci[1] - value]]
            style = {"alpha": (1.0, 0.55, 0.3)[j], "edgecolor": "black", "linewidth": 0.4}
            label = label if i == 0 else None
            ax.bar(i + (j - 1) * width, value, width * 0.9, yerr=err, capsize=2, color=ARMS[arm].color, label=label,
                   **style)  # fmt: skip
    if "clock" in summary["arms"]:
        clock = next(iter(summary["arms"]["clock"].values()))["nar"]
        ax.axhline(clock, color=ARMS["clock"].color, ls="--", lw=1, label=f"clock rule NAR {clock:.3f}")
    ax.axhline(0.5, color="grey", ls=":", lw=0.8)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out v1 test split (95% CI)")
    ax.set_title(f"NAR (dark) and tool-call rates per label, n={summary['test_samples']}")
    ax.legend(fontsize=7, loc="upper left")
    if summary["curves"]:
        ax = axes[1]
        for key, points in summary["curves"].items():
            arm = key.rsplit("-seed", 1)[0]
            ax.plot([p["step"] for p in points], [p["nar"] for p in points], marker="o", color=ARMS[arm].color,
                    label=key)  # fmt: skip
        ax.axhline(0.5, color="grey", ls=":", lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"NAR, {summary['settings']['options']['curve_samples']} held-out samples")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_seeds_plot(summary: dict, path: Path) -> None:
    """Several seeds: NAR of every arm and seed with its interval (left), every seed's paired difference (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spread = summary["across_seeds"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    for i, (arm, by_seed) in enumerate(summary["arms"].items()):
        points = sorted(by_seed.items(), key=lambda kv: int(kv[0]))
        for j, (seed, a) in enumerate(points):
            x = i + (j - (len(points) - 1) / 2) * 0.18
            ci = a.get("nar_interval")
            err = None if not ci else [[a["nar"] - ci[0]], [ci[1] - a["nar"]]]
            left.errorbar(x, a["nar"], yerr=err, fmt="o", color=ARMS[arm].color, capsize=3, ms=5)
            left.annotate(f"s{seed}", (x, a["nar"]), textcoords="offset points", xytext=(4, -10), fontsize=6)
        mean = spread["arms"].get(arm, {}).get("mean")
        if mean is not None:
            left.hlines(mean, i - 0.35, i + 0.35, color=ARMS[arm].color, lw=1.5)
    left.axhline(0.5, color="grey", ls=":", lw=0.8)
    left.set_xticks(range(len(summary["arms"])), list(summary["arms"]))
    left.set_ylim(0.3, 1.0)
    left.set_ylabel(f"NAR, held-out v1 test split (n={summary['test_samples']}, 95% CI)")
    left.set_title("NAR per arm: one dot per seed, the bar is the mean")
    names = list(spread["differences"])
    for i, name in enumerate(names):
        c = spread["differences"][name]
        for j, (seed, v, ci) in enumerate(zip(c["seeds"], c["differences"], c["intervals"])):
            if v is None:
                continue
            x = i + (j - (len(c["seeds"]) - 1) / 2) * 0.18
            err = None if not ci else [[v - ci[0]], [ci[1] - v]]
            color = ARMS[name.split(" - ")[0]].color
            right.errorbar(x, v, yerr=err, fmt="s", color=color, capsize=3, ms=5)
            right.annotate(f"s{seed}", (x, v), textcoords="offset points", xytext=(4, -10), fontsize=6)
    right.axhline(0, color="black", lw=0.8)
    right.set_xlim(-0.6, len(names) - 0.4)
    right.set_xticks(range(len(names)), [n.replace(" - ", " -\n") for n in names], fontsize=8)
    right.set_ylabel("paired NAR difference (95% CI)")
    right.set_title("Paired differences on the same samples, per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(summary: dict, out: Path) -> None:
    (out / "real.json").write_text(json.dumps(summary, indent=1))
    (out / "real.md").write_text(markdown_report(summary))
    write_plot(summary, out / "real.png")


def resolve_device(o: RealOptions) -> None:
    """Turn `auto` into what runs (the summary's settings say what did): the device, the evaluation backend and its
    batch size. A GPU asked for and not there, or vLLM asked for and not installed, is refused before any training."""
    import importlib.util

    import torch

    cuda = torch.cuda.is_available()
    if o.device == "cuda" and not cuda:
        raise RecipeError("device=cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False); device=cpu")
    if o.device == "auto":
        o.device = "cuda" if cuda else "cpu"
    vllm = importlib.util.find_spec("vllm") is not None
    if o.eval_backend == "vllm" and not vllm:
        raise RecipeError(
            "eval_backend=vllm: vllm is not installed in this Python (make experiment-real uses .venv-vllm on a "
            "CPU); eval_backend=hf scores with transformers instead"
        )
    if o.eval_backend == "auto":
        o.eval_backend = "vllm" if vllm else "hf"
    if o.eval_batch_size < 0:
        raise RecipeError(f"eval_batch_size must be >= 0, got {o.eval_batch_size}")
    if o.eval_batch_size == 0:
        o.eval_batch_size = 64 if o.device == "cuda" else 8
    logger.info("device %s; held-out evaluation: eval.backend=%s, eval.batch_size=%d", o.device, o.eval_backend,
                o.eval_batch_size)  # fmt: skip


def run_in_parallel(o: RealOptions, units: list, processes: int) -> dict:
    """`parallel=N`: every unit (timealign.experiment.parallel) as its own run under <out>/runs/, merged into <out>."""
    start = time.perf_counter()
    processes = min(processes, len(units))  # no more processes than units
    folders = run_units(o, units, processes, Path(o.out) / "runs")
    summary = merge_runs([str(f) for f in folders], TRAINED, COMPARISONS, o.resamples)
    # what was asked, not the units' own options (one arm and seed each, parallel=1): the command that reruns it
    summary["settings"]["options"].update(out=o.out, arms=o.arms, parallel=o.parallel, merge="")
    summary["settings"]["parallel"] = {
        "processes": processes,
        "units": len(units),
        "seconds_of_the_runs": summary["seconds"],  # each run's own clock, slowed by the sharing
    }
    summary["seconds"] = round(time.perf_counter() - start, 1)
    write_outputs(summary, Path(o.out))
    return summary


# What `rescore=` takes from this invocation; every other option is the rescored run's own.
RESCORE_OWN = ("out", "device", "eval_backend", "eval_batch_size", "resamples", "rescore")


def rescore_run(o: RealOptions) -> dict:
    """`rescore=RUN`: RUN's models scored again on the same held-out samples (this invocation's backend, batch size
    and device), no training; `rescore.agreement` in the summary: per arm and seed, the decisions RUN made alike."""
    from dataclasses import fields, replace

    from timealign.experiment.analysis import machine_info

    start = time.perf_counter()
    folder, original = load_run(o.rescore, "rescore")
    out = Path(o.out)
    if out.resolve() == folder.resolve():
        raise RecipeError(f"rescore: out={o.out} is the run {o.rescore} itself; give a new folder as out=")
    if original["settings"].get("sources") or original["settings"].get("parallel"):
        raise RecipeError(f"rescore: {o.rescore} joins runs made apart (merge= or parallel=): its models are in those "
                          "runs' folders (<out>/runs/<unit> for parallel=); rescore each, then merge= the rescored "
                          "folders")  # fmt: skip
    defaults = RealOptions()
    given = [f.name for f in fields(RealOptions) if f.name not in (*RESCORE_OWN, "data")
             and getattr(o, f.name) != getattr(defaults, f.name)]  # fmt: skip
    if given:
        raise RecipeError(f"rescore: {', '.join(f'{k}={getattr(o, k)}' for k in given)}: a rescored run keeps its "
                          f"own arms, seeds, samples, recipe; give only {', '.join(RESCORE_OWN)}, data")  # fmt: skip
    kept = {k: v for k, v in original["settings"]["options"].items() if k not in RESCORE_OWN}
    kept = {f.name: kept[f.name] for f in fields(RealOptions) if f.name in kept}
    if o.data != defaults.data or not Path(kept.get("data", o.data)).is_dir():
        kept["data"] = o.data  # given, or the run was made on another machine: the same samples are checked below
    opts = replace(o, **{**kept, "timer": False, "overlap": False, "parallel": 1, "merge": ""})
    arms, seeds = comma_choices(opts.arms, tuple(ARMS), "arms"), comma_seeds(opts.seeds)
    experiment = RealExperiment(out, opts, arms, seeds)
    checkpoints = {}
    for seed in seeds:
        for arm in arms:
            if ARMS[arm].trained:
                checkpoint = checkpoints[arm, seed] = folder / "models" / f"{arm}-seed{seed}"
                if not any((checkpoint / name).is_file() for name in ("config.json", "adapter_config.json")):
                    raise RecipeError(f"rescore: {checkpoint}: no trained model there (the run's models "
                                      "are scored from <run>/models/; a run whose models were removed cannot be "
                                      "rescored)")  # fmt: skip
            elif seed == seeds[0]:  # untrained: scored once, standing for every seed (as in the run)
                checkpoints[arm, seed] = experiment.train_arm(arm, seed)[0]
    out.mkdir(parents=True, exist_ok=True)
    reports: dict[str, dict[int, dict]] = {arm: {} for arm in arms}
    runs: dict[str, dict] = {}
    for (arm, seed), checkpoint in checkpoints.items():
        t0 = time.perf_counter()
        reports[arm][seed] = experiment.evaluate_arm(arm, seed, str(checkpoint))
        facts = dict(original.get("runs", {}).get(f"{arm}-seed{seed}") or {"arm": arm, "seed": seed})
        runs[f"{arm}-seed{seed}"] = {**facts, "eval_seconds": round(time.perf_counter() - t0, 1), "eval_cores": None}
        logger.info("%s seed %d rescored: NAR %s", arm, seed, reports[arm][seed]["overall"]["nar"])
    for arm in arms:
        for seed in seeds[1:]:
            if not ARMS[arm].trained:
                reports[arm][seed] = reports[arm][seeds[0]]
                runs[f"{arm}-seed{seed}"] = {"arm": arm, "seed": seed, "same_as_seed": seeds[0]}
    summary = analyse(reports, runs, opts, arms, seeds, experiment.steps)
    before = (original["settings"].get("data") or {}).get("sample_sha256")
    if before != (summary["settings"].get("data") or {}).get("sample_sha256"):
        raise RecipeError(f"rescore: {o.rescore} was scored on other held-out samples than these (settings.data."
                          f"sample_sha256 differs; data={opts.data}): give data= the run's v1 folder")  # fmt: skip
    summary["settings"]["machine"] = machine_info()
    summary["rescore"] = {
        "from": str(folder),
        "eval_backend": original["settings"]["options"].get("eval_backend"),
        "device": original["settings"]["options"].get("device", "cpu"),
        "machine": original["settings"].get("machine"),
        "agreement": agreement(folder, original, summary),
    }
    summary["seconds"] = round(time.perf_counter() - start, 1)
    write_outputs(summary, out)
    return summary


def run(invocation: Invocation) -> int:
    o = invocation.options
    if o.rescore:
        resolve_device(o)
        summary = rescore_run(o)
        print(markdown_report(summary))
        print(f"wrote {Path(o.out) / 'real.json'}, real.md and real.png ({summary['seconds']:.0f} s)")
        return 0
    if o.merge:
        paths = [p.strip() for p in o.merge.split(",") if p.strip()]
        out = Path(o.out).resolve()
        for path in paths:  # the merged real.json, .md and .png must not replace a run's own
            if Path(path).resolve() in (out, out / "real.json"):
                raise RecipeError(f"merge: out={o.out} is the run {path} itself; give a new folder as out=")
        summary = merge_runs(paths, TRAINED, COMPARISONS, o.resamples)
        Path(o.out).mkdir(parents=True, exist_ok=True)
        write_outputs(summary, Path(o.out))
        print(markdown_report(summary))
        print(f"merged {len(paths)} runs into {Path(o.out) / 'real.json'}, real.md and real.png")
        return 0
    arms = comma_choices(o.arms, tuple(ARMS), "arms")
    seeds = comma_seeds(o.seeds)
    for name in ("train_pairs", "batch_pairs", "resamples"):
        if getattr(o, name) < 1:
            raise RecipeError(f"{name} must be >= 1, got {getattr(o, name)}")
    recipe_overrides(o.overrides)  # a malformed one is refused before anything runs (the recipes load in run())
    if not 0 < o.validation_share < 1:
        raise RecipeError(f"validation_share must be in (0, 1), got {o.validation_share}")
    if o.eval_samples < 0 or o.curve_every < 0:
        raise RecipeError("eval_samples and curve_every must be >= 0")
    if o.curve_every and o.curve_samples < 1:
        raise RecipeError(f"curve_samples must be >= 1 with curve_every={o.curve_every} (or curve_every=0: no curve)")
    if not Path(o.data).is_dir():
        raise RecipeError(f"data={o.data}: not a folder; give the TicToc v1 release's data/ folder")
    if o.timer and not Path(o.timelychat_sample).is_file():
        raise RecipeError(f"timelychat_sample={o.timelychat_sample}: no such file (or timer=false)")
    if o.parallel < 0:
        raise RecipeError(f"parallel must be >= 0, got {o.parallel}")
    resolve_device(o)
    units = plan_units(arms, seeds, TRAINED)
    processes = o.parallel or (1 if o.timer else auto_processes(o.device, len(units)))  # auto never refuses
    if processes > 1 and o.timer:
        raise RecipeError("timer=true runs in one process: parallel=1, or the TIMER part on its own (arms=clock "
                          "timer=true)")  # fmt: skip
    if processes > 1:
        summary = run_in_parallel(o, units, processes)
    else:
        summary = RealExperiment(Path(o.out), o, arms, seeds).run()
    print(markdown_report(summary))
    print(f"wrote {Path(o.out) / 'real.json'}, real.md and real.png ({summary['seconds']:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, run)


if __name__ == "__main__":  # the vLLM engine starts a process: the guard is needed
    import sys

    sys.exit(main())
