"""What the generated single-question suites (Time Puzzles, ChronoSense, TCP) share.

Each of their items carries a `prompt` asked as one user turn (no timestamps, no tools), and their items are kept
as JSONL files: asking a backend, reading and writing the files, reading past a reasoning model's `<think>` block,
and the number format of their report tables are one piece here.
"""

from __future__ import annotations

import re
from typing import Sequence

from timealign.backends.cache import generate_texts

THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)


def ask(
    backend, items: Sequence[dict], *, suite: str, max_new_tokens: int, cache_dir=None, desc: str | None = None
) -> tuple[list[str], dict]:
    """Each item's `prompt` as one user turn through the shared PromptRenderer, generated with the suite's cache.

    Returns the outputs (a failed sample is "", scored as unparseable) and the generation info (`errors`, cache use)
    of `timealign.backends.cache.generate_texts`.
    """
    from timealign.render.chat import PromptRenderer

    renderer = PromptRenderer(backend.tokenizer, timestamps=False)
    prompts = [renderer.prompt([{"role": "user", "content": it["prompt"]}]) for it in items]
    outputs, generation = generate_texts(
        backend, prompts, suite=suite, max_new_tokens=max_new_tokens, cache_dir=cache_dir, desc=desc or suite
    )
    return list(outputs), generation


def strip_thinking(text: str | None) -> str:
    """The reply without its `<think>...</think>` block (an unclosed block runs to the end)."""
    return THINK_BLOCK.sub(" ", text or "")


def fmt_metric(value: float | None) -> str:
    """A metric in a report table: three decimals, or n/a when undefined."""
    return "n/a" if value is None else f"{value:.3f}"


def accuracy_counts(rows: Sequence[tuple[dict, str | None]]) -> dict:
    """Exact-match accuracy of (item, parsed prediction) pairs against `item["answer"]`; None counts as unclear
    (and wrong)."""
    n = len(rows)
    correct = sum(pred == item["answer"] for item, pred in rows)
    unclear = sum(pred is None for _, pred in rows)
    return {
        "n": n,
        "accuracy": correct / n if n else None,
        "correct": correct,
        "unclear": unclear,
        "unclear_rate": unclear / n if n else None,
    }
