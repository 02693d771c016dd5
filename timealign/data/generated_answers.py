"""`data.direct_answer=generate`: a model writes the direct-answer side of every TicToc pair.

The v1 release has no direct-answer text, so the other strategies build one from the trajectory
(`timealign.data.tictoc_pairs.direct_answer_text`). `generate` asks a model instead, through the evaluator's backends
(`timealign.backends.factory.make_backend` with the recipe's `eval.*` settings and `data.direct_answer_backend`:
hf | vllm | openai), on prompts rendered by the one renderer of training and evaluation
(`PromptRenderer.for_data` on the recipe's `data` section). Every sample gets a generated answer; the data's own
`direct_answer` text is replaced too (counted as `replaced_data_text`), so all direct answers come from one writer.

A direct answer must not be a tool call. Per sample, in order:
1. the training prompt itself (the pair's `prompt` and `tools`, rendered exactly as training renders them): when the
   model answers in text there, that is its own direct answer in the very context the pair trains on;
2. when it called a tool instead (or wrote nothing, or its generation failed), the same conversation rendered
   WITHOUT the tool schemas and with `NO_TOOL_INSTRUCTION` added to the system message;
3. when that gives no answer either, the sample falls back to `FALLBACK` (latest_tool_result), with a warning; the
   count and the samples with their reasons are in the prep report (manifest.json `direct_answers`), never silent.
A tool call is what the evaluator counts as one (`timealign.render.tool_calls.is_tool_call`, `timealign`
protocol, for the tokenizer's template family), so a direct answer here is a "no call" there. The text kept is the
generation after any reasoning block (`</think>`), without trailing special tokens (EOS) and whitespace.

Cache: `cached_generate` (timealign.backends.cache) appends each finished generation to
`<cache_dir>/direct_answers.jsonl` (data prep's default: `generations/` beside the prepared folder, outside the
temporary folder that an interrupted prep leaves behind), keyed by the rendered prompt's hash, the model's identity
(engine + checkpoint, weights' size and mtime for a local folder), max_new_tokens and the sampling settings. The
prompt contains the whole sample (conversation, tools, times), so the sample is in the key through it; two samples
with the same prompt share one generation. A rerun or an interrupted run generates only what is missing; another
model or setting misses the cache. `AnswerGeneration.settings` goes into the data fingerprint
(`timealign.data.fingerprint`), so prepared data is never reused after the model or a setting changes.

Imports: the backends and the tool-call detector are imported inside the functions that use them, so importing
`timealign.data` never loads an engine (tests/test_layout.py lists this module's exception to the layer order).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timealign.config import RecipeError
from timealign.config.validate import DIRECT_ANSWER_BACKENDS
from timealign.data.tictoc_layout import TicTocSample
from timealign.data.tictoc_pairs import prompt_messages

logger = logging.getLogger(__name__)

CACHE_NAME = "direct_answers"  # the cache file: <cache_dir>/direct_answers.jsonl
FALLBACK = "latest_tool_result"
NO_TOOL_INSTRUCTION = (
    "Answer the user's last message directly from the conversation so far. Do not call a tool: "
    "no tools are available for this reply."
)


@dataclass(frozen=True)
class AnswerGeneration:
    """Who writes the direct answers and how: the recipe's `data.direct_answer_*`, `model.*` and `eval.*` fields."""

    model: str  # data.direct_answer_model, else model.name_or_path (hub id, folder, tiny names)
    backend: str  # hf | vllm | openai
    max_new_tokens: int
    eval: Any  # the recipe's EvalSection: sampling, engine and server settings
    dtype: str  # weights dtype, chosen as evaluation chooses it
    trust_remote_code: bool = False
    cache_dir: Path | None = None  # None: no cache (data prep always sets one)

    @classmethod
    def from_recipe(cls, recipe, cache_dir: str | Path | None = None) -> AnswerGeneration | None:
        """The recipe's generation settings; None unless `data.direct_answer=generate`."""
        data = recipe.data
        if data.direct_answer != "generate":
            return None
        if data.direct_answer_backend not in DIRECT_ANSWER_BACKENDS:
            raise RecipeError(
                f"data.direct_answer_backend={data.direct_answer_backend!r}; known: "
                f"{', '.join(DIRECT_ANSWER_BACKENDS)} (chat takes messages, not our rendered prompts)"
            )
        model = recipe.model
        # eval/runner.py's rule: eval.dtype, else model.dtype, where bfloat16 (the schema default) means the
        # checkpoint's own ("auto")
        dtype = recipe.eval.dtype or (model.dtype if model.dtype != "bfloat16" else "auto")
        return cls(
            model=data.direct_answer_model or model.name_or_path,
            backend=data.direct_answer_backend,
            max_new_tokens=int(data.direct_answer_max_new_tokens),
            eval=recipe.eval,
            dtype=dtype,
            trust_remote_code=bool(model.trust_remote_code),
            cache_dir=Path(cache_dir) if cache_dir is not None else None,
        )

    def with_cache_dir(self, cache_dir: str | Path) -> AnswerGeneration:
        return dataclasses.replace(self, cache_dir=Path(cache_dir))

    def settings(self) -> dict:
        """What decides the generated text besides the prompt, under the recipe keys that set it (the data
        fingerprint's settings; the model's weights are `model_identity`)."""
        ev = self.eval
        out = {
            "data.direct_answer_model": self.model,
            "data.direct_answer_backend": self.backend,
            "data.direct_answer_max_new_tokens": self.max_new_tokens,
            "eval.temperature": ev.temperature,
            "eval.top_p": ev.top_p,
            "eval.top_k": ev.top_k,
            "eval.min_p": ev.min_p,
            "eval.seed": ev.seed,
            "eval.reasoning": ev.reasoning,
        }
        if self.backend == "openai":
            out["eval.served_model"] = ev.served_model or self.model
        else:
            out["eval.dtype"] = self.dtype
        return out

    def model_identity(self) -> str:
        """The checkpoint as the resume cache sees it: a local folder's weight files (name, size, mtime), so a
        retrained checkpoint at the same path counts as another model; a hub id, tiny name or served model as is."""
        if self.backend == "openai":
            return self.eval.served_model or self.model
        from timealign.backends.base import model_fingerprint

        return model_fingerprint(self.model)


