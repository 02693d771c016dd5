"""Evaluation while training (`timealign.train.live_eval`): the held-out slice scored every N steps by the model in
memory, through the evaluator's own code, logged through the trainer (log_history, W&B), without changing training.

Real runs of the tiny model: the CLI with W&B offline (read back from the `.wandb` file), the same slice scored by
`eval/run.py`'s evaluator on a checkpoint saved at the same step, a TIMER run, and DDP over 2 CPU processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT, free_port, launcher_env, wandb_history

from timealign.config import RecipeError, load_recipe
from timealign.train.live_eval import TICTOC_METRICS

DATA = {"data.synthetic_trajectories": "8"}
TRAIN = {"training.max_steps": "4", "training.logging_steps": "1", "training.per_device_train_batch_size": "2"}
LIVE = {"live_eval.every_steps": "2", "live_eval.max_samples": "6"}


def cli(overrides: dict) -> list[str]:
    return [f"{k}={v}" for k, v in overrides.items()]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return launcher_env()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from timealign.data.pairs import prepare

    out = tmp_path_factory.mktemp("prepared")
    prepare(load_recipe("tiny", DATA).data, out)
    return out


def _run(args, env, timeout=600):
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def live_log(log_history: list[dict], key: str = "eval_live/nar") -> dict[int, float]:
    return {e["step"]: e[key] for e in log_history if key in e}


# --------------------------------------------------------------------------- (a) the CLI: log, W&B, same as eval


def test_curves_in_log_and_wandb_equal_the_evaluator_on_a_saved_checkpoint(tmp_path, env, prepared):
    """train/dpo.py with live_eval.every_steps=2: NAR at steps 0, 2, 4 in train_log.json and in the offline W&B run;
    checkpoint-2 scored by eval/run.py's evaluator on the same slice gives the same NAR and the same outputs."""
    from timealign.eval.runner import evaluate

    out = tmp_path / "run"
    overrides = {
        **DATA,
        **TRAIN,
        **LIVE,
        "data.prepared_dir": prepared,
        "output_dir": out,
        "training.report_to": "[wandb]",
        "training.save_strategy": "steps",
        "training.save_steps": "2",
    }
    _run(
        [sys.executable, str(REPO_ROOT / "train/dpo.py"), "recipe=tiny", *cli(overrides)],
        {**env, "WANDB_DIR": str(tmp_path)},
    )

    log = json.loads((out / "train_log.json").read_text())
    nar = live_log(log)
    assert sorted(nar) == [0, 2, 4]  # at_start, every 2 steps; the last step is step 4 (scored once)
    assert all(live_log(log, "eval_live/samples")[s] == 6 for s in nar)
    assert sorted(live_log(log, "loss")) == [1, 2, 3, 4]  # training's own log keeps every step

    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    history = wandb_history(run_dir)
    curve = {row["train/global_step"]: row["eval/live/nar"] for row in history if "eval/live/nar" in row}
    assert curve == nar
    rates = {
        row["train/global_step"]: row["eval/live/attempt_rate_prefer_tool"]
        for row in history
        if "eval/live/attempt_rate_prefer_tool" in row
    }
    assert rates == live_log(log, "eval_live/attempt_rate_prefer_tool")

    recipe = load_recipe(
        "tiny",
        {
            **DATA,
            "data.prepared_dir": str(prepared),
            "output_dir": str(out),
            "eval.max_samples": LIVE["live_eval.max_samples"],
        },
    )
    outputs = {}
    for step in (2, 4):
        report = evaluate(recipe, str(out / f"checkpoint-{step}"), ["tictoc"], tmp_path / f"eval-{step}")["tictoc"]
        live = json.loads((out / "live_eval" / f"step-{step:06d}.json").read_text())
        assert report["overall"]["nar"] == nar[step]
        for key in TICTOC_METRICS:  # the logged metrics, as the evaluator reports them
            assert report["overall"][key] == live["overall"][key], key
        outputs[step] = [s["output"] for s in report["samples"]]
        assert outputs[step] == [s["output"] for s in live["samples"]]
        assert [s["id"] for s in report["samples"]] == [s["id"] for s in live["samples"]]
    start = [s["output"] for s in json.loads((out / "live_eval" / "step-000000.json").read_text())["samples"]]
    assert start != outputs[4]  # the evaluation sees the weights as they are trained


# ----------------------------------------------------------------------------- (b) training is left unchanged


