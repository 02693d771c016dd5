"""Generation backends for the evaluator: one interface, four engines, one factory (`timealign.backends.factory`).

Every backend continues prompt *strings* that the shared `timealign.render.chat.PromptRenderer` already rendered with
the model's chat template, so the template is applied in exactly one place for every engine:

- `hf`     transformers `generate` (CPU or GPU), full checkpoints or LoRA adapters (`hf.HFBackend`)
- `vllm`   the offline `vllm.LLM` engine, LoRA adapters through `enable_lora` + `LoRARequest`
           (`vllm.VLLMBackend`)
- `openai` an OpenAI-compatible server such as `vllm serve`, through its *completions* endpoint with the rendered
           string, plus `chat(messages)` for judge models (`openai.OpenAIBackend`)
- `chat`   API models through a *chat-completions* endpoint: the one backend that does not continue rendered strings;
           it takes canonical JSON chat requests and returns the reply message, structured tool calls included, as
           canonical JSON (`chat.ChatBackend`)
- `clock`  no model: the elapsed-time rule (a tool call when the last tool result is older than
           `eval.clock_seconds`), the baseline of TicToc NAR; like `chat` it takes canonical JSON requests (the
           samples' messages with their times) and returns canonical chat replies (`clock.ClockBackend`)

BOS: the renderer leaves the template's BOS out; every backend tokenizes the rendered string with
`add_special_tokens=True` (hf and vllm tokenize locally with the checkpoint's tokenizer and hand vLLM the token ids;
a vLLM server does the same for a completions request), so a BOS-adding tokenizer adds its BOS exactly once.

The interface (`Backend`):

    name: str                      "hf" | "vllm" | "openai" | "chat" | "clock"
    tokenizer                      the checkpoint's tokenizer (for the renderer and tool-call family detection)
    sampling: dict                 the defaults from the recipe: temperature, top_p, top_k, min_p, seed
    fingerprint: str               engine + model identity (weights' size and mtime), part of the resume-cache key
    generate(prompts, *, max_new_tokens, temperature=None, top_p=None, top_k=None, min_p=None, desc=...) -> list[str]
    close()                        frees the engine

A sampling argument left at None takes the backend's default (`sampling`), so suites that only pass
`max_new_tokens` still run with the recipe's settings. `desc=None` turns the progress bar off. Outputs keep special
tokens (tool-call markers are special tokens in several tokenizers) and end at the first EOS, included.

Failures: `generate` either returns one string per prompt or raises. `GenerationError` carries the outputs of the
prompts that did finish and one message per failed prompt; `timealign.backends.cache.cached_generate` records those in
the report instead of crashing the run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger(__name__)

BACKENDS = ("hf", "vllm", "openai", "chat", "clock")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")
# Paper Sec. 3: "All models are evaluated with Temperature=0, where applicable. For Qwen3 models operating in
# reasoning mode, we follow the officially recommended settings and instead use Temperature=0.6, TopP=0.95, TopK=20,
# and MinP=0."
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
QWEN3_REASONING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0}


class BackendError(RuntimeError):
    """A backend cannot be built or cannot generate; the message says what to do."""


class GenerationError(BackendError):
    """Some prompts of one `generate` call failed.

    outputs: one entry per prompt, the text or None where it failed; errors: prompt index -> error message.
    """

    def __init__(self, outputs: list[str | None], errors: dict[int, str]):
        self.outputs, self.errors = outputs, errors
        first = next(iter(errors.items()), (None, ""))
        super().__init__(f"{len(errors)} of {len(outputs)} prompts failed (first, prompt {first[0]}: {first[1]})")


@runtime_checkable
class Backend(Protocol):
    name: str
    tokenizer: Any
    sampling: dict

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int = 64,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        desc: str | None = "Generating",
    ) -> list[str]: ...


def sampling_settings(eval_cfg=None, **overrides) -> dict:
    """The sampling settings of a recipe's `eval` section: the paper's defaults, then the fields that are set.

    Greedy (temperature 0) unless `eval.reasoning` is true, in which case Qwen3's recommended reasoning settings.
    """
    reasoning = getattr(eval_cfg, "reasoning", None)
    settings = dict(QWEN3_REASONING if reasoning else GREEDY)
    for key in SAMPLING_KEYS:
        value = overrides.get(key, getattr(eval_cfg, key, None))
        if value is not None:
            settings[key] = type(GREEDY[key])(value)
    settings["seed"] = int(overrides.get("seed", getattr(eval_cfg, "seed", 0) or 0))
    if (
        settings["temperature"] < 0
        or not 0 < settings["top_p"] <= 1
        or settings["top_k"] < 0
        or not 0 <= settings["min_p"] <= 1
    ):
        raise BackendError(
            f"invalid sampling settings {settings}: need temperature >= 0, 0 < top_p <= 1, "
            "top_k >= 0 (0: off), 0 <= min_p <= 1"
        )
    return settings


def model_fingerprint(path: str | os.PathLike) -> str:
    """Identity of a checkpoint for the resume cache: a local folder's weight/config files (name, size, mtime), so a
    retrained checkpoint at the same path never reuses stale generations; a hub id or served model name as is."""
    folder = Path(path)
    if not folder.is_dir():
        return str(path)
    h = hashlib.sha256(str(folder.resolve()).encode())
    for f in sorted(folder.iterdir()):
        if f.is_file() and (
            f.suffix in (".safetensors", ".bin", ".pt")
            or f.name in ("config.json", "adapter_config.json", "tokenizer.json", "tokenizer_config.json")
        ):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{folder.name}@{h.hexdigest()[:16]}"


def adapter_config(path: str | os.PathLike) -> dict | None:
    """The PEFT adapter config of a LoRA checkpoint folder, or None for a full model (or a hub id)."""
    file = Path(path) / "adapter_config.json"
    return json.loads(file.read_text()) if file.is_file() else None


def set_reasoning(tokenizer, reasoning: bool | None):
    """Turn Qwen3 thinking on/off in the chat template itself (`enable_thinking`), so the one renderer renders it.

    Qwen3's template reads `enable_thinking` (off: an empty <think></think> block in the generation prompt). A
    template that does not mention it is left alone, with a warning when reasoning was asked for explicitly.
    """
    if reasoning is None:
        return tokenizer
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "enable_thinking" not in template:
        logger.warning("eval.reasoning=%s is ignored: the chat template has no enable_thinking switch", reasoning)
        return tokenizer
    tokenizer.chat_template = "{%- set enable_thinking = " + ("true" if reasoning else "false") + " %}" + template
    return tokenizer


class BaseBackend:
    """Shared plumbing: sampling defaults, fingerprint, close."""

    name = "base"
    tokenizer: Any = None
    model_id: str = ""

    def __init__(self, sampling: dict | None = None):
        self.sampling = dict(sampling or sampling_settings())

    def resolve_sampling(self, **given) -> dict:
        """The backend's defaults with the arguments that are not None."""
        out = dict(self.sampling)
        out.update({k: v for k, v in given.items() if v is not None})
        return out

    @property
    def fingerprint(self) -> str:
        return f"{self.name}:{self.model_id}"

    def close(self) -> None:
        """Free the engine (no-op by default)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