def no_tool_messages(messages: list[dict]) -> list[dict]:
    """The conversation with `NO_TOOL_INSTRUCTION` at the end of its system message (a new first message when it
    has none, timed as the first message, since the paper protocol stamps system messages)."""
    out = copy.deepcopy(list(messages))
    if out and out[0].get("role") == "system":
        text = (out[0].get("content") or "").rstrip()
        out[0]["content"] = f"{text}\n\n{NO_TOOL_INSTRUCTION}" if text else NO_TOOL_INSTRUCTION
    else:
        first_time = out[0].get("time") if out else None
        out.insert(0, {"role": "system", "content": NO_TOOL_INSTRUCTION, "time": first_time})
    return out


def answer_text(output: str, tokenizer, family: str) -> str:
    """The reply a generation makes: after any reasoning block, without trailing special tokens and whitespace.
    Empty when the reasoning never closed (the model never reached its reply)."""
    text = output
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text or family == "deepseek_r1":  # R1 distills' prompts open <think> themselves
        return ""
    special = sorted({t for t in getattr(tokenizer, "all_special_tokens", []) if t}, key=len, reverse=True)
    text = text.strip()
    trimmed = True
    while trimmed:
        trimmed = False
        for token in special:
            if text.endswith(token):
                text, trimmed = text[: -len(token)].rstrip(), True
    return text