def _train_in_process(tmp_path: Path, prepared: Path, name: str, **extra):
    from timealign.train import dpo

    recipe = load_recipe(
        "tiny",
        {
            **DATA,
            **TRAIN,
            "training.max_steps": "3",
            "data.prepared_dir": str(prepared),
            "output_dir": str(tmp_path / name),
            **extra,
        },
    )
    trainer = dpo.build_trainer(recipe, claim=False)
    trainer.train()
    return trainer


def test_enabled_and_disabled_train_identical_weights(tmp_path, prepared):
    """LoRA dropout kept on (TRL turns dropout off for DPO unless training.disable_dropout=false), so training draws
    random numbers every step, and sampling at evaluation (eval.temperature > 0: the backend seeds torch): without
    the saved and restored random states the dropout masks after an evaluation differ (the losses of steps 2-3 did,
    measured). The adapter being trained is what generates (PEFT)."""
    lora = {"lora.enabled": "true", "lora.dropout": "0.3", "training.disable_dropout": "false"}
    off = _train_in_process(tmp_path, prepared, "off", **lora)
    on = _train_in_process(
        tmp_path,
        prepared,
        "on",
        **lora,
        **{"live_eval.every_steps": "1", "live_eval.max_samples": "4", "eval.temperature": "0.7"},
    )
    assert sorted(live_log(on.state.log_history)) == [0, 1, 2, 3] and not live_log(off.state.log_history)
    assert live_log(on.state.log_history, "loss") == live_log(off.state.log_history, "loss")
    weights_off, weights_on = off.model.state_dict(), on.model.state_dict()
    assert weights_off.keys() == weights_on.keys()
    for key, value in weights_off.items():
        assert torch.equal(value, weights_on[key]), key
    assert on.model.training  # back in train mode
    assert on.processing_class.padding_side == off.processing_class.padding_side  # the backend used a copy


def test_bad_settings_are_refused(prepared):
    from datasets import DatasetDict

    from timealign.data.pairs import load_prepared
    from timealign.train.live_eval import heldout_slice

    with pytest.raises(RecipeError, match="live_eval.every_steps=-1 must be >= 0"):
        load_recipe("tiny", {"live_eval.every_steps": "-1"})
    with pytest.raises(RecipeError, match="live_eval.max_samples=0 must be >= 1"):
        load_recipe("tiny", {"live_eval.max_samples": "0"})
    recipe = load_recipe("tiny", {**DATA, **LIVE})
    data = load_prepared(prepared)
    from timealign.data.sampling import sample_pairs

    # eval/run.py's rows for eval.max_samples=6: the seeded sample stratified by label, both labels in it
    assert heldout_slice(recipe, data) == sample_pairs(data["test"].to_list(), 6, recipe.data.seed)[0]
    assert {r["label"] for r in heldout_slice(recipe, data)} == {"prefer_tool", "prefer_no_tool"}
    with pytest.raises(RecipeError, match=r"data.eval_split='test', which the prepared data lacks \(has: train\)"):
        heldout_slice(recipe, DatasetDict(train=data["train"]))


# --------------------------------------------------------------------------------------------- (c) TIMER SFT


def test_timer_run_logs_delay_f1_and_rmsle_curves(tmp_path):
    """tiny-timer with live_eval: the TimelyChat timing metrics at every step; the last one equals the TimelyChat
    evaluator on the saved checkpoint (loaded from disk, rendered from its saved recipe) on the same dialogs."""
    from timealign.backends.hf import HFBackend
    from timealign.data.prepared import prepared_dir_for
    from timealign.data.timelychat import TimerDialog
    from timealign.data.timer_prep import load_timer_prepared
    from timealign.suites.timelychat.turn_level import evaluate_timelychat
    from timealign.train import sft

    recipe = load_recipe(
        "tiny-timer",
        {
            "timer.synthetic_dialogs": "16",
            "timer.synthetic_eval_dialogs": "4",
            "training.max_steps": "2",
            "training.logging_steps": "1",
            "training.per_device_train_batch_size": "4",
            "live_eval.every_steps": "1",
            "live_eval.max_samples": "3",
            "output_dir": str(tmp_path / "timer"),
        },
    )
    out = sft.run(recipe)
    log = json.loads((out / "train_log.json").read_text())
    for key in ("delay_f1_all_turns", "rmsle_all_turns", "rmsle", "bleu2", "rouge_l"):
        assert sorted(live_log(log, f"eval_live/{key}")) == [0, 1, 2], key
    assert all(v == 3 for v in live_log(log, "eval_live/dialogs").values())
    last = next(e for e in reversed(log) if "eval_live/rmsle" in e)

    from timealign.data.sampling import sample_dialogs

    held_out = load_timer_prepared(prepared_dir_for(recipe))[recipe.data.eval_split].to_list()
    rows = sample_dialogs(held_out, 3, recipe.data.seed)[0]  # the slice: live_eval.max_samples=3
    report = evaluate_timelychat(HFBackend(str(out)), [TimerDialog.from_row(r) for r in rows])
    o = report["overall"]
    assert o["rmsle_target"] == last["eval_live/rmsle"] and o["rmsle"] == last["eval_live/rmsle_all_turns"]
    assert o["f1"] == last["eval_live/delay_f1_all_turns"] and o["bleu2"] == last["eval_live/bleu2"]
    saved = json.loads((out / "live_eval" / "step-000002.json").read_text())
    assert [s["response"] for s in saved["samples"]] == [s["response"] for s in report["samples"]]


