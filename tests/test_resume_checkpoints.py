"""Resume picks the newest checkpoint that loads completely (timealign/train/checkpoints.py `checkpoint_problem`).

A real tiny offset-DPO run saves checkpoint-2 and checkpoint-4; its newest checkpoint is then corrupted by hand the
way a kill during the save leaves it (half a weights file; a truncated trainer_state.json) and the same command is
run again: it warns about checkpoint-4, resumes from checkpoint-2 and ends with the very weights and losses of the
uninterrupted run. Each file resume needs is then corrupted in turn on a copy of a real checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from timealign.config import RecipeError
from timealign.config.tracking import RUN_INFO_FILE, TRAIN_LOG
from timealign.render.checkpoint import CHECKPOINT_RECIPE
from timealign.train import checkpoints, resume

TRAIN = [
    "recipe=tiny",
    "training.max_steps=4",
    "training.save_strategy=steps",
    "training.save_steps=2",
    "training.logging_steps=1",
    "training.per_device_train_batch_size=2",
    "training.max_length=512",
    "data.synthetic_trajectories=8",
    "training.resume_from_checkpoint=auto",
]


def _train(output_dir: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train/dpo.py"), *TRAIN, f"output_dir={output_dir}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _losses(output_dir: Path) -> dict[int, float]:
    log = json.loads((output_dir / TRAIN_LOG).read_text())
    return {entry["step"]: entry["loss"] for entry in log if "loss" in entry}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "TIMEALIGN_CACHE": str(tmp_path_factory.mktemp("cache")),
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory, env) -> Path:
    """The uninterrupted run: 4 steps, checkpoints at 2 and 4."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    _train(out, env)
    assert [p.name for p in checkpoints.checkpoint_folders(out)] == ["checkpoint-2", "checkpoint-4"]
    assert checkpoints.checkpoint_problem(out / "checkpoint-4") is None
    return out


def _half(path: Path) -> int:
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return size