def generate_direct_answers(
    samples: list[TicTocSample], data, generation: AnswerGeneration, *, backend=None
) -> tuple[list[TicTocSample], dict]:
    """Every sample with `direct_answer` set to the model's generated text, or None where it fell back (build its
    pair with `FALLBACK`), plus the report for manifest.json (module docstring).

    `data`: the recipe's data section (the renderer's settings). `backend`: an already built backend to use (left
    open); default: built here from `generation` and closed at the end.
    """
    from timealign.render.chat import PromptRenderer
    from timealign.render.families import detect_family

    if not samples:
        return [], {"samples": 0}
    own = backend is None
    if own:
        from timealign.backends.factory import make_backend

        eval_cfg = dataclasses.replace(generation.eval, backend=generation.backend)
        backend = make_backend(
            eval_cfg, generation.model, dtype=generation.dtype, trust_remote_code=generation.trust_remote_code
        )
    try:
        tokenizer = backend.tokenizer
        family = detect_family(getattr(tokenizer, "chat_template", None))
        renderer = PromptRenderer.for_data(tokenizer, data, reasoning=generation.eval.reasoning)
        outcomes = [Outcome() for _ in samples]
        first = [_render(renderer, prompt_messages(s), s.tools) for s in samples]
        runs = {"direct": _run(backend, generation, first, outcomes, "direct", family, "Direct answers")}
        retry = [i for i, o in enumerate(outcomes) if o.answer is None]
        if retry:
            second = [_render(renderer, no_tool_messages(prompt_messages(samples[i])), None) for i in retry]
            again = [Outcome(first_try=outcomes[i].reason) for i in retry]
            runs["without_tools"] = _run(
                backend, generation, second, again, "without_tools", family, "Direct answers (no tools)"
            )
            for i, o in zip(retry, again):
                outcomes[i] = o
        # hf and vllm outputs end in the EOS (a special token) when the model stopped; the openai backend's do not
        ended = [] if getattr(backend, "name", "") == "openai" else list(getattr(tokenizer, "all_special_tokens", []))
        sampling = dict(getattr(backend, "sampling", {}) or {})
    finally:
        if own:
            _release(backend)

    out, fell_back = [], []
    for sample, o in zip(samples, outcomes):
        out.append(dataclasses.replace(sample, direct_answer=o.answer))
        if o.answer is None:
            fell_back.append(
                {"id": sample.id, "elapse_level": sample.elapse_level, "reason": o.reason, "first_try": o.first_try}
            )
    stages = [o.stage for o in outcomes]
    answered = [o for o in outcomes if o.answer is not None]
    report = {
        "model": generation.model,
        "model_identity": generation.model_identity(),
        "backend": generation.backend,
        "max_new_tokens": generation.max_new_tokens,
        "sampling": sampling,
        "family": family,
        "prompt_protocol": renderer.protocol,
        "fallback": FALLBACK,
        "samples": len(samples),
        "direct": stages.count("direct"),  # answered in text on the training prompt
        "without_tools": stages.count("without_tools"),  # answered once the tools were taken away
        "fell_back": len(fell_back),
        "replaced_data_text": sum(1 for s in samples if s.direct_answer),
        # answers whose generation max_new_tokens stopped (no EOS); None: the backend's outputs do not show it
        "hit_max_new_tokens": sum(1 for o in answered if not any(o.output.endswith(t) for t in ended))
        if ended
        else None,
        "generation": runs,  # per attempt: cached / generated / failed, and the cache file
        "fell_back_samples": fell_back,
    }
    if fell_back:
        logger.warning(
            "data.direct_answer=generate: %d of %d samples gave no direct answer, even without the tools "
            "(a tool call, nothing, or a failed generation); their pairs use %s instead (listed in "
            "manifest.json under direct_answers). First: %s level %s: %s",
            len(fell_back),
            len(samples),
            FALLBACK,
            fell_back[0]["id"],
            fell_back[0]["elapse_level"],
            fell_back[0]["reason"],
        )
    return out, report


@dataclass
class Outcome:
    """One sample's attempt: the answer, or why there is none."""

    answer: str | None = None
    reason: str | None = None  # tool_call | empty | unrenderable: ... | generation failed: ...
    stage: str | None = None  # direct | without_tools (where the answer came from)
    output: str = ""  # the raw generation
    first_try: str | None = None  # the first attempt's reason, for a retried sample


def _render(renderer, messages: list[dict], tools) -> tuple[str | None, str | None]:
    """(prompt, None), or (None, reason) for a sample the paper protocol cannot render (as its authors' code)."""
    from timealign.render.paper import UnrenderableSample

    try:
        return renderer.prompt(messages, tools), None
    except UnrenderableSample as err:
        return None, f"unrenderable: {err}"


def _run(
    backend,
    generation: AnswerGeneration,
    prompts: list[tuple[str | None, str | None]],
    outcomes: list[Outcome],
    stage: str,
    family: str,
    desc: str,
) -> dict:
    """Generate (through the cache) for the renderable prompts and judge each output into `outcomes`."""
    from timealign.backends.cache import cached_generate
    from timealign.render.tool_calls import is_tool_call

    todo = []
    for i, (prompt, reason) in enumerate(prompts):
        if prompt is None:
            outcomes[i].reason = reason
        else:
            todo.append(i)
    gens = cached_generate(
        backend,
        [prompts[i][0] for i in todo],
        suite=CACHE_NAME,
        cache_dir=generation.cache_dir,
        max_new_tokens=generation.max_new_tokens,
        desc=desc,
    )
    tokenizer = backend.tokenizer
    for j, i in enumerate(todo):
        output, o = gens.outputs[j], outcomes[i]
        if output is None:
            o.reason = f"generation failed: {gens.errors.get(j, 'no output')}"
            continue
        o.output = output
        if is_tool_call(output, family):
            o.reason = "tool_call"
            continue
        text = answer_text(output, tokenizer, family)
        if not text:
            o.reason = "empty"
            continue
        o.answer, o.stage, o.reason = text, stage, None
    return gens.summary()


def _release(backend) -> None:
    """Close the engine and hand its memory back before training loads its model."""
    backend.close()
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
