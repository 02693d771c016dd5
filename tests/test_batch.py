"""One global batch (timealign.train.batch): the arithmetic per world size, its refusals, the schedule warnings, and a
real 2-process DDP run whose steps equal the 1-process run with the same global batch."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import REPO_ROOT, launcher_env

from timealign.config import RecipeError, load_recipe
from timealign.train.batch import optimizer_steps, plan_batch, schedule_warnings

PAPER = ("llama8b", "llama3b", "ministral8b", "qwen3-4b", "qwen3-8b")
CPU = {"training.bf16": "false", "training.use_cpu": "true", "training.report_to": "[none]"}


def _dpo():
    from trl import DPOConfig

    return DPOConfig


def _args(recipe, plan):
    from timealign.train.tracking import training_args

    return training_args(recipe, _dpo(), **plan.training_overrides())


@pytest.mark.parametrize("name", PAPER)
def test_paper_recipes_keep_one_global_batch_on_any_gpu_count(name):
    recipe = load_recipe(name)
    assert recipe.batch.global_size == 16 and "gradient_accumulation_steps" not in recipe.training
    for processes, accumulation in ((1, 16), (2, 8), (4, 4), (8, 2), (16, 1)):
        plan = plan_batch(recipe, _dpo(), processes)
        assert (plan.per_device, plan.processes, plan.accumulation) == (1, processes, accumulation)
        assert plan.per_device * plan.processes * plan.accumulation == 16
    assert (
        plan_batch(recipe, _dpo(), 4).describe()
        == "global batch 16 = 1 per device x 4 processes x 4 accumulation (batch.global_size=16)"
    )


def test_timer3b_global_batch():
    from trl import SFTConfig

    recipe = load_recipe("timer3b")
    assert (
        plan_batch(recipe, SFTConfig, 2).describe()
        == "global batch 16 = 4 per device x 2 processes x 2 accumulation (batch.global_size=16)"
    )
    assert plan_batch(recipe, SFTConfig, 4).accumulation == 1


def test_without_a_global_batch_the_training_values_apply():
    plan = plan_batch(load_recipe("tiny"), _dpo(), 2)  # tiny: 8 per device, 1 accumulation
    assert plan.describe() == (
        "global batch 16 = 8 per device x 2 processes x 1 accumulation "
        "(training.per_device_train_batch_size=8, training.gradient_accumulation_steps=1; "
        "no batch.global_size)"
    )


def test_per_device_batch_chosen_when_unset():
    """No per-device batch given: the largest divisor of the per-process share up to TRL's default (8)."""
    recipe = load_recipe(
        "tiny",
        {
            "batch.global_size": "24",
            "training.per_device_train_batch_size": "null",
            "training.gradient_accumulation_steps": "null",
        },
    )
    assert plan_batch(recipe, _dpo(), 2).describe().startswith("global batch 24 = 6 per device x 2 processes x 2 ")
    assert plan_batch(recipe, _dpo(), 1).describe().startswith("global batch 24 = 8 per device x 1 process x 3 ")


def test_impossible_or_conflicting_batches_are_refused_with_the_arithmetic():
    llama = load_recipe("llama8b")
    with pytest.raises(
        RecipeError,
        match=r"^batch.global_size=16 cannot be split over 3 processes: 16 is not a "
        r"multiple of 3 \(global batch = per device x processes x accumulation\)",
    ):
        plan_batch(llama, _dpo(), 3)
    with pytest.raises(
        RecipeError,
        match=r"over 2 processes is 8 per process, not a multiple of "
        r"training.per_device_train_batch_size=3",
    ):
        plan_batch(load_recipe("llama8b", {"training.per_device_train_batch_size": "3"}), _dpo(), 2)
    with pytest.raises(
        RecipeError,
        match=r"batch.global_size=16 and training.gradient_accumulation_steps=8 disagree "
        r"on 4 processes: 1 per device x 4 x 8 = 32, not 16",
    ):
        plan_batch(load_recipe("llama8b", {"training.gradient_accumulation_steps": "8"}), _dpo(), 4)
    # agreeing values are fine
    agreeing = load_recipe("llama8b", {"training.gradient_accumulation_steps": "4"})
    assert plan_batch(agreeing, _dpo(), 4).accumulation == 4
    with pytest.raises(RecipeError, match=r"batch.global_size=0 must be >= 1"):
        load_recipe("llama8b", {"batch.global_size": "0"})


def test_optimizer_steps_count_as_transformers_does():
    plan = plan_batch(load_recipe("llama8b"), _dpo(), 4)  # 1 x 4 x 4
    assert optimizer_steps(694, plan) == 44  # ceil(694 / 4) = 174 micro-batches per process; ceil(174 / 4) = 44
    assert optimizer_steps(3, plan) == 1


