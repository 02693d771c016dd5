"""data.direct_answer=generate: the direct-answer side of TicToc pairs written by a model (tiny-agent).

The hf tests run in the main environment; `test_vllm_generation_equals_hf` needs vLLM (skipped without it):

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest tests/test_generated_answers.py -q

Expected answers are generated here straight through the backend's `generate` (no cache) on prompts rendered from
the prepared rows by the training renderer, and compared with what data prep wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from timealign.config import DataSection, RecipeError, load_recipe
from timealign.data.fingerprint import data_fingerprint
from timealign.data.generated_answers import (
    CACHE_NAME,
    NO_TOOL_INSTRUCTION,
    AnswerGeneration,
    answer_text,
    no_tool_messages,
)
from timealign.data.prepared import PreparedDataError, ensure_prepared, fingerprint_of, write_prepared

GENERATE = {
    "data.direct_answer": "generate",
    "data.direct_answer_model": "tiny-agent",
    "data.direct_answer_max_new_tokens": "16",
    "data.synthetic_trajectories": "2",
}
EOS = "<|im_end|>"  # the tiny tokenizer's


def _recipe(tmp: Path, **overrides) -> object:
    return load_recipe("tiny", {**GENERATE, "output_dir": str(tmp / "out"), **overrides})


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _rows(folder: Path) -> list[dict]:
    from timealign.data.pairs import load_prepared

    data = load_prepared(folder)
    return [row for split in sorted(data) for row in data[split].to_list()]


def _direct_side(row: dict) -> str:
    side = row["rejected"] if row["label"] == "prefer_tool" else row["chosen"]
    assert side[0]["tool_calls"] is None
    return side[0]["content"]


def _latest_tool_result(row: dict) -> str:
    tool = [m for m in row["prompt"] if m["role"] == "tool"][-1]
    return f"Based on the latest result from {tool['name']}: {tool['content']}"


def _expected(backend, recipe, rows: list[dict]) -> list[tuple[str, str]]:
    """(stage, text) per row from `backend.generate` itself: the training prompt; when that is a tool call, the
    no-tool prompt; when that is one too, the fallback."""
    from timealign.render.chat import PromptRenderer
    from timealign.render.tool_calls import is_tool_call

    renderer = PromptRenderer.for_data(backend.tokenizer, recipe.data)
    n = recipe.data.direct_answer_max_new_tokens
    first = backend.generate([renderer.prompt(r["prompt"], r["tools"]) for r in rows], max_new_tokens=n, desc=None)
    retry = [i for i, out in enumerate(first) if is_tool_call(out, "tiny")]
    second = (
        backend.generate(
            [renderer.prompt(no_tool_messages(rows[i]["prompt"]), None) for i in retry], max_new_tokens=n, desc=None
        )
        if retry
        else []
    )
    expected = [("direct", answer_text(out, backend.tokenizer, "tiny")) for out in first]
    for i, out in zip(retry, second):
        expected[i] = (
            ("fell_back", _latest_tool_result(rows[i]))
            if is_tool_call(out, "tiny")
            else ("without_tools", answer_text(out, backend.tokenizer, "tiny"))
        )
    return expected


@pytest.fixture(scope="module")
def tiny_agent():
    from timealign.models import resolve_model_path

    return resolve_model_path("tiny-agent")


@pytest.fixture(scope="module")
def hf_backend(tiny_agent):
    from timealign.backends.hf import HFBackend

    return HFBackend(tiny_agent, batch_size=8, dtype="float32")


@pytest.fixture(scope="module")
def hf_prep(tmp_path_factory, tiny_agent):
    tmp = tmp_path_factory.mktemp("hf")
    recipe = _recipe(tmp)
    folder = ensure_prepared(recipe)
    return recipe, folder


# ------------------------------------------------------------------------------------------------- hf backend
def test_direct_answers_are_the_models_generations(hf_prep, hf_backend):
    from timealign.render.tool_calls import is_tool_call

    recipe, folder = hf_prep
    rows = _rows(folder)
    report = _manifest(folder)["direct_answers"]
    expected = _expected(hf_backend, recipe, rows)
    assert [_direct_side(r) for r in rows] == [text for _, text in expected]
    stages = [stage for stage, _ in expected]
    assert report["samples"] == len(rows) == 12
    assert (report["direct"], report["without_tools"], report["fell_back"]) == (
        stages.count("direct"),
        stages.count("without_tools"),
        stages.count("fell_back"),
    )
    assert report["direct"] + report["without_tools"] >= 1  # some answers really are generated ...
    assert report["fell_back"] >= 1  # ... and tiny-agent calls on others even without tools: counted, listed
    assert sorted((s["id"], s["elapse_level"]) for s in report["fell_back_samples"]) == sorted(
        (r["id"], r["elapse_level"]) for r, (stage, _) in zip(rows, expected) if stage == "fell_back"
    )
    assert all(s["reason"] == "tool_call" for s in report["fell_back_samples"])
    generated = [text for (stage, text) in expected if stage != "fell_back"]
    assert all(text and not is_tool_call(text, "tiny") and EOS not in text for text in generated)
    # every synthetic record has its own direct_answer: generate replaced each one
    assert report["replaced_data_text"] == len(rows)
    assert report["model"] == "tiny-agent" and report["backend"] == "hf" and report["family"] == "tiny"
    assert report["sampling"]["temperature"] == 0.0 and report["max_new_tokens"] == 16


def test_generations_are_cached_and_resumed(hf_prep, tmp_path):
    recipe, folder = hf_prep
    first = _manifest(folder)["direct_answers"]
    cache = Path(first["generation"]["direct"]["cache_file"])
    assert cache == folder.parent / "generations" / f"{CACHE_NAME}.jsonl"
    lines = cache.read_text().splitlines()
    n_prompts = first["samples"] + first["generation"]["without_tools"]["generated"]
    assert first["generation"]["direct"]["generated"] == first["samples"] and len(lines) == n_prompts

    # the data-prep command's path (replace=True) with the same settings: nothing generated again
    again = write_prepared(
        "pairs",
        recipe.data,
        recipe.timer,
        tmp_path / "again",
        fingerprint=fingerprint_of(recipe),
        replace=True,
        generation=AnswerGeneration.from_recipe(recipe, cache_dir=cache.parent),
    )
    runs = again["direct_answers"]["generation"]
    assert runs["direct"]["generated"] == 0 and runs["direct"]["cached"] == first["samples"]
    assert runs["without_tools"]["generated"] == 0
    assert cache.read_text().splitlines() == lines
    assert [_direct_side(r) for r in _rows(tmp_path / "again")] == [_direct_side(r) for r in _rows(folder)]

    # an interrupted run (the cache lost its last 5 generations, the last one torn) resumes: 5 generated
    resumed_cache = tmp_path / "resume"
    resumed_cache.mkdir()
    (resumed_cache / f"{CACHE_NAME}.jsonl").write_text("\n".join(lines[:-5]) + "\n" + lines[-5][:40])
    info = write_prepared(
        "pairs",
        recipe.data,
        recipe.timer,
        tmp_path / "resumed",
        fingerprint=fingerprint_of(recipe),
        replace=True,
        generation=AnswerGeneration.from_recipe(recipe, cache_dir=resumed_cache),
    )
    runs = info["direct_answers"]["generation"]
    assert runs["direct"]["generated"] + runs["without_tools"]["generated"] == 5
    assert [_direct_side(r) for r in _rows(tmp_path / "resumed")] == [_direct_side(r) for r in _rows(folder)]

    # other settings miss the cache: another limit generates everything anew
    longer = _recipe(tmp_path, **{"data.direct_answer_max_new_tokens": "17"})
    info = write_prepared(
        "pairs",
        longer.data,
        longer.timer,
        tmp_path / "longer",
        fingerprint=fingerprint_of(longer),
        replace=True,
        generation=AnswerGeneration.from_recipe(longer, cache_dir=cache.parent),
    )
    assert info["direct_answers"]["generation"]["direct"]["generated"] == first["samples"]


def test_fingerprint_follows_the_generation_settings(hf_prep, tmp_path):
    recipe, folder = hf_prep
    base = fingerprint_of(recipe)
    assert base.settings["data.direct_answer_model"] == "tiny-agent"
    assert base.sources["direct_answer_model"] == {"model": "tiny-agent"}
    for key, value in {
        "data.direct_answer_model": "tiny",
        "data.direct_answer_max_new_tokens": "12",
        "data.direct_answer_backend": "vllm",
        "eval.temperature": "0.7",
        "eval.dtype": "bfloat16",
        "eval.reasoning": "true",
        "data.timestamps": "false",
        "data.elapsed": "true",
    }.items():
        assert fingerprint_of(_recipe(tmp_path, **{key: value})) != base, key
    # unset direct_answer_model means model.name_or_path: the same data as naming it
    default_model = _recipe(tmp_path, **{"data.direct_answer_model": "null", "model.name_or_path": "tiny-agent"})
    assert fingerprint_of(default_model) == base
    # what generation does not read leaves the fingerprint alone
    for key, value in {"eval.batch_size": "3", "eval.max_new_tokens": "5", "data.offset_scale": "2"}.items():
        assert fingerprint_of(_recipe(tmp_path, **{key: value})) == base, key
    # another strategy reads none of the direct_answer_* fields
    plain = {"data.direct_answer": "latest_tool_result"}
    other = fingerprint_of(
        _recipe(tmp_path, **plain, **{"data.direct_answer_model": "tiny", "data.direct_answer_max_new_tokens": "7"})
    )
    assert other == fingerprint_of(_recipe(tmp_path, **plain))
    assert "direct_answer_model" not in other.sources and "data.direct_answer_model" not in other.settings
    timer_recipe = load_recipe("tiny-timer", {**GENERATE}, task="sft")
    assert fingerprint_of(timer_recipe) == fingerprint_of(load_recipe("tiny-timer", task="sft"))
    # prepared data of other generation settings is refused, naming the setting
    explicit = tmp_path / "explicit"
    with pytest.raises(ValueError, match="needs the generation settings"):
        data_fingerprint("pairs", recipe.data)
    write_prepared(
        "pairs",
        recipe.data,
        recipe.timer,
        explicit,
        fingerprint=base,
        replace=True,
        generation=AnswerGeneration.from_recipe(recipe, cache_dir=folder.parent / "generations"),
    )
    shorter = _recipe(tmp_path, **{"data.prepared_dir": str(explicit), "data.direct_answer_max_new_tokens": "12"})
    with pytest.raises(PreparedDataError, match=r"data.direct_answer_max_new_tokens: 16 \(prepared\) -> 12"):
        ensure_prepared(shorter)


# ----------------------------------------------------------------------------------------------- pieces, checks
def test_no_tool_prompt_and_answer_text(tiny_tokenizer):
    from timealign.render.chat import PromptRenderer

    messages = [{"role": "user", "content": "Is it open?", "time": "2025-01-01T10:00:00Z"}]
    with_system = no_tool_messages([{"role": "system", "content": "You help."}] + messages)
    assert with_system[0]["content"] == f"You help.\n\n{NO_TOOL_INSTRUCTION}" and len(with_system) == 2
    added = no_tool_messages(messages)
    assert added[0] == {"role": "system", "content": NO_TOOL_INSTRUCTION, "time": "2025-01-01T10:00:00Z"}
    prompt = PromptRenderer(tiny_tokenizer).prompt(added, None)
    assert NO_TOOL_INSTRUCTION in prompt and "# Tools" not in prompt
    assert answer_text(" It is open.<|im_end|>", tiny_tokenizer, "tiny") == "It is open."
    assert answer_text("<think>call?</think>\nIt is open.<|im_end|>", tiny_tokenizer, "qwen") == "It is open."
    assert answer_text("<think>still thinking", tiny_tokenizer, "qwen") == ""
    assert answer_text("Let me think</think>Open.", tiny_tokenizer, "deepseek_r1") == "Open."
    assert answer_text("no close tag", tiny_tokenizer, "deepseek_r1") == ""


def test_generate_is_validated_and_never_guessed(tmp_path):
    from timealign.data.pairs import prepare
    from timealign.data.synthetic import generate_annotated
    from timealign.data.tictoc import annotated_records
    from timealign.data.tictoc_pairs import build_pair

    with pytest.raises(
        RecipeError,
        match="data.direct_answer='bogus' is not one of: latest_tool_result, last_assistant_text, generate",
    ):
        load_recipe("tiny", {"data.direct_answer": "bogus"})
    with pytest.raises(RecipeError, match="data.direct_answer_backend='chat' is not one of: hf, vllm, openai"):
        load_recipe("tiny", {**GENERATE, "data.direct_answer_backend": "chat"})
    with pytest.raises(RecipeError, match="data.direct_answer_backend=openai needs eval.base_url"):
        load_recipe("tiny", {**GENERATE, "data.direct_answer_backend": "openai"})
    with pytest.raises(RecipeError, match="data.direct_answer_max_new_tokens=0 must be >= 1"):
        load_recipe("tiny", {**GENERATE, "data.direct_answer_max_new_tokens": "0"})
    assert AnswerGeneration.from_recipe(load_recipe("tiny")) is None
    # pair building never makes up a generated answer
    sample = annotated_records(generate_annotated(1, seed=3), "synthetic").samples[0]
    with pytest.raises(ValueError, match="direct_answer=generate needs the generated text"):
        build_pair(replace(sample, direct_answer=None), default_margins={}, direct_answer="generate")
    with pytest.raises(ValueError, match="needs the model that writes the answers"):
        prepare(
            DataSection(direct_answer="generate", synthetic_trajectories=1),
            tmp_path / "x",
            fingerprint=fingerprint_of(load_recipe("tiny")),
        )


# ----------------------------------------------------------------------------------------------- vLLM backend
@pytest.mark.vllm
def test_vllm_generation_equals_hf(hf_prep, tmp_path):
    """The same data prep on the real vLLM CPU engine: the same greedy generations token for token, so the same
    pairs and the same counts (run with .venv-vllm/bin/python; skipped where vLLM is not importable)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    recipe, folder = hf_prep
    vllm = _recipe(
        tmp_path, **{"data.direct_answer_backend": "vllm", "eval.enforce_eager": "true", "eval.max_model_len": "2048"}
    )
    assert fingerprint_of(vllm) != fingerprint_of(recipe)
    vllm_folder = ensure_prepared(vllm)
    hf_report, vllm_report = _manifest(folder)["direct_answers"], _manifest(vllm_folder)["direct_answers"]
    assert vllm_report["backend"] == "vllm"
    for key in ("samples", "direct", "without_tools", "fell_back", "fell_back_samples", "hit_max_new_tokens"):
        assert vllm_report[key] == hf_report[key], key
    assert [_direct_side(r) for r in _rows(vllm_folder)] == [_direct_side(r) for r in _rows(folder)]

    def outputs(report) -> dict[str, str]:  # prompt hash -> raw generation (special tokens, EOS included)
        lines = Path(report["generation"]["direct"]["cache_file"]).read_text().splitlines()
        return {
            r["prompt_sha256"]: r["output"] for r in map(json.loads, lines) if r["settings"]["max_new_tokens"] == 16
        }  # the cache test added 17-token ones to hf's cache

    hf_out, vllm_out = outputs(hf_report), outputs(vllm_report)
    assert len(vllm_out) == len(hf_out) and vllm_out == hf_out