# ------------------------------------------------------------------------------------------- (d) DDP, 2 processes

SPY = """
import os, sys
from timealign.train import live_eval
from timealign.train.dpo import main

score = live_eval.LiveEvalCallback._score

def counted(self, step):  # the real evaluation, recording which rank ran it
    with open(os.path.join(os.environ["LIVE_EVAL_SPY"], "rank" + os.environ["RANK"]), "a") as fh:
        fh.write(f"{step}\\n")
    return score(self, step)

live_eval.LiveEvalCallback._score = counted
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ddp_two_processes_only_rank0_evaluates(tmp_path, env, prepared):
    script, spy, out = tmp_path / "spy.py", tmp_path / "spy", tmp_path / "ddp"
    script.write_text(SPY)
    spy.mkdir()
    overrides = {
        **DATA,
        **TRAIN,
        **LIVE,
        "data.prepared_dir": prepared,
        "output_dir": out,
        "training.per_device_train_batch_size": "1",
    }
    _run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(REPO_ROOT / "recipes/accelerate/ddp.yaml"),
            "--num_processes",
            "2",
            "--main_process_port",
            str(free_port()),
            str(script),
            "recipe=tiny",
            *cli(overrides),
        ],
        {**env, "ACCELERATE_USE_CPU": "true", "LIVE_EVAL_SPY": str(spy)},
    )
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 2 and info["model_wrapper"] == "DistributedDataParallel"
    assert sorted(p.name for p in spy.iterdir()) == ["rank0"]  # rank 1 waited
    assert (spy / "rank0").read_text().split() == ["0", "2", "4"]
    log = json.loads((out / "train_log.json").read_text())
    assert sorted(live_log(log)) == [0, 2, 4] and sorted(live_log(log, "loss")) == [1, 2, 3, 4]


@pytest.mark.slow
def test_zero3_every_rank_generates(tmp_path, env, prepared):
    """DeepSpeed ZeRO-3 shards the parameters, so every forward needs every rank: both ranks run the evaluation in
    step (synced_gpus) instead of deadlocking, and the main process's metrics are logged."""
    pytest.importorskip("deepspeed", reason="DeepSpeed not installed (pip install -e '.[deepspeed]')")
    script, spy, out = tmp_path / "spy.py", tmp_path / "spy", tmp_path / "zero3"
    script.write_text(SPY)
    spy.mkdir()
    overrides = {
        **DATA,
        **TRAIN,
        **LIVE,
        "data.prepared_dir": prepared,
        "output_dir": out,
        "training.per_device_train_batch_size": "1",
        "launch.accelerate_config": "zero3",
    }
    # No ACCELERATE_USE_CPU: with it accelerate builds a MULTI_CPU state and drops DeepSpeed (test_cluster.py).
    _run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(REPO_ROOT / "recipes/accelerate/zero3.yaml"),
            "--num_processes",
            "2",
            "--main_process_port",
            str(free_port()),
            str(script),
            "recipe=tiny",
            *cli(overrides),
        ],
        {**env, "LIVE_EVAL_SPY": str(spy)},
    )
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 2 and info["zero_stage"] == 3
    assert [(spy / f"rank{r}").read_text().split() for r in (0, 1)] == [["0", "2", "4"]] * 2
    log = json.loads((out / "train_log.json").read_text())
    assert sorted(live_log(log)) == [0, 2, 4] and sorted(live_log(log, "loss")) == [1, 2, 3, 4]