def test_schedule_warnings_for_the_issues_llama8b_on_two_by_eight_gpus():
    """The former llama8b (1 per device x 8 accumulation per GPU) on 2 x 8 GPUs: global batch 128, 694 pairs ->
    ceil(ceil(694 / 16) / 8) = ceil(44 / 8) = 6 steps; logging_steps 10, warmup 0.1 x 6 = 0.6, save_steps 100."""
    old = load_recipe(
        "llama8b",
        {
            **CPU,
            "batch.global_size": "null",
            "training.gradient_accumulation_steps": "8",
            "training.logging_steps": "10",
            "training.save_steps": "100",
        },
    )
    plan = plan_batch(old, _dpo(), 16)
    assert plan.global_size == 128
    found = schedule_warnings(_args(old, plan), 694, plan)
    steps = "694 rows / global batch 128 = 6 optimizer steps per epoch, 6 in all"
    assert found == [
        f"training.logging_steps=10 but {steps}: no loss is logged at all; lower training.logging_steps (e.g. 1) or "
        "batch.global_size",
        f"training.warmup_steps=0.1 is 0.6 of 6 steps ({steps}): transformers rounds it up to 1 step, so there is no "
        "warmup to speak of; lower batch.global_size or drop the warmup",
        f"training.save_steps=100 but {steps}: no checkpoint before the end (a preempted or failed run restarts from "
        "step 0); set training.save_steps below 6",
    ]
    new = load_recipe("llama8b", CPU)  # the shipped recipe on the same 16 GPUs: 16 = 1 x 16 x 1, 44 steps
    plan = plan_batch(new, _dpo(), 16)
    assert schedule_warnings(_args(new, plan), 694, plan) == []
    # An epoch shorter than logging_steps, over several epochs: logged, but not every epoch.
    epochs = load_recipe("tiny", {"training.num_train_epochs": "3", "training.logging_steps": "5"})
    plan = plan_batch(epochs, _dpo(), 1)  # 8 per device: 24 rows -> 3 steps per epoch, 9 in all
    assert schedule_warnings(_args(epochs, plan), 24, plan) == [
        "training.logging_steps=5 but 24 rows / global batch 8 = 3 optimizer steps per epoch, 9 in all: an epoch "
        "ends before a loss is logged; lower training.logging_steps (e.g. 1) or batch.global_size"
    ]


# ---------------------------------------------------------------------------------------------- real runs


def _run(args, env):
    import subprocess

    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    return text


def _losses(out):
    return {e["step"]: e["loss"] for e in json.loads((out / "train_log.json").read_text()) if "loss" in e}


@pytest.mark.slow
def test_same_global_batch_on_one_and_two_processes(tmp_path):
    """batch.global_size=4: one process runs 2 per device x 2 accumulation, two DDP processes (the cluster launcher,
    gloo) 2 per device x 1; the optimizer steps are the same, so are the losses; the arithmetic is logged once, and
    the schedule warning (save_steps beyond the last step) too."""
    from timealign.data.prepared import ensure_prepared

    data = ["data.synthetic_trajectories=8", f"data.prepared_dir={tmp_path / 'prepared'}"]
    ensure_prepared(load_recipe("tiny", dict(a.split("=", 1) for a in data)))
    common = [
        "recipe=tiny",
        *data,
        "batch.global_size=4",
        "training.per_device_train_batch_size=2",
        "training.gradient_accumulation_steps=null",
        "training.max_steps=2",
        "training.logging_steps=1",
        "training.save_strategy=steps",
        "training.save_steps=5",
    ]
    env = launcher_env(TIMEALIGN_CACHE=str(tmp_path / "cache"))
    one = tmp_path / "one"
    text = _run([sys.executable, str(REPO_ROOT / "train/dpo.py"), *common, f"output_dir={one}"], env)
    assert text.count("global batch 4 = 2 per device x 1 process x 2 accumulation (batch.global_size=4)") == 1
    assert text.count("training.save_steps=5 but ") == 1 and "no checkpoint before the end" in text

    two = tmp_path / "two"
    slurm = {
        "SLURM_JOB_ID": "991",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_GPUS_ON_NODE": "2",
        "ACCELERATE_USE_CPU": "true",
    }
    text = _run(
        [sys.executable, "-m", "timealign.cluster", "launch", "task=dpo", *common, f"output_dir={two}"],
        {**env, **slurm},
    )
    assert text.count("global batch 4 = 2 per device x 2 processes x 1 accumulation (batch.global_size=4)") == 1
    assert text.count("training.save_steps=5 but ") == 1  # rank 0 only
    assert json.loads((two / "run_info.json").read_text())["world_size"] == 2
    # the model card states the batch each run trained with, not the recipe's training.* values
    for out, row in (
        (one, "4 pairs per optimizer step = 2 per device x 1 process(es) x 2 accumulation"),
        (two, "4 pairs per optimizer step = 2 per device x 2 process(es) x 1 accumulation"),
    ):
        assert row in (out / "README.md").read_text()
    assert sorted(_losses(two)) == [1, 2]
    assert _losses(two) == pytest.approx(_losses(one), abs=1e-5)
