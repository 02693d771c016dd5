"""Shared fixtures: the locally built tiny model, offline settings, and the optional ../shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from needs import shared_path

# Tests never reach the hub and never upload runs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def launcher_env(**extra: str) -> dict[str, str]:
    """This environment for a child training process: offline, unbuffered, one OpenMP thread, and none of the
    Slurm / accelerate / stop-file / W&B-run variables that would make it join or resume something else."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "ACCELERATE_", "TIMEALIGN_STOP", "WANDB_RUN_ID"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        WANDB_MODE="offline",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        **extra,
    )
    return env


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight tiny Llama + offline tokenizer, built once per test session."""
    from timealign.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def tictoc_v1_dir() -> Path:
    """The real TicToc v1 release beside the repo (tests/needs.py: skipped where absent, failed in CI)."""
    return shared_path("data", "tictoc-v1")


@pytest.fixture(scope="session")
def timelychat_sample() -> Path:
    """The six author-written TimelyChat dialogs (paper Appendix A.2) in the authors' eval layout; skipped where
    absent, failed in CI (tests/needs.py)."""
    return shared_path("data", "timelychat-sample", "eval.jsonl")