CORRUPTIONS = {
    "half-weights": (
        "model.safetensors",
        lambda size: f"model.safetensors is truncated ({size // 2} of {size} bytes)",
    ),
    "torn-trainer-state": ("trainer_state.json", lambda size: "trainer_state.json does not parse"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_corrupt_newest_checkpoint_is_skipped_and_the_run_resumes_from_the_older(kind, trained, env, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    for name in ("model.safetensors", RUN_INFO_FILE, TRAIN_LOG):  # killed while saving step 4
        (out / name).unlink()
    name, reason = CORRUPTIONS[kind]
    size = _half(out / "checkpoint-4" / name)

    proc = _train(out, env)
    warning = f"skipping checkpoint {out / 'checkpoint-4'}: {reason(size)}"
    assert warning in proc.stderr, proc.stderr[-5000:]
    assert f"resuming from the older {out / 'checkpoint-2'} instead" in proc.stderr
    info = json.loads((out / RUN_INFO_FILE).read_text())
    assert info["resumed_from"] == str(out / "checkpoint-2") and info["global_step"] == 4
    # Steps 3 and 4 repeated exactly: the losses and the final weights of the uninterrupted run.
    assert _losses(out) == _losses(trained) and sorted(_losses(out)) == [1, 2, 3, 4]
    assert _sha(out / "model.safetensors") == _sha(trained / "model.safetensors")
    assert checkpoints.checkpoint_problem(out / "checkpoint-4") is None  # rewritten whole by the resumed run


# Each file that resume reads, broken the way a kill or a full disk leaves it -> the reason given.
def _truncate(name):
    return lambda ckpt: os.truncate(ckpt / name, (ckpt / name).stat().st_size // 2)


def _append(name):
    def damage(ckpt):
        with open(ckpt / name, "ab") as fh:
            fh.write(b"\0" * 16)

    return damage


def _remove(name):
    return lambda ckpt: (ckpt / name).unlink()


def _garbage_header(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[:8] + b"\xff" * 16 + data[24:])


BREAKS = [
    ("weights-truncated", _truncate("model.safetensors"), "model.safetensors is truncated ("),
    ("weights-too-long", _append("model.safetensors"), "model.safetensors is longer than its header says"),
    ("weights-header", _garbage_header, "model.safetensors has no readable safetensors header"),
    ("weights-missing", _remove("model.safetensors"), "no weights file"),
    ("optimizer-truncated", _truncate("optimizer.pt"), "optimizer.pt is not a complete torch file"),
    ("optimizer-missing", _remove("optimizer.pt"), "no optimizer state (optimizer.pt)"),
    ("scheduler-truncated", _truncate("scheduler.pt"), "scheduler.pt is not a complete torch file"),
    ("scheduler-missing", _remove("scheduler.pt"), "no scheduler.pt"),
    ("rng-truncated", _truncate("rng_state.pth"), "rng_state.pth is not a complete torch file"),
    ("rng-missing", _remove("rng_state.pth"), "no rng_state.pth"),
    ("state-truncated", _truncate("trainer_state.json"), "trainer_state.json does not parse"),
    ("state-missing", _remove("trainer_state.json"), "no trainer_state.json"),
    ("config-truncated", _truncate("config.json"), "config.json does not parse"),
]


@pytest.mark.parametrize("case, damage, reason", BREAKS, ids=[b[0] for b in BREAKS])
def test_each_broken_file_is_named(case, damage, reason, trained, tmp_path, caplog):
    out = tmp_path / "run"
    for step in (2, 4):
        shutil.copytree(trained / f"checkpoint-{step}", out / f"checkpoint-{step}")
    damage(out / "checkpoint-4")
    assert reason in checkpoints.checkpoint_problem(out / "checkpoint-4")
    with caplog.at_level(logging.WARNING, logger="timealign.train"):
        assert resume.resolve_resume("auto", out) == str(out / "checkpoint-2")
    assert f"skipping checkpoint {out / 'checkpoint-4'}: {reason}" in caplog.text
    if case != "state-missing":  # an explicit path is the user's call, but never a broken one
        with pytest.raises(RecipeError, match=r"does not load completely: .*Use auto"):
            resume.resolve_resume(str(out / "checkpoint-4"), out)
    assert [p.name for p in checkpoints.checkpoints(out)] == ["checkpoint-2"]


def test_no_complete_checkpoint_starts_fresh_with_a_warning(trained, tmp_path, caplog):
    out = tmp_path / "run"
    shutil.copytree(trained / "checkpoint-2", out / "checkpoint-2")
    _half(out / "checkpoint-2" / "optimizer.pt")
    with caplog.at_level(logging.WARNING, logger="timealign.train"):
        assert resume.resolve_resume("auto", out) is None
    assert "none of the 1 checkpoints" in caplog.text and "starting fresh" in caplog.text


def test_a_sharded_checkpoint_is_checked_shard_by_shard(trained, tmp_path):
    """model.safetensors.index.json (large models): every shard it lists must be there and whole."""
    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "checkpoint-4"
    shutil.copytree(trained / "checkpoint-4", ckpt)
    tensors = load_file(str(ckpt / "model.safetensors"))
    (ckpt / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(ckpt / shard), metadata={"format": "pt"})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert checkpoints.checkpoint_problem(ckpt) is None
    _half(ckpt / "model-00002-of-00002.safetensors")
    assert "model-00002-of-00002.safetensors is truncated" in checkpoints.checkpoint_problem(ckpt)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    assert "lists model-00002-of-00002.safetensors, which is missing" in checkpoints.checkpoint_problem(ckpt)


def test_a_torn_recipe_snapshot_does_not_block_resume(trained, tmp_path, caplog):
    """The recipe copy is written atomically now; an old torn one is reported, not read as a different recipe."""
    from timealign.config import load_recipe

    ckpt = tmp_path / "checkpoint-4"
    shutil.copytree(trained / "checkpoint-4", ckpt)
    (ckpt / CHECKPOINT_RECIPE).write_text("name: tiny\ndata: {source: synth")
    with caplog.at_level(logging.WARNING, logger="timealign.train"):
        resume.check_resume_compatible(load_recipe("tiny"), ckpt)
    assert "does not parse" in caplog.text


# -- a checkpoint must fit the recipe's model: architecture, parameter names and shapes, safe torch files -----------


def _model(trained: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(trained)


def _gpt2_checkpoint(trained: Path, folder: Path) -> Path:
    """A complete GPT-2 checkpoint (its weights and config; the trainer files of the real run beside them)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=64)).save_pretrained(folder)
    for name in ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        shutil.copy2(trained / "checkpoint-2" / name, folder / name)
    return folder


def test_a_checkpoint_of_another_architecture_or_shape_does_not_fit(trained, tmp_path):
    from safetensors.torch import load_file, save_file

    model = _model(trained)
    ckpt = tmp_path / "checkpoint-2"
    shutil.copytree(trained / "checkpoint-2", ckpt)
    assert checkpoints.checkpoint_model_problem(model, ckpt) is None

    gpt2 = _gpt2_checkpoint(trained, tmp_path / "gpt2")
    assert checkpoints.checkpoint_problem(gpt2) is None  # it loads completely: only the model check tells
    assert checkpoints.checkpoint_model_problem(model, gpt2).startswith(
        "it holds a 'gpt2' model (GPT2LMHeadModel), this recipe trains a 'llama' model"
    )
    tensors = load_file(str(ckpt / "model.safetensors"))
    name = "model.layers.0.mlp.gate_proj.weight"
    rows, cols = tensors[name].shape
    wider = dict(tensors, **{name: torch_zeros(rows * 2, cols)})
    save_file(wider, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    assert checkpoints.checkpoint_model_problem(model, ckpt) == (
        f"parameters of other shapes: {name} [{rows * 2}, {cols}] (checkpoint) vs [{rows}, {cols}] (model)"
    )
    save_file(
        {k: v for k, v in tensors.items() if k != name}, str(ckpt / "model.safetensors"), metadata={"format": "pt"}
    )
    assert checkpoints.checkpoint_model_problem(model, ckpt) == f"it lacks parameters of this model: {name}"
    save_file(
        {**tensors, "model.extra.weight": tensors[name].clone()},
        str(ckpt / "model.safetensors"),
        metadata={"format": "pt"},
    )
    assert (
        checkpoints.checkpoint_model_problem(model, ckpt)
        == "it has parameters this model does not: model.extra.weight"
    )


def torch_zeros(*shape):
    import torch

    return torch.zeros(*shape)


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_torch_file_is_refused_in_one_line_without_running_it(trained, tmp_path):
    import torch

    model = _model(trained)
    ckpt = tmp_path / "checkpoint-2"
    shutil.copytree(trained / "checkpoint-2", ckpt)
    (ckpt / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"model.embed_tokens.weight": _RunsCode(marker)}, ckpt / "pytorch_model.bin")
    assert checkpoints.checkpoint_problem(ckpt) is None  # a whole archive
    problem = checkpoints.checkpoint_model_problem(model, ckpt)
    assert problem.startswith("pytorch_model.bin is not a plain tensor file: torch's weights-only loader refuses it")
    assert "\n" not in problem and not marker.exists()


def test_resuming_from_another_architectures_checkpoint_stops_with_one_line(trained, env, tmp_path):
    """The issue's case: training.resume_from_checkpoint=a GPT-2 folder for the (Llama) tiny recipe: exit 2, one
    line naming the checkpoint and why, instead of training on from the base weights."""
    gpt2 = _gpt2_checkpoint(trained, tmp_path / "gpt2")
    out = tmp_path / "run"
    args = [*TRAIN[:-1], f"training.resume_from_checkpoint={gpt2}", f"output_dir={out}"]
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train/dpo.py"), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: training.resume_from_checkpoint={gpt2}: {gpt2} does not fit this recipe's model: it holds a 'gpt2' "
        "model (GPT2LMHeadModel), this recipe trains a 'llama' model"
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and not (out / "model.safetensors").exists()


def test_an_explicit_path_of_another_model_setup_is_refused(trained, tmp_path, caplog):
    from timealign.config import load_recipe

    model = _model(trained)
    ckpt = trained / "checkpoint-2"
    same = load_recipe("tiny", {k: v for k, v in (a.split("=", 1) for a in TRAIN[1:])})
    same.training["resume_from_checkpoint"] = str(ckpt)
    resume.check_checkpoint_fits(same, model, ckpt, explicit=True)
    changed = load_recipe(
        "tiny", {**{k: v for k, v in (a.split("=", 1) for a in TRAIN[1:])}, "training.learning_rate": "1e-6"}
    )
    with caplog.at_level(logging.WARNING, logger="timealign.train"):
        resume.check_checkpoint_fits(changed, model, ckpt, explicit=True)  # a hyperparameter: the user's call
    assert "trained with other settings: training.learning_rate" in caplog.text
    other = load_recipe("tiny", {**{k: v for k, v in (a.split("=", 1) for a in TRAIN[1:])}, "lora.enabled": "true"})
    with pytest.raises(RecipeError, match="was trained with another model setup \\(lora.enabled: False -> True"):
        resume.check_checkpoint_fits(other, model, ckpt, explicit=True)
