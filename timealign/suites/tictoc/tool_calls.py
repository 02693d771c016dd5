"""Did the model call a tool? Tool-call detection per chat-template family.

The TicToc metric counts every attempt (Sec. 3, footnote 1): a malformed call or a hallucinated tool name still
counts, so detection looks for each family's call syntax, not for a valid call.
"""

from __future__ import annotations

import json
import re
from typing import Callable

_HERMES = re.compile(r"<tool_call>")  # Qwen2.5/Qwen3 and the tiny template: <tool_call>{...}</tool_call>
_MISTRAL = re.compile(r"\[TOOL_CALLS\]")
_LLAMA_TAG = re.compile(r"<\|python_tag\|>")


def _strip_think(text: str) -> str:
    # Qwen3 reasoning: only what follows the reasoning block is the action.
    if "</think>" in text:
        return text.split("</think>", 1)[1]
    return text


def _llama3(text: str) -> bool:
    """Llama 3.x custom tools: a JSON object {"name": ..., "parameters": ...} as the reply, or <|python_tag|>."""
    if _LLAMA_TAG.search(text):
        return True
    body = text.strip()
    if not body.startswith("{"):
        return False
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        # A truncated generation that opens like a call still counts as an attempt.
        return bool(re.match(r'\{\s*"(name|function)"\s*:', body))
    return isinstance(obj, dict) and "name" in obj and ("parameters" in obj or "arguments" in obj)


DETECTORS: dict[str, Callable[[str], bool]] = {
    "tiny": lambda t: bool(_HERMES.search(t)),
    "qwen": lambda t: bool(_HERMES.search(_strip_think(t))),
    "llama3": _llama3,
    "mistral": lambda t: bool(_MISTRAL.search(t)),
}


def known_families() -> list[str]:
    return sorted(DETECTORS)


def detect_family(chat_template: str | None) -> str:
    """Guess the family from a tokenizer's chat template; an unknown template is a clear error."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|start_header_id|>" in template:
        return "llama3"
    if "<tool_call>" in template and "<|im_start|>" in template:
        return "tiny" if "# Tools" in template and "<tools>" not in template else "qwen"
    raise ValueError("cannot tell the tool-call format of this chat template; set eval.family to one of: "
                     + ", ".join(known_families()))


def is_tool_call(text: str, family: str) -> bool:
    try:
        detector = DETECTORS[family]
    except KeyError:
        raise ValueError(f"unknown tool-call family {family!r}; known: {', '.join(known_families())}") from None
    return detector(text)
