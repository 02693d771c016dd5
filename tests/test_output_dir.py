"""An output folder belongs to one run: a rerun resumes it or says it is finished; another run stops, before any
work, naming each difference, unless overwrite_output_dir=true replaces it. The saved recipe describes what trained.

The end-to-end tests run the real entry points (`python train/dpo.py`, `python train/sft.py`) on the tiny model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT

from timealign.config import load_recipe
from timealign.config.written import WRITTEN, card_may_replace, record_files
from timealign.data.fingerprint import data_fingerprint
from timealign.train.card_facts import ModelCardError
from timealign.train.model_card import write_model_card
from timealign.train.output_dir import RUN_FILE, AlreadyTrained, OutputDirInUse, claim_output_dir

DATA = "data.synthetic_trajectories=8"
FAST = ["training.per_device_train_batch_size=2", "training.logging_steps=1"]


def train(
    out: Path, *overrides: str, script: str = "train/dpo.py", recipe: str = "tiny"
) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / script), f"recipe={recipe}", f"output_dir={out}", *overrides],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_another_run_stops_before_any_work_and_overwrite_replaces_it(tmp_path):
    out = tmp_path / "run"
    ok(train(out, DATA, "training.max_steps=1", *FAST))
    first_weights = sha(out / "model.safetensors")
    before = snapshot(out)

    proc = train(out, "data.synthetic_trajectories=6", "training.max_steps=1", "training.learning_rate=1e-4", *FAST)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: {out} holds another training run (recipe 'tiny'" in proc.stderr
    assert "  data.synthetic_trajectories: 8 (saved) -> 6 (now)" in proc.stderr
    assert "  training.learning_rate: 0.0005 (saved) -> 0.0001 (now)" in proc.stderr
    assert "overwrite_output_dir=true deletes the files it recorded writing (checkpoints, model, logs)" in proc.stderr
    assert "data.synthetic_trajectories=8 training.learning_rate=0.0005" in proc.stderr  # how to go on with it
    assert snapshot(out) == before  # nothing prepared, trained or written
    written = json.loads((out / RUN_FILE).read_text())[WRITTEN]
    assert {
        "model.safetensors",
        "README.md",
        "timealign_recipe.yaml",
        "training_args.bin",
        "lengths.json",
        "train_log.json",
        "run_info.json",
    } <= set(written)
    (out / "results.json").write_text('{"mine": 1}')  # the user's own file, beside the run's
    readme = out / "README.md"
    readme.write_text(readme.read_text() + "my notes\n")  # edited since the run wrote it: the user's now

    ok(
        train(
            out,
            "data.synthetic_trajectories=6",
            "training.max_steps=1",
            "training.learning_rate=1e-4",
            *FAST,
            "overwrite_output_dir=true",
        )
    )
    # The saved recipe, the run record and the data actually rendered for training all say: 6 trajectories.
    saved = yaml.safe_load((out / "timealign_recipe.yaml").read_text())
    assert saved["data"]["synthetic_trajectories"] == 6 and saved["training"]["learning_rate"] == 1e-4
    recipe = load_recipe("tiny", {"data.synthetic_trajectories": "6"})
    claim = json.loads((out / RUN_FILE).read_text())
    assert claim["data_fingerprint"]["sha256"] == data_fingerprint("pairs", recipe.data).sha256
    assert json.loads((out / "lengths.json").read_text())["train"]["pairs"] == 3 * 6
    assert sha(out / "model.safetensors") != first_weights
    assert len(list((out / "data").glob("pairs-*"))) == 2  # both prepared folders kept, each under its fingerprint
    assert (out / "results.json").read_text() == '{"mine": 1}'
    assert readme.read_text().endswith("my notes\n")  # neither deleted nor replaced by the new run's card


def test_same_settings_rerun_says_finished_and_a_longer_one_resumes(tmp_path):
    out = tmp_path / "run"
    common = [DATA, *FAST, "training.save_strategy=steps", "training.save_steps=1"]
    ok(train(out, *common, "training.max_steps=2"))
    weights = sha(out / "model.safetensors")
    proc = ok(train(out, *common, "training.max_steps=2"))
    assert f"{out} holds this run's finished model (same recipe and data): nothing to train" in proc.stderr
    assert sha(out / "model.safetensors") == weights and not (out / "checkpoint-3").exists()

    ok(train(out, *common, "training.max_steps=3", "training.resume_from_checkpoint=auto"))
    info = json.loads((out / "run_info.json").read_text())
    assert info["resumed_from"] == str(out / "checkpoint-2") and info["global_step"] == 3
    log = json.loads((out / "train_log.json").read_text())
    assert [e["step"] for e in log if "loss" in e] == [1, 2, 3]


def test_sft_refuses_another_run_too(tmp_path):
    out = tmp_path / "timer"
    small = [
        "timer.synthetic_dialogs=8",
        "timer.synthetic_eval_dialogs=4",
        "training.max_steps=1",
        "training.per_device_train_batch_size=4",
    ]
    ok(train(out, *small, script="train/sft.py", recipe="tiny-timer"))
    proc = train(out, *small, "timer.lambda_time=0", script="train/sft.py", recipe="tiny-timer")
    assert proc.returncode == 2 and "  timer.lambda_time: 1.0 (saved) -> 0.0 (now)" in proc.stderr


# -- the folder check alone (claim_output_dir), on folders laid out as training leaves them ----------------------


def recipe_for(out: Path, **overrides):
    return load_recipe(
        "tiny",
        {"output_dir": str(out), "data.synthetic_trajectories": "8", **{k: str(v) for k, v in overrides.items()}},
    )


def leave_trained_run(out: Path, recipe, *, claim: bool = True, final: bool = True) -> None:
    """What a trained run leaves: its record, a checkpoint with its recipe, the final model and recipe."""
    text = yaml.safe_dump(recipe.to_dict(), sort_keys=False)
    if claim:
        claim_output_dir(recipe)
    (out / "checkpoint-1").mkdir(parents=True)
    (out / "checkpoint-1" / "timealign_recipe.yaml").write_text(text)
    if final:
        (out / "model.safetensors").write_bytes(b"weights")
        (out / "timealign_recipe.yaml").write_text(text)
    if claim:  # what the run's WrittenFiles records as it trains
        record_files(out, [p for p in out.rglob("*") if p.is_file() and p.name != RUN_FILE])


def test_a_run_from_before_the_record_is_not_resumed(tmp_path):
    out = tmp_path / "run"
    leave_trained_run(out, recipe_for(out), claim=False)
    with pytest.raises(
        OutputDirInUse,
        match=f"without {RUN_FILE}: it comes from an older timealign or from "
        "elsewhere, so which data it was trained on is not recorded",
    ):
        claim_output_dir(recipe_for(out))
    with pytest.raises(OutputDirInUse, match=r"data.seed: 0 \(saved\) -> 3 \(now\)"):
        claim_output_dir(recipe_for(out, **{"data.seed": 3}))


def test_overwrite_deletes_only_what_the_run_recorded(tmp_path, caplog):
    out = tmp_path / "run"
    leave_trained_run(out, recipe_for(out))
    for kept in ("data/pairs-0123456789ab/manifest.json", "eval-base/report.json", "notes.org"):
        (out / kept).parent.mkdir(parents=True, exist_ok=True)
        (out / kept).write_text("{}")
    (out / "eval").mkdir()
    (out / "eval" / "mine.json").write_text("{}")  # not recorded: it would mix with the next run's evaluations
    before = snapshot(out)
    replace = recipe_for(out, overwrite_output_dir="true", **{"data.seed": 3})
    with pytest.raises(
        OutputDirInUse,
        match=r"also holds files no timealign run recorded writing \(or changed "
        r"since\): eval/mine.json.*move them out of the folder",
    ):
        claim_output_dir(replace)
    assert snapshot(out) == before  # nothing deleted
    (out / "eval" / "mine.json").rename(tmp_path / "mine.json")
    with caplog.at_level(logging.WARNING, logger="timealign.train.output_dir"):
        assert claim_output_dir(replace).state == "replaced"
    assert sorted(p.name for p in out.iterdir()) == ["data", "eval", "eval-base", "notes.org", RUN_FILE]
    assert list((out / "eval").iterdir()) == []  # the user's (empty) folder stays
    assert "left in" in caplog.text and "notes.org" in caplog.text
    assert json.loads((out / RUN_FILE).read_text())[WRITTEN] == {}

    older = tmp_path / "older"  # trained without a record of its files: nothing is deleted
    leave_trained_run(older, recipe_for(older), claim=False)
    before = snapshot(older)
    with pytest.raises(
        OutputDirInUse, match="no record says which files it wrote, so overwrite_output_dir=true deletes nothing there"
    ):
        claim_output_dir(recipe_for(older, overwrite_output_dir="true", **{"data.seed": 3}))
    assert snapshot(older) == before

    checkout = tmp_path / "checkout"
    leave_trained_run(checkout, recipe_for(checkout))
    (checkout / ".git").mkdir()
    with pytest.raises(OutputDirInUse, match="is a git checkout: overwrite_output_dir=true deletes nothing there"):
        claim_output_dir(recipe_for(checkout, overwrite_output_dir="true", **{"data.seed": 3}))
    assert (checkout / "model.safetensors").is_file()


USERS_FILES = {
    "results.json": "{}",
    "paper.txt": "draft",
    "config.yaml": "a: 1",
    "eval/mine.json": "{}",
    "README.md": "# my project\n",
}


def users_folder(folder: Path) -> Path:
    for name, text in USERS_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_a_folder_no_run_owns_is_refused_and_nothing_in_it_changes(tmp_path):
    """The issue's folder: the user's results, paper, config, an eval report and a README; output_dir=it."""
    out = users_folder(tmp_path / "mine")
    before = snapshot(out)
    for overwrite in ("false", "true"):
        with pytest.raises(OutputDirInUse) as err:
            claim_output_dir(recipe_for(out, overwrite_output_dir=overwrite))
        message = str(err.value)
        assert (
            message.startswith(
                f"output_dir={out} already holds files that no timealign run wrote (README.md, "
                "config.yaml, eval, paper.txt, results.json)"
            )
            and "\n" not in message
        )
        assert message.endswith("Choose an empty or new folder: output_dir=NEW_FOLDER")
    assert snapshot(out) == before
    (tmp_path / "prepared" / "data").mkdir(parents=True)  # only prepared data in it: a folder training may use
    assert claim_output_dir(recipe_for(tmp_path / "prepared")).state == "fresh"


def test_the_training_command_refuses_a_users_folder_before_any_work(tmp_path):
    out = users_folder(tmp_path / "mine")
    before = snapshot(out)
    proc = train(out, DATA, "training.max_steps=1", "overwrite_output_dir=true", *FAST)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: output_dir={out} already holds files that no timealign run wrote" in proc.stderr
    assert snapshot(out) == before


def test_the_model_card_never_replaces_a_readme_timealign_did_not_write(tmp_path):
    out = tmp_path / "run"
    recipe = recipe_for(out)
    leave_trained_run(out, recipe)
    card = write_model_card(out, recipe)  # no README.md yet: written, and rewritten (it is timealign's)
    assert card_may_replace(card) and write_model_card(out, recipe) == card
    card.write_text("# my own notes\n")
    assert not card_may_replace(card)
    with pytest.raises(ModelCardError, match=f"{card} was not written by timealign: the model card does not replace"):
        write_model_card(out, recipe)
    assert card.read_text() == "# my own notes\n"
    record_files(out, [card])  # recorded as written by the run (e.g. PEFT's card, before timealign's replaced it)
    assert card_may_replace(card)


def test_a_claim_that_trained_nothing_is_taken_over(tmp_path):
    out = tmp_path / "run"
    claim_output_dir(recipe_for(out))  # that run stopped before its first checkpoint (say, bad data)
    claim = claim_output_dir(recipe_for(out, **{"data.margin_prefer_tool": 2.0}))
    assert claim.state == "fresh"
    record = json.loads((out / RUN_FILE).read_text())
    assert record["recipe"]["data"]["margin_prefer_tool"] == 2.0


def test_changed_source_files_are_another_run(tmp_path):
    source = tmp_path / "v1"
    source.mkdir()
    (source / "preferTool_elapse_2.json").write_text("[]")
    out = tmp_path / "run"
    recipe = load_recipe("tiny", {"output_dir": str(out), "data.source": "v1", "data.path": str(source)})
    leave_trained_run(out, recipe)
    (source / "preferTool_elapse_2.json").write_text("[ ]")
    with pytest.raises(OutputDirInUse, match=r"data.path file preferTool_elapse_2.json: content changed") as err:
        claim_output_dir(recipe)
    assert "go on with that run" not in str(err.value)  # no recipe values bring the old files back


def test_same_run_unfinished_goes_on_and_warns_when_resume_is_unset(tmp_path, caplog):
    out = tmp_path / "run"
    leave_trained_run(out, recipe_for(out), final=False)
    with caplog.at_level(logging.WARNING, logger="timealign.train.output_dir"):
        assert claim_output_dir(recipe_for(out)).state == "same"
    assert "holds checkpoints of this same run (newest checkpoint-1)" in caplog.text
    assert "training.resume_from_checkpoint=auto continues it" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="timealign.train.output_dir"):
        recipe = recipe_for(out, **{"training.resume_from_checkpoint": "auto", "training.max_steps": 9})
        assert claim_output_dir(recipe).state == "same"  # max_steps may change on a resume
    assert not caplog.text
    with pytest.raises(OutputDirInUse, match=r"training.beta: 0.1 \(saved\) -> 0.2 \(now\)"):
        claim_output_dir(recipe_for(out, **{"training.beta": 0.2, "overwrite_output_dir": "false"}))


def test_finished_run_and_training_it_again(tmp_path):
    out = tmp_path / "run"
    leave_trained_run(out, recipe_for(out))
    with pytest.raises(AlreadyTrained, match="nothing to train"):
        claim_output_dir(recipe_for(out))
    # training.resume_from_checkpoint=false: the same run again, here; nothing deleted
    assert claim_output_dir(recipe_for(out, **{"training.resume_from_checkpoint": "false"})).state == "same"
    assert (out / "checkpoint-1").is_dir()
    # a longer run of the same recipe is not finished
    assert claim_output_dir(recipe_for(out, **{"training.max_steps": 5})).state == "same"
    # overwrite_output_dir=true on the finished run: deleted and trained anew
    assert claim_output_dir(recipe_for(out, overwrite_output_dir="true")).state == "replaced"
    assert not (out / "checkpoint-1").exists() and not (out / "model.safetensors").exists()
