"""Run provenance for W&B and `run_info.json`: git commit, data fingerprint, SLURM job, the resolved recipe.

`setup_wandb` starts the W&B run itself (main process only) before `trainer.train()`, with the names of
`timealign.config.tracking` (shared with eval): project WANDB_PROJECT else wandb.project, a run name built from the
command line's overrides (`tiny:lr=1e-5,beta=0.2`) unless wandb.name is set, and a group `NAME (ID)` that the
evaluations of its checkpoints join. Tags carry the recipe, the data fingerprint and the git commit; the full
resolved recipe is the config. TRL/transformers' `WandbCallback` then finds the run open and adds the training
arguments to it. The run's id, name, group and project go to `<output_dir>/wandb_run.json`; a run resumed from a
checkpoint continues the same W&B run. `WANDB_MODE=offline` works as usual (`wandb sync` later).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import subprocess
from pathlib import Path

from timealign.config import REPO_ROOT, RecipeError
from timealign.config.secrets import export_hub_token, redact, training_fields
from timealign.config.tracking import (
    TRAINING_RUN_FILE,
    run_group,
    run_name,
    wandb_entity,
    wandb_project,
)

logger = logging.getLogger("timealign.train.tracking")

SLURM_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NNODES",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_PARTITION",
    "SLURM_RESTART_COUNT",
    "SLURM_ARRAY_TASK_ID",
)


def git_revision(root: str | Path = REPO_ROOT) -> dict:
    """{"commit": full sha or "unknown", "dirty": bool | None} of the checkout that runs the code."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    try:
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"commit": commit, "dirty": dirty}


def data_fingerprint(prepared_dir: str | Path | None) -> str | None:
    """sha256 (first 12 hex) of the prepared dataset's Arrow files and settings: equal data, equal fingerprint."""
    if prepared_dir is None:
        return None
    root = Path(prepared_dir)
    files = sorted(p for p in root.rglob("*.arrow") if p.is_file())
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def slurm_info(env=None) -> dict:
    env = os.environ if env is None else env
    return {key[len("SLURM_") :].lower(): env[key] for key in SLURM_KEYS if key in env}


def wandb_tags(recipe, fingerprint: str | None, git: dict) -> list[str]:
    """recipe name, task, data fingerprint, git commit (+ "-dirty"), then the recipe's own wandb.tags."""
    commit = git.get("commit", "unknown")
    tags = [
        recipe.name,
        f"task:{recipe.task}",
        f"data:{fingerprint or 'unknown'}",
        f"git:{commit[:12]}{'-dirty' if git.get('dirty') else ''}",
    ]
    tags += [str(t) for t in (recipe.wandb.tags or [])]
    seen: list[str] = []
    for tag in tags:
        tag = tag[:64]  # W&B's limit per tag
        if tag and tag not in seen:
            seen.append(tag)
    return seen


def run_provenance(recipe, data_dir) -> dict:
    return {"git": git_revision(), "data_fingerprint": data_fingerprint(data_dir), "slurm": slurm_info()}


def _training_run(output_dir: Path, resuming: bool) -> dict:
    """The recorded run when resuming (the W&B run continues), else a fresh id; WANDB_RUN_ID wins."""
    path = output_dir / TRAINING_RUN_FILE
    record = json.loads(path.read_text()) if resuming and path.is_file() else {}
    chosen = os.environ.get("WANDB_RUN_ID")
    if chosen and record.get("id") != chosen:
        record = {"id": chosen}
    if not record.get("id"):
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        record = {"id": "".join(secrets.choice(alphabet) for _ in range(8))}  # W&B's own id format
    return record


def setup_wandb(trainer, recipe, *, provenance: dict, resume_from: str | None) -> str | None:
    """Open the W&B run on the main process when `training.report_to` has wandb; returns its id (else None)."""
    report_to = trainer.args.report_to or []
    if "wandb" not in report_to or not trainer.is_world_process_zero():
        return None
    import wandb

    output_dir = Path(trainer.args.output_dir)
    record = _training_run(output_dir, resuming=resume_from is not None)
    run_id = record["id"]
    name = record.get("name") or run_name(recipe)
    record.update(
        name=name,
        group=record.get("group") or run_group(name, run_id),
        project=wandb_project(recipe),
        entity=wandb_entity(recipe),
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / TRAINING_RUN_FILE).write_text(json.dumps(record, indent=1) + "\n")
    config = redact(
        {
            "timealign": recipe.to_dict(),
            "overrides": getattr(recipe, "overrides", {}),
            "git": provenance["git"],
            "data_fingerprint": provenance["data_fingerprint"],
            "slurm": provenance["slurm"],
            "resumed_from": resume_from,
        }
    )
    if wandb.run is not None and wandb.run.id != run_id:
        wandb.finish()
    if wandb.run is None:
        wandb.init(
            project=record["project"],
            entity=record["entity"],
            name=name,
            group=record["group"],
            id=run_id,
            resume="allow",
            job_type=recipe.task,
            tags=wandb_tags(recipe, provenance["data_fingerprint"], provenance["git"]),
            config=config,
        )
    logger.info("W&B run %s %r (project %s, group %r)", run_id, name, record["project"], record["group"])
    return run_id


def finish_wandb(summary: dict | None = None) -> None:
    """Close the W&B run opened by `setup_wandb` (no-op when none is open)."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    for key, value in (summary or {}).items():
        wandb.run.summary[key] = value
    wandb.finish()


def training_args(recipe, config_cls, **overrides):
    """TRL's config (DPOConfig / SFTConfig) from the recipe's `training` section, with the W&B run's name, and
    `overrides` on top (the per-device batch and accumulation of `timealign.train.batch.plan_batch`). The W&B
    project is set where the run is opened (`setup_wandb`), not in the environment: one process may train several
    recipes (timealign.experiment), and an exported WANDB_PROJECT must stay the user's."""
    # no hub_token: the Trainer pickles these args into training_args.bin
    training = {**training_fields(recipe), **overrides}
    export_hub_token(recipe)
    training.setdefault("run_name", run_name(recipe))
    try:
        return config_cls(output_dir=recipe.resolved_output_dir(), **training)
    except ValueError as err:  # transformers' own checks of the values (bf16 without a GPU, strategies, ...)
        message = " ".join(str(err).split())
        hint = ""
        if "bf16" in message and "bf16" not in recipe.training:
            hint = (
                " (training.bf16 is TRL's default true: set training.bf16=false, and on a machine without a GPU "
                "also training.use_cpu=true, as recipes/tiny.yaml does)"
            )
        raise RecipeError(
            f"training: {config_cls.__name__} refuses the recipe's training settings: {message}{hint}"
        ) from None
