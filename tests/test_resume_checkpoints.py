"""Resume picks the newest checkpoint that loads completely (timealign/train/resume.py `checkpoint_problem`).

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

from conftest import REPO_ROOT
from timealign.config import RecipeError
from timealign.train import resume

TRAIN = ["recipe=tiny", "training.max_steps=4", "training.save_strategy=steps", "training.save_steps=2",
         "training.logging_steps=1", "training.per_device_train_batch_size=2", "training.max_length=512",
         "data.synthetic_trajectories=8", "training.resume_from_checkpoint=auto"]


def _train(output_dir: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "train/dpo.py"), *TRAIN, f"output_dir={output_dir}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _losses(output_dir: Path) -> dict[int, float]:
    log = json.loads((output_dir / resume.TRAIN_LOG).read_text())
    return {entry["step"]: entry["loss"] for entry in log if "loss" in entry}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "offline",
            "OMP_NUM_THREADS": "1", "TIMEALIGN_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, env) -> Path:
    """The uninterrupted run: 4 steps, checkpoints at 2 and 4."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    _train(out, env)
    assert [p.name for p in resume.checkpoint_folders(out)] == ["checkpoint-2", "checkpoint-4"]
    assert resume.checkpoint_problem(out / "checkpoint-4") is None
    return out


def _half(path: Path) -> int:
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return size


CORRUPTIONS = {
    "half-weights": ("model.safetensors", lambda size: f"model.safetensors is truncated ({size // 2} of {size} bytes)"),
    "torn-trainer-state": ("trainer_state.json", lambda size: "trainer_state.json does not parse"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_corrupt_newest_checkpoint_is_skipped_and_the_run_resumes_from_the_older(kind, trained, env, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    for name in ("model.safetensors", resume.RUN_INFO_FILE, resume.TRAIN_LOG):  # killed while saving step 4
        (out / name).unlink()
    name, reason = CORRUPTIONS[kind]
    size = _half(out / "checkpoint-4" / name)

    proc = _train(out, env)
    warning = f"skipping checkpoint {out / 'checkpoint-4'}: {reason(size)}"
    assert warning in proc.stderr, proc.stderr[-5000:]
    assert f"resuming from the older {out / 'checkpoint-2'} instead" in proc.stderr
    info = json.loads((out / resume.RUN_INFO_FILE).read_text())
    assert info["resumed_from"] == str(out / "checkpoint-2") and info["global_step"] == 4
    # Steps 3 and 4 repeated exactly: the losses and the final weights of the uninterrupted run.
    assert _losses(out) == _losses(trained) and sorted(_losses(out)) == [1, 2, 3, 4]
    assert _sha(out / "model.safetensors") == _sha(trained / "model.safetensors")
    assert resume.checkpoint_problem(out / "checkpoint-4") is None  # rewritten whole by the resumed run


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
    assert reason in resume.checkpoint_problem(out / "checkpoint-4")
    with caplog.at_level(logging.WARNING, logger="timealign.train.resume"):
        assert resume.resolve_resume("auto", out) == str(out / "checkpoint-2")
    assert f"skipping checkpoint {out / 'checkpoint-4'}: {reason}" in caplog.text
    if case != "state-missing":  # an explicit path is the user's call, but never a broken one
        with pytest.raises(RecipeError, match=r"does not load completely: .*Use auto"):
            resume.resolve_resume(str(out / "checkpoint-4"), out)
    assert [p.name for p in resume.checkpoints(out)] == ["checkpoint-2"]


def test_no_complete_checkpoint_starts_fresh_with_a_warning(trained, tmp_path, caplog):
    out = tmp_path / "run"
    shutil.copytree(trained / "checkpoint-2", out / "checkpoint-2")
    _half(out / "checkpoint-2" / "optimizer.pt")
    with caplog.at_level(logging.WARNING, logger="timealign.train.resume"):
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
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(ckpt / shard), metadata={"format": "pt"})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert resume.checkpoint_problem(ckpt) is None
    _half(ckpt / "model-00002-of-00002.safetensors")
    assert "model-00002-of-00002.safetensors is truncated" in resume.checkpoint_problem(ckpt)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    assert "lists model-00002-of-00002.safetensors, which is missing" in resume.checkpoint_problem(ckpt)


def test_a_torn_recipe_snapshot_does_not_block_resume(trained, tmp_path, caplog):
    """The recipe copy is written atomically now; an old torn one is reported, not read as a different recipe."""
    from timealign.config import load_recipe

    ckpt = tmp_path / "checkpoint-4"
    shutil.copytree(trained / "checkpoint-4", ckpt)
    (ckpt / resume.CHECKPOINT_RECIPE).write_text("name: tiny\ndata: {source: synth")
    with caplog.at_level(logging.WARNING, logger="timealign.train.resume"):
        resume.check_resume_compatible(load_recipe("tiny"), ckpt)
    assert "does not parse" in caplog.text
