"""Issue 21: a checkpoint is evaluated on what it was trained for, every report names its data, and a capped sample
keeps its metrics defined. End to end on the real releases: TicToc v1 (prepare -> train `tiny` -> live eval in an
offline W&B run -> `eval/run.py checkpoint=DIR` without recipe= -> compare -> model card) and the TimelyChat sample
(train `tiny-timer` -> evaluate without recipe= -> compare two checkpoints -> model card).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, launcher_env, run_of, wandb_history, wandb_records

from timealign.data.sampling import sample_pairs
from timealign.suites.tictoc.metrics import summarize

TRAIN = ["training.max_steps=2", "training.per_device_train_batch_size=2", "training.logging_steps=1"]


def _run(args: list, cwd: Path, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def py(script: str, *args) -> list:
    return [sys.executable, str(REPO_ROOT / script), *args]


def wandb_config(run_dir: Path) -> dict:
    """The config an offline run was started with (its `run` record), decoded."""
    (run,) = [r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run"]
    return {item.key: json.loads(item.value_json) for item in run.config.update}


# ------------------------------------------------------------------------------------------ sampling (item 2)


@pytest.fixture(scope="module")
def v1_test_rows(tictoc_v1_dir, tmp_path_factory) -> list[dict]:
    from timealign.config import load_recipe
    from timealign.data.pairs import load_prepared, prepare

    out = tmp_path_factory.mktemp("v1-pairs")
    prepare(load_recipe("tiny", {"data.source": "v1", "data.path": str(tictoc_v1_dir)}).data, out)
    return load_prepared(out)["test"].to_list()


def test_first_rows_of_v1_test_hold_one_label_the_sample_both(v1_test_rows):
    """The v1 test split starts with 97 prefer-noTool pairs: its first 64 rows (the old eval.max_samples=64) leave
    NAR undefined. The stratified sample holds both labels, so NAR is defined, for every max_samples >= 8."""
    first = v1_test_rows[:64]
    assert {r["label"] for r in first} == {"prefer_no_tool"}
    assert summarize([r["label"] for r in first], [False] * 64)["nar"] is None
    for n in [*range(8, 80), 100, 200, 400, 684]:
        rows, info = sample_pairs(v1_test_rows, n, seed=0)
        assert len(rows) == n and info["sampling"] == "stratified"
        assert summarize([r["label"] for r in rows], [False] * n)["nar"] == 0.5, n  # defined: both labels
    rows, info = sample_pairs(v1_test_rows, 64, seed=0)
    # proportional by label (97 / 685 prefer-noTool), spread over the scenarios
    assert info["by_label"] == {"prefer_no_tool": 10, "prefer_tool": 54}
    assert len({r["scenario"] for r in rows}) == len({r["scenario"] for r in v1_test_rows})


def test_sample_is_the_same_whatever_the_row_order_and_grows_by_adding(v1_test_rows):
    """Keyed by (seed, sample id), not by position: a shuffled split gives the same sample (so two checkpoints' reports
    pair by id), a larger cap adds rows without dropping any, another seed draws other rows."""
    import random

    key = lambda rows: {(r["id"], r["elapse_level"]) for r in rows}  # noqa: E731
    shuffled = list(v1_test_rows)
    random.Random(1).shuffle(shuffled)
    assert key(sample_pairs(v1_test_rows, 32, 0)[0]) == key(sample_pairs(shuffled, 32, 0)[0])
    assert key(sample_pairs(v1_test_rows, 16, 0)[0]) <= key(sample_pairs(v1_test_rows, 17, 0)[0])
    assert key(sample_pairs(v1_test_rows, 32, 0)[0]) != key(sample_pairs(v1_test_rows, 32, 1)[0])
    rows = sample_pairs(v1_test_rows, 32, 0)[0]
    order = {(r["id"], r["elapse_level"]): i for i, r in enumerate(v1_test_rows)}
    assert [order[(r["id"], r["elapse_level"])] for r in rows] == sorted(
        order[(r["id"], r["elapse_level"])] for r in rows
    )  # the split's order


# ------------------------------------------------------------------------------ end to end on TicToc v1 (item 8)


def test_v1_prepare_train_live_eval_evaluate_compare_card(tictoc_v1_dir, tmp_path):
    env = launcher_env()
    prepared, out, work = tmp_path / "v1-pairs", tmp_path / "tiny-v1", tmp_path / "elsewhere"
    work.mkdir()
    data = ["data.source=v1", f"data.path={tictoc_v1_dir}", f"data.prepared_dir={prepared}"]
    _run(py("data_prep/tictoc.py", "recipe=tiny", *data[:2], f"out={prepared}"), REPO_ROOT, env)
    manifest = json.loads((prepared / "manifest.json").read_text())
    fingerprint = manifest["fingerprint"]["sha256"]

    # Train a few steps with the live-eval curve on an 8-pair slice, W&B offline.
    _run(
        py(
            "train/dpo.py",
            "recipe=tiny",
            *data,
            f"output_dir={out}",
            *TRAIN,
            "data.overlength=truncate_prompt_or_drop",
            "live_eval.every_steps=2",
            "live_eval.max_samples=8",
            "training.report_to=[wandb]",
        ),
        REPO_ROOT,
        {**env, "WANDB_DIR": str(tmp_path / "train-wandb")},
    )
    (train_run,) = (tmp_path / "train-wandb" / "wandb").glob("offline-run-*")
    assert "/" not in run_of(train_run)["name"].split(":", 1)[1].replace("source=v1", "")  # no absolute path
    curve = {
        row["train/global_step"]: row["eval/live/nar"] for row in wandb_history(train_run) if "eval/live/nar" in row
    }
    assert sorted(curve) == [0, 2] and all(v is not None for v in curve.values())  # defined at 8 samples
    live = json.loads((out / "live_eval" / "step-000002.json").read_text())
    assert live["data"]["by_label"] == {"prefer_no_tool": 2, "prefer_tool": 6} and live["data"]["source"] == "v1"

    # Evaluate the checkpoint with no recipe=, from another folder: the v1 test split, not synthetic pairs.
    eval_env = {**env, "WANDB_DIR": str(tmp_path / "eval-wandb")}
    (tmp_path / "eval-wandb").mkdir()
    proc = _run(py("eval/run.py", f"checkpoint={out}", "eval.max_samples=8", "wandb=true"), work, eval_env)
    assert not (work / "outputs").exists()  # nothing prepared under the current folder
    report = json.loads((out / "eval" / "tictoc.json").read_text())
    ident = report["data"]
    assert {k: ident[k] for k in ("source", "path", "split", "samples", "fingerprint", "sampling")} == {
        "source": "v1",
        "path": str(tictoc_v1_dir),
        "split": "test",
        "samples": 8,
        "fingerprint": fingerprint,
        "sampling": "stratified",
    }
    assert "differs_from_training" not in ident and report["overall"]["nar"] is not None
    # the same 8 pairs live evaluation scored
    assert sorted(s["id"] for s in report["samples"]) == sorted(s["id"] for s in live["samples"])
    label = f"v1 tictoc-v1/test n=8 [{fingerprint[:12]}]"
    assert ident["label"] == label and label in (out / "eval" / "report.md").read_text()
    assert f"tictoc: {label}" in proc.stdout
    assert json.loads((out / "eval" / "runs" / "001" / "run.json").read_text())["data"]["tictoc"] == ident
    _run(py("eval/run.py", f"checkpoint={out}", "eval.max_samples=8", "wandb=true"), work, eval_env)
    names = {}
    for run_dir in (tmp_path / "eval-wandb" / "wandb").glob("offline-run-*"):
        names[run_of(run_dir)["name"]] = wandb_config(run_dir)
    tag = f"tictoc@v1-test-{fingerprint[:8]}"
    assert set(names) == {f"eval:tiny-v1:{tag}#001", f"eval:tiny-v1:{tag}#002"}  # short, one per evaluation
    assert names[f"eval:tiny-v1:{tag}#001"]["data"]["tictoc"]["fingerprint"] == fingerprint

    # The base model on the same recipe keys: the same sample, so compare pairs it; the data named on both sides.
    _run(
        py(
            "eval/run.py",
            "recipe=tiny",
            *data,
            "eval.max_samples=8",
            f"output_dir={tmp_path / 'base-out'}",
            f"out={tmp_path / 'base'}",
        ),
        work,
        env,
    )
    proc = _run(py("eval/compare.py", f"before={tmp_path / 'base'}", f"after={out / 'eval'}"), work, env)
    assert f"data: {label} -> {label}" in proc.stdout and "DIFFERENT DATA" not in proc.stdout
    assert "paired bootstrap: 1000 resamples of the 8 held-out pairs" in proc.stdout

    # A synthetic evaluation of the same checkpoint (recipe= wins) says how it differs from the training data ...
    proc = _run(
        py(
            "eval/run.py",
            "recipe=tiny",
            f"checkpoint={out}",
            "eval.max_samples=8",
            f"output_dir={tmp_path / 'synth-out'}",
            f"out={out / 'eval-synthetic'}",
        ),
        work,
        env,
    )
    synthetic = json.loads((out / "eval-synthetic" / "tictoc.json").read_text())["data"]
    assert "data.source: v1 (trained) -> synthetic (evaluated)" in synthetic["differs_from_training"]
    assert "data.source: v1 (trained) -> synthetic (evaluated)" in proc.stderr
    # ... and the model card keeps it a row of its own, labelled by its data, after the training data's rows.
    _run(
        [sys.executable, "-m", "timealign.train.model_card", f"checkpoint={out}", f"eval={tmp_path / 'base'}"],
        REPO_ROOT,
        env,
    )
    card = (out / "README.md").read_text()
    nar = [line for line in card.splitlines() if line.startswith("| tictoc | nar |")]
    assert len(nar) == 3
    assert f"| {label} (the training data's held-out split) | this model | `eval` |" in nar[0]
    assert any(f"| {label} (the training data's held-out split) | tiny |" in line for line in nar[:2])
    assert "(not the training data) | this model | `eval-synthetic` |" in nar[2] and "synthetic test n=8" in nar[2]

    # The evaluations joined the run's record of written files, so overwrite_output_dir=true removes them with the
    # run's other files instead of refusing the folder.
    written = json.loads((out / "timealign_run.json").read_text())["written"]
    assert {"eval/tictoc.json", "eval/report.md", "eval-synthetic/tictoc.json"} <= set(written)
    _run(
        py(
            "train/dpo.py",
            "recipe=tiny",
            *data,
            f"output_dir={out}",
            *TRAIN,
            "data.overlength=truncate_prompt_or_drop",
            "overwrite_output_dir=true",
        ),
        REPO_ROOT,
        env,
    )
    assert not (out / "eval" / "tictoc.json").exists() and not (out / "eval-synthetic" / "tictoc.json").exists()


# ------------------------------------------------------------------------- end to end on TimelyChat (item 8)


def test_timer_sample_train_evaluate_compare_card(timelychat_sample, tmp_path):
    """tiny-timer on the six real TimelyChat dialogs (one file: all of them the train split, which the recipe also
    names its held-out split). eval/run.py checkpoint=DIR alone scores that split, names the data, and says the
    dialogs were trained on; checkpoint-1 and the final model pair in compare; the card names the data."""
    env = launcher_env()
    out, work = tmp_path / "timer", tmp_path / "elsewhere"
    work.mkdir()
    _run(
        py(
            "train/sft.py",
            "recipe=tiny-timer",
            "data.source=timelychat",
            f"data.path={timelychat_sample}",
            "data.eval_split=train",
            f"output_dir={out}",
            *TRAIN,
            "training.save_strategy=steps",
            "training.save_steps=1",
        ),
        REPO_ROOT,
        env,
    )
    (prepared,) = (out / "data").glob("dialogs-*")
    fingerprint = json.loads((prepared / "manifest.json").read_text())["fingerprint"]["sha256"]
    fast = ["timelychat.response_max_new_tokens=6", "timelychat.interval_max_new_tokens=6"]
    for checkpoint in (out / "checkpoint-1", out):
        proc = _run(py("eval/run.py", f"checkpoint={checkpoint}", *fast), work, env)  # suites: timelychat (sft)
    assert not (work / "outputs").exists()
    report = json.loads((out / "eval" / "timelychat.json").read_text())
    ident = report["data"]
    assert {k: ident[k] for k in ("source", "path", "split", "samples", "fingerprint")} == {
        "source": "timelychat",
        "path": str(timelychat_sample),
        "split": "train",
        "samples": 6,
        "fingerprint": fingerprint,
    }
    label = f"timelychat eval.jsonl/train n=6 [{fingerprint[:12]}]"
    assert ident["label"] == label and f"timelychat: {label}" in proc.stdout
    assert any("6 of 6 evaluated dialogs are in the training split 'train'" in n for n in report["notes"])
    assert "the samples were trained on" in " ".join(ident["differs_from_training"])
    assert "in the training split 'train'" in proc.stderr  # the overlap is a logged warning
    assert report["overall"]["target_f1"] is not None
    proc = _run(
        py("eval/compare.py", f"before={out / 'checkpoint-1' / 'eval'}", f"after={out / 'eval'}", "suite=timelychat"),
        work,
        env,
    )
    assert f"data: {label} -> {label}" in proc.stdout and "paired bootstrap" in proc.stdout
    _run([sys.executable, "-m", "timealign.train.model_card", f"checkpoint={out}"], REPO_ROOT, env)
    card = (out / "README.md").read_text()
    assert f"| {label} (the training data's held-out split) | this model | `eval` |" in card
    # An explicit file still overrides the recipe's data (timelychat.data=), named as such.
    _run(
        py(
            "eval/run.py",
            f"checkpoint={out}",
            *fast,
            f"timelychat.data={timelychat_sample}",
            "timelychat.n=3",
            f"out={tmp_path / 'explicit'}",
        ),
        work,
        env,
    )
    explicit = json.loads((tmp_path / "explicit" / "timelychat.json").read_text())
    assert explicit["data"]["source"] == "timelychat.data" and explicit["data"]["samples"] == 3
    assert explicit["data"]["from_recipe"] is False


# ------------------------------------------------------------------------------------------------ bad input


def test_eval_without_recipe_needs_a_checkpoint_that_carries_one(tmp_path, capsys):
    """No recipe=: the checkpoint's saved recipe, refused in one line (exit 2) when the folder has none."""
    from timealign.eval.runner import main

    assert main([f"checkpoint={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint={tmp_path} holds no timealign_recipe.yaml" in err and "recipe=NAME" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["eval.max_samples=8"]) == 2  # neither a checkpoint nor a recipe
    assert "recipe= needs a name" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "Without recipe=, checkpoint=DIR is scored with the recipe it was trained with" in " ".join(
        capsys.readouterr().out.split()
    )
