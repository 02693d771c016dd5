"""The one tokenization of a rendered prompt and its completions, for training, evaluation and serving.

Inference tokenizes the rendered prompt alone (`tokenizer(prompt)`, special tokens added as the tokenizer does: the
hf and vllm backends, and vLLM's server behind `timealign serve`) and the model generates from there. Training must
see exactly those prompt ids, followed by the completion. Tokenizing `prompt + completion` as one string (what TRL's
DPOTrainer does) is not that: a byte-level BPE merges across the boundary. SmolLM2's tokenizer turns the stamp's
closing `]` and a tool call's `<` into one token `]<`, so the prompt trained on ends one token short of the prompt
inference shows, and the trained first reply token (`]<`) is one inference never asks for (measured on the v1
release: 694 of 694 train pairs split so, and a model trained that way never called a tool).

So the prompt and each completion are tokenized apart and their ids joined: `prompt_ids(prompt) + completion_ids(c)`.
The prompt ids are the inference ids by construction, and the completion ids are a valid tokenization of the reply
text that the model learns to produce after them (any tokenization decodes to the same text, which is all the
evaluator and the gateway read).
"""

from __future__ import annotations

from typing import Any

from timealign.config.options import RecipeError


class CompletionTokenizationError(RecipeError):
    """The tokenizer cannot tokenize a completion on its own (it changes the text, e.g. adds a leading space): the
    model named by the recipe cannot be trained this way, one line and exit 2."""


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The ids inference generates from: the rendered prompt alone, with the tokenizer's own special tokens (BOS for
    Llama-style tokenizers; the renderer leaves the template's BOS out so there is exactly one)."""
    return list(tokenizer(text=prompt)["input_ids"])


def completion_ids(tokenizer: Any, completion: str) -> list[int]:
    """The ids of one completion tokenized on its own, ending with EOS (appended when the text lacks it, as TRL's
    add_eos does). Raises CompletionTokenizationError when the ids do not decode to the text: a tokenizer that adds
    a prefix (SentencePiece's dummy space) would otherwise train a reply with an extra character."""
    eos = getattr(tokenizer, "eos_token", None)
    if eos and not completion.endswith(eos):
        completion += eos
    ids = list(tokenizer(text=completion, add_special_tokens=False)["input_ids"])
    decoded = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if decoded != completion:
        raise CompletionTokenizationError(
            f"the tokenizer does not tokenize a completion on its own without changing it ({completion[:40]!r} "
            f"decodes back as {decoded[:40]!r}); timealign trains on the prompt's ids followed by the completion's "
            "(timealign/render/tokens.py) and cannot do that with this tokenizer"
        )
    return ids


def pair_ids(tokenizer: Any, prompt: str, chosen: str, rejected: str) -> dict[str, list[int]]:
    """TRL's tokenized preference layout (`prompt_ids`, `chosen_ids`, `rejected_ids`) for one rendered pair."""
    return {
        "prompt_ids": prompt_ids(tokenizer, prompt),
        "chosen_ids": completion_ids(tokenizer, chosen),
        "rejected_ids": completion_ids(tokenizer, rejected),
    }
