"""How long a server's completion may be: a generous bound against `max_new_tokens`, checked before anything is kept.

A server is asked for at most `max_new_tokens` tokens (`max_tokens` / `max_completion_tokens`); one that ignores the
limit (a broken or hostile OpenAI-compatible server) could hand back megabytes per sample, which the resume cache
and every report would store. A completion longer than `token_bound(max_new_tokens)` = 2 x max_new_tokens + 16
tokens (twice the budget: re-tokenizing decoded text may split it differently) is an `OverlongOutput`: the sample
counts as failed, with the reason, and its text is dropped, never truncated into something the model did not say.
`max_new_tokens` 0 (no limit, the chat backend) is bounded as if it were `NO_LIMIT_TOKENS`.

Counting: the server's token ids when it returns them (vLLM's `return_token_ids`), else the tokenizer's count of the
text when there is a tokenizer, else bytes / `BYTES_PER_TOKEN` (a generous 16: no vocabulary's typical token is
that long). A text of at most `token_bound` bytes is short enough whatever the tokenizer (a token is at least one
byte), so most replies are never re-tokenized; one over `BYTES_PER_TOKEN` x the bound is never tokenized either.
"""

from __future__ import annotations

from timealign.backends.base import BackendError

NO_LIMIT_TOKENS = 32768
BYTES_PER_TOKEN = 16


class OverlongOutput(BackendError):
    """A completion longer than the bound (module docstring); the sample counts as failed."""


def token_bound(max_new_tokens: int | None) -> int:
    budget = max_new_tokens if max_new_tokens and max_new_tokens > 0 else NO_LIMIT_TOKENS
    return 2 * int(budget) + 16


def check_output_length(
    text: str, max_new_tokens: int | None, *, tokenizer=None, token_ids=None, where: str = "the server"
) -> None:
    """Raise `OverlongOutput` when `text` (token ids `token_ids`, if known) is longer than the bound."""
    bound = token_bound(max_new_tokens)
    if token_ids is not None:
        count, unit = len(token_ids), "tokens"
    else:
        size = len(text.encode("utf-8"))
        if size <= bound:
            return
        if tokenizer is not None and size <= BYTES_PER_TOKEN * bound:
            count, unit = len(tokenizer(text, add_special_tokens=False)["input_ids"]), "tokens"
        else:
            count, unit = -(-size // BYTES_PER_TOKEN), f"tokens at most {BYTES_PER_TOKEN} bytes each ({size} bytes)"
    if count > bound:
        limit = (
            f"max_new_tokens={max_new_tokens}"
            if max_new_tokens and max_new_tokens > 0
            else f"no max_new_tokens, bounded as {NO_LIMIT_TOKENS}"
        )
        raise OverlongOutput(
            f"{where} returned a completion of {count} {unit}, more than the bound 2 x "
            f"max_new_tokens + 16 = {bound} ({limit}): the server ignored the token limit; the "
            "sample counts as failed and its text is not stored"
        )
