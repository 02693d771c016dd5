"""A completion the model wrote, as an OpenAI chat message: `tool_calls` when it called a tool, else `content`.

Whether the text is a tool call is decided by the evaluator's detector (`timealign.render.tool_calls`,
`is_tool_call` under the `timealign` protocol), so a reply the gateway returns as a call is exactly what evaluation
counts as one. The calls themselves are the call-shaped JSON objects in the text (`{"name", "arguments" |
"parameters"}`, or wrapped as `{"function": {...}}`, or a list of them, as every family writes them), each given an
id `call_<24 hex>` and its arguments as a JSON string (the OpenAI type). A text the detector calls an attempt but
holding no complete call (cut off by max_tokens) comes back as content, unchanged, with the finish reason the upstream
gave; a client then sees what was written (the evaluator's `api` detection counts it as an attempt too).

The text before the first call is the message's content (None when empty). The family's special tokens (`<|im_end|>`,
`</s>`, ...) are dropped from content, as the chat API never shows them.
"""

from __future__ import annotations

import json
import re
import uuid

from timealign.render.families import FAMILIES
from timealign.render.tool_calls import is_tool_call


def _call(obj) -> dict | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        return _call(obj["function"])
    name = obj.get("name")
    if not isinstance(name, str) or not ("arguments" in obj or "parameters" in obj):
        return None
    arguments = obj.get("arguments", obj.get("parameters"))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def extract_calls(text: str) -> tuple[list[dict], int]:
    """The complete call-shaped JSON objects in `text` and where the first one starts (-1: none)."""
    decoder, calls, first = json.JSONDecoder(), [], -1
    i = min((p for p in (text.find("{"), text.find("[")) if p != -1), default=-1)
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            end = i + 1
        else:
            found = [c for c in (_call(o) for o in (obj if isinstance(obj, list) else [obj])) if c]
            if found:
                calls += found
                first = i if first == -1 else first
            else:
                end = i + 1
        nexts = [p for p in (text.find("{", end), text.find("[", end)) if p != -1]
        i = min(nexts) if nexts else -1
    return calls, first


def strip_special(text: str, family: str) -> str:
    return re.sub(FAMILIES[family].paper_special_tokens, "", text) if family in FAMILIES else text


def message_from_text(text: str, family: str) -> tuple[dict, bool]:
    """(the assistant message, whether it carries tool calls) for the model's raw completion `text`."""
    if is_tool_call(text, family):
        calls, first = extract_calls(text)
        if calls:
            before = strip_special(text[:first], family)
            marker = re.compile(FAMILIES[family].call_markers) if family in FAMILIES else None
            if marker is not None:
                found = marker.search(before)
                before = before[: found.start()] if found else before
            content = before.strip() or None
            return {"role": "assistant", "content": content, "tool_calls": calls}, True
    return {"role": "assistant", "content": strip_special(text, family)}, False
