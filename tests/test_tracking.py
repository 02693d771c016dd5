"""W&B names: runs named after what the command line changed, one project rule for training and eval, eval runs in
the group of the training run they score, INFO logs from rank 0 only.

The end-to-end test trains and evaluates the tiny model with the real wandb in offline mode and reads the runs back
from their `.wandb` files (wandb's record log: LevelDB-style blocks of protobuf `Record`s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, run_of

from timealign.config import load_recipe
from timealign.config.cli import launcher_rank
from timealign.config.tracking import (
    TRAINING_RUN_FILE,
    run_name,
    training_run_of,
    wandb_entity,
    wandb_project,
)


def test_run_name_from_the_overrides_that_change_training():
    bookkeeping = {
        "output_dir": "x",
        "training.report_to": "[wandb]",
        "training.resume_from_checkpoint": "auto",
        "data.prepared_dir": "p",
        "launch.check": "warn",
        "wandb.tags": "[a]",
    }
    recipe = load_recipe("tiny", {"training.learning_rate": "1e-5", "training.beta": "0.2", **bookkeeping})
    assert run_name(recipe) == "tiny:lr=1e-5,beta=0.2"
    assert run_name(load_recipe("tiny")) == "tiny"
    assert run_name(load_recipe("tiny", {"output_dir": "elsewhere"})) == "tiny"
    assert run_name(load_recipe("tiny", {"training.beta": "0.2", "wandb.name": "mine"})) == "mine"
    both_seeds = load_recipe("tiny", {"data.seed": "1", "training.seed": "2", "lora.enabled": "true"})
    assert run_name(both_seeds) == "tiny:data.seed=1,training.seed=2,enabled=true"  # ambiguous short keys stay long
    v1 = load_recipe("tiny", {"data.source": "v1", "data.path": str(REPO_ROOT.parent / "shared/data/tictoc-v1")})
    assert run_name(v1) == "tiny:source=v1,path=tictoc-v1"  # no absolute path in a run name
    long = run_name(load_recipe("tiny", {"data.synthetic_trajectories": "1" * 200}))
    assert len(long) == 128 and long.startswith("tiny:synthetic_trajectories=111") and long.endswith("...")


def test_one_project_rule_for_training_and_eval():
    recipe = load_recipe("tiny", {"wandb.entity": "team"})
    assert wandb_project(recipe, env={}) == "timealign-tiny" and wandb_entity(recipe, env={}) == "team"
    env = {"WANDB_PROJECT": "from-env", "WANDB_ENTITY": "me"}
    assert wandb_project(recipe, env=env) == "from-env" and wandb_entity(recipe, env=env) == "me"


def test_training_run_recorded_in_the_checkpoint_folder(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoint-3").mkdir(parents=True)
    assert training_run_of(out) is None and training_run_of("meta-llama/Llama-3.1-8B") is None
    record = {"id": "abc123", "name": "tiny:lr=1", "group": "tiny:lr=1 (abc123)", "project": "p", "entity": None}
    (out / TRAINING_RUN_FILE).write_text(json.dumps(record))
    assert training_run_of(out) == record
    assert training_run_of(out / "checkpoint-3") == record  # an intermediate checkpoint: the run around it
    (out / TRAINING_RUN_FILE).write_text("{")
    with pytest.raises(ValueError, match="wandb_run.json: not valid JSON"):
        training_run_of(out)


def test_rank_from_the_launcher_environment():
    assert launcher_rank({}) == 0
    assert launcher_rank({"RANK": "1", "LOCAL_RANK": "1"}) == 1
    assert launcher_rank({"RANK": "0", "LOCAL_RANK": "0"}) == 0
    assert launcher_rank({"LOCAL_RANK": "3"}) == 3  # mpirun / a launcher that sets only the local rank
    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "2"}) == 2
    assert launcher_rank({"SLURM_PROCID": "1"}) == 0  # an srun task is a launcher (one per node), not a rank


# ---------------------------------------------------------------------------------------------- real W&B (offline)


@pytest.mark.slow
def test_training_and_eval_runs_named_grouped_in_one_project(tmp_path):
    """WANDB_PROJECT set: training and eval both go there; the training run is named after the overrides; the eval
    run of its checkpoint joins its group."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "SLURM_", "WANDB_RUN"))}
    env.update(
        HF_HUB_OFFLINE="1",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path),
        WANDB_PROJECT="shared-project",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        TIMEALIGN_CACHE=str(tmp_path / "cache"),
    )
    out = tmp_path / "run"
    data = ["data.synthetic_trajectories=8"]
    train = [
        sys.executable,
        str(REPO_ROOT / "train/dpo.py"),
        "recipe=tiny",
        "training.learning_rate=1e-5",
        "training.beta=0.2",
        "training.max_steps=1",
        f"output_dir={out}",
        "training.report_to=[wandb]",
        "training.save_strategy=no",
        *data,
    ]
    proc = subprocess.run(train, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    trained = run_of(run_dir)
    name = "tiny:lr=1e-5,beta=0.2,steps=1,synthetic_trajectories=8"
    assert trained == {
        "id": trained["id"],
        "project": "shared-project",
        "name": name,
        "group": f"{name} ({trained['id']})",
        "job_type": "dpo",
    }
    assert json.loads((out / TRAINING_RUN_FILE).read_text()) == {
        "id": trained["id"],
        "name": name,
        "group": trained["group"],
        "project": "shared-project",
        "entity": None,
    }

    evaluate = [
        sys.executable,
        str(REPO_ROOT / "eval/run.py"),
        "recipe=tiny",
        f"checkpoint={out}",
        f"output_dir={out}",
        "suites=tictoc",
        "wandb=true",
        "eval.max_samples=4",
        f"out={tmp_path / 'eval'}",
        *data,
    ]
    proc = subprocess.run(evaluate, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (eval_dir,) = set((tmp_path / "wandb").glob("offline-run-*")) - {run_dir}
    scored = run_of(eval_dir)
    data = json.loads((tmp_path / "eval" / "tictoc.json").read_text())["data"]
    # named by checkpoint folder, suite, data and run number: short, no absolute path, one per evaluation
    assert data["source"] == "synthetic" and data["split"] == "test" and data["samples"] == 4
    assert scored == {
        "id": scored["id"],
        "project": "shared-project",
        "name": f"eval:run:tictoc@synthetic-test-{data['fingerprint'][:8]}#001",
        "group": trained["group"],
        "job_type": "eval",
    }
