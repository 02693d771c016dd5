"""Prompt reuse in evaluation: vLLM automatic prefix caching (eval.prefix_caching) on the real vLLM CPU engine, and
the hf backend's length grouping. TicToc prompts of one trajectory at its elapse levels share a long prefix; with
caching on, the later ones take their prefix from the cache, and the greedy outputs are exactly those of the engine
with caching off. The hf backend batches each call's prompts longest first and returns them in the caller's order,
with the outputs of unregrouped batches.

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest tests/test_prefix_caching.py -q

The vLLM test is skipped where vLLM is not importable. Prompts: the synthetic held-out TicToc rows (3 elapse levels
per trajectory), plus, when ../shared/data/tictoc-v1 is present, real v1 trajectories with 2-3 elapse levels each.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU build otherwise reserves 92% of RAM

from helpers import build_test_model, tictoc_rows
from needs import shared_path

from timealign.backends.factory import make_backend
from timealign.config import load_recipe

pytestmark = pytest.mark.slow
MAX_NEW_TOKENS = 12
MAX_MODEL_LEN = 2048
V1_TRAJECTORIES = 6


def v1_rows(tmp_path) -> list[dict]:
    """Real v1 held-out rows of a few trajectories seen at several elapse levels (in the split's order)."""
    path = shared_path("data", "tictoc-v1")
    from timealign.suites.tictoc.suite import heldout_rows

    recipe = load_recipe("tiny", {"data.source": "v1", "data.path": str(path), "data.prepared_dir": str(tmp_path)})
    by_id = defaultdict(list)
    for row in heldout_rows(recipe):
        by_id[row["id"]].append(row)
    chosen = [rows for rows in by_id.values() if len(rows) > 1][:V1_TRAJECTORIES]
    keep = {id(r) for rows in chosen for r in rows}
    return [r for rows in by_id.values() for r in rows if id(r) in keep]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return tictoc_rows(tmp_path_factory.mktemp("prepared")) + v1_rows(tmp_path_factory.mktemp("v1"))


@pytest.fixture(scope="module")
def test_model(tiny_model_dir, rows, tmp_path_factory):
    return build_test_model(tmp_path_factory.mktemp("spread-bos"), tiny_model_dir, rows)


def engine(checkpoint, prefix_caching: bool):
    recipe = load_recipe(
        "tiny",
        {
            "eval.backend": "vllm",
            "eval.max_model_len": str(MAX_MODEL_LEN),
            "eval.enforce_eager": "true",
            "eval.prefix_caching": str(prefix_caching).lower(),
        },
    )
    return make_backend(recipe.eval, str(checkpoint), dtype="float32")


def test_hf_length_grouping_keeps_order_and_outputs(test_model, rows):
    from timealign.backends.hf import HFBackend
    from timealign.render.chat import PromptRenderer

    hf = HFBackend(str(test_model), batch_size=4, dtype="float32")
    synthetic = rows[:12]  # the synthetic rows: lengths in no particular order
    prompts = [PromptRenderer(hf.tokenizer).prompt(r["prompt"], r["tools"]) for r in synthetic]
    lengths = [len(ids) for ids in hf.tokenizer(prompts)["input_ids"]]
    assert lengths != sorted(lengths, reverse=True)  # grouping really reorders the batches
    assert hf.group_by_length is True  # the default
    grouped = hf.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)
    hf.group_by_length = False
    plain = hf.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)
    assert grouped == plain and len(set(plain)) > 3
    assert hf.generate(prompts[5:6], max_new_tokens=MAX_NEW_TOKENS, desc=None) == plain[5:6]


@pytest.mark.vllm
def test_prefix_caching_reuses_shared_prefixes_and_changes_no_output(test_model, rows):
    from transformers import AutoTokenizer

    from timealign.render.chat import PromptRenderer

    tokenizer = AutoTokenizer.from_pretrained(test_model)
    renderer = PromptRenderer(tokenizer)
    prompts = [renderer.prompt(r["prompt"], r["tools"]) for r in rows]
    lengths = [len(ids) for ids in tokenizer(prompts, add_special_tokens=True)["input_ids"]]
    keep = [i for i, n in enumerate(lengths) if n + MAX_NEW_TOKENS < MAX_MODEL_LEN]
    prompts = [prompts[i] for i in keep]
    assert len({rows[i]["id"] for i in keep}) < len(prompts)  # trajectories at several elapse levels

    with engine(test_model, prefix_caching=False) as off:
        assert off.prefix_caching is False
        expected = off.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None)
        assert off.cached_prompt_tokens == 0 and off.prompt_tokens == sum(lengths[i] for i in keep)
    assert len(set(expected)) > 3  # varied outputs: an engine ignoring the prompt could not match them

    with engine(test_model, prefix_caching=True) as on:
        assert on.prefix_caching is True
        assert on.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None) == expected
        first_hits = on.cached_prompt_tokens
        assert first_hits > 0  # later elapse levels reused their trajectory's prefix within the call
        # A second pass finds every prompt's full blocks cached: most of each prompt, the same outputs.
        assert on.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, desc=None) == expected
        second_hits = on.cached_prompt_tokens - first_hits
        assert second_hits > 0.8 * on.prompt_tokens / 2 and second_hits > first_hits
