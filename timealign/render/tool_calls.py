"""Did the model call a tool? Tool-call detection per chat-template family, under two protocols.

The TicToc metric counts every attempt (Sec. 3, footnote 1): a malformed call or a hallucinated tool name still
counts, so detection looks for each family's call syntax, not for a valid call.

Two protocols decide the edge cases:

- `paper`: what the authors' scorer does (chengez/TicToc, `get_metric.py` `__main__` with the signatures of
  `inference/model_map.py` `MODEL_TO_TOOLCALL_SIGNATURE`). Their vLLM handlers (`inference/local/*.py`
  `run_inference`) decode with vLLM's default `skip_special_tokens=True` and `.strip()` the text; the scorer then
  calls an output an attempt when every `<AND>`-joined signature is a substring of it: Llama 3.x `"name"` and
  `"parameters"`, Qwen2.5/Qwen3 `<tool_call>` and `</tool_call>`, Ministral `"arguments"` and `"name"`,
  DeepSeek-R1-Distill `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`. An empty output (`out == ""`) is dropped from
  the denominator. The Qwen3 reasoning run (`qwen3_reason.py`) has no signature of its own; it is scored here with
  the Qwen one, on the whole text, reasoning included.
- `timealign` (default): the family's own call syntax in the part of the output that is the action (after a
  reasoning block), plus a call-shaped JSON object anywhere in it; an empty output stays in the denominator as
  "no call". timealign decodes with special tokens kept, so markers such as `[TOOL_CALLS]` and `<|python_tag|>`
  are visible to it.

A "call-shaped" JSON object is `{"name": ..., "arguments"|"parameters": ...}` or the OpenAI-style
`{"type": "function", "function": {...}}` wrapping one, complete, or cut off by the end of the output while its
keys so far are a call's (`{"name": "get_st`, `{"name": "f", "parameters": {"sym`, `{"function": {"name": `).

| pattern (family)                              | paper           | timealign | why timealign decides so          |
|-----------------------------------------------|-----------------|-----------|-----------------------------------|
| text before a JSON call (llama3, mistral)     | call            | call      | a preamble does not undo the call |
| text before `<tool_call>` (qwen, tiny)        | call            | call      | same                              |
| fenced ```json call (llama3, mistral)         | call            | call      | the fence is only presentation    |
| fenced (or bare) JSON call without the tags   | no call         | call      | a malformed call is an attempt    |
| (qwen, tiny, deepseek_r1)                     |                 |           | (footnote 1)                      |
| nested {"type":"function","function":{...}}   | call iff its    | call      | the OpenAI tool-call shape        |
|                                               | keys match the  |           |                                   |
|                                               | signature       |           |                                   |
| Ministral JSON without [TOOL_CALLS]           | call            | call      | the token is often left out       |
| a think block drafts a call, then the model   | call (the draft | no call   | reasoning is not the action: the  |
| answers (qwen, deepseek_r1)                   | has both marks) |           | paper counts a call the model     |
|                                               |                 |           | decided against (a bug)           |
| reasoning cut off before `</think>` (qwen;    | as above        | no call   | the model never reached its       |
| deepseek_r1, whose prompt opens `<think>`)    |                 |           | action                            |
| <|python_tag|> builtin call (llama3)          | no call (the    | call      | Llama's tool-action marker; it    |
|                                               | tag is skipped) |           | ends in <|eom_id|>, awaiting a    |
|                                               |                 |           | tool result: it acts, not answers |
| Llama `"arguments"` for `"parameters"`        | no call         | call      | the same call, the intent is clear|
| truncated call (every family)                 | call only if    | call      | the cut is our token limit, not   |
|                                               | every mark made |           | the model's decision              |
|                                               | it in           |           |                                   |
| empty output                                  | left out of the | no call   | saying nothing is not calling;    |
|                                               | denominator     |           | dropping it rewards silence. The  |
|                                               |                 |           | count is reported in every        |
|                                               |                 |           | protocol                          |

API models (`api`, the replies of `eval.backend=chat`: `{"content": ..., "tool_calls": [...]}`, see
`timealign.render.chat_api`). The authors' handler (`inference/api/openai.py`) kept `content` when it was not empty,
else `str(tool_calls)` (the SDK objects' repr, e.g. `[ChatCompletionMessageToolCall(id=..., function=Function(...),
type='function')]`), else `[ERROR]`; the scorer counts a call when "ChatCompletionMessageToolCall" is in that string
and drops `[ERROR]` from the denominator.

| reply (api)                                   | paper           | timealign | why timealign decides so          |
|-----------------------------------------------|-----------------|-----------|-----------------------------------|
| structured tool_calls, no content             | call            | call      |                                   |
| text and structured tool_calls                | no call (the    | call      | the model called; the text is a   |
|                                               | text is kept)   |           | preamble (as text before a call)  |
| a call written in the content (a server       | no call         | call      | the same attempt, unparsed: its   |
| without a tool parser, or one that failed to  |                 |           | tags or call-shaped JSON          |
| parse it): <tool_call>, [TOOL_CALLS],         |                 |           | (footnote 1)                      |
| <|python_tag|>, DeepSeek markers, JSON        |                 |           |                                   |
| a call drafted in a think block, then text    | no call         | no call   | reasoning is not the action       |
| neither content nor tool_calls (empty)        | left out of the | no call   | as the empty output above         |
|                                               | denominator     |           |                                   |

Patterns not listed keep the earlier behaviour under `timealign`; under `paper` every output is scored with the
authors' substring test.
"""

from __future__ import annotations

import json
import re
from typing import Callable

from timealign.render.chat_api import parse_reply
from timealign.render.families import FAMILIES, ModelFamily

PROTOCOLS = ("timealign", "paper")

# Each family's call syntax, attempt signature and dropped special tokens live in its registry entry
# (timealign/render/families.py); `api` is eval.backend=chat's reply, not a template family.
API_SIGNATURE = (
    "ChatCompletionMessageToolCall",
)  # in the repr of the openai SDK of the paper's runs (paper_api_output)


def paper_signature(family: str) -> tuple[str, ...]:
    """The authors' attempt signature (all must occur) of `family`; tiny speaks the Qwen (Hermes) format."""
    return API_SIGNATURE if family == "api" else FAMILIES[family].paper_signature


_JSON_KEY = re.compile(r'"([^"\\]*)"\s*:')


def _action_part(text: str, *, prompt_opens_reasoning: bool = False) -> str:
    """What follows a reasoning block (Qwen3, R1 distills); nothing if the reasoning never closed.

    `prompt_opens_reasoning`: the generation prompt already ends in `<think>` (the R1-distill templates), so an
    output without `</think>` is all reasoning even though it shows no opening tag.
    """
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text or prompt_opens_reasoning:
        return ""
    return text


def _is_call_object(obj) -> bool:
    if isinstance(obj, list):
        return any(_is_call_object(item) for item in obj)
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("name"), str) and ("parameters" in obj or "arguments" in obj):
        return True
    return _is_call_object(obj.get("function")) or _is_call_object(obj.get("tool_calls"))


def _closes(text: str, start: int) -> bool:
    """Whether the JSON-ish object opened at `start` closes before the text ends (strings and escapes respected)."""
    depth, in_string, escaped = 0, False, False
    for ch in text[start:]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return True
    return False


def _opens_a_call(fragment: str) -> bool:
    """A cut-off object whose keys so far are those of a call: [type,] [function: {] name [, arguments|parameters]."""
    keys = _JSON_KEY.findall(fragment)
    while keys and keys[0] in ("type", "id", "function"):
        keys.pop(0)
    return bool(keys) and keys[0] == "name" and (len(keys) == 1 or keys[1] in ("arguments", "parameters"))


def has_call_json(text: str) -> bool:
    """A call-shaped JSON object anywhere in `text`, complete or cut off at the end of the text."""
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            if not _closes(text, i):  # opened and never closed: generation stopped inside it
                return _opens_a_call(text[i:])
            end = i + 1
        else:
            if _is_call_object(obj):
                return True
        i = text.find("{", end)
    return False


def family_detector(family: ModelFamily) -> Callable[[str], bool]:
    """The family's call syntax (its registry entry's `call_markers`) or call-shaped JSON in the output's action part
    (after any reasoning, as the entry's `reasoning` says)."""
    markers = re.compile(family.call_markers)

    def detect(text: str) -> bool:
        action = (
            text
            if family.reasoning == "none"
            else _action_part(text, prompt_opens_reasoning=family.reasoning == "prompt_opens")
        )
        return bool(markers.search(action)) or has_call_json(action)

    return detect


def _text_call_markers() -> re.Pattern:
    """Any family's call markers, for a call an API server returned as text."""
    return re.compile("|".join(dict.fromkeys(f.call_markers for f in FAMILIES.values())))


def _api(text: str) -> bool:
    """A chat-completions reply: structured tool calls, or a call written in the content after any reasoning."""
    reply = parse_reply(text)
    if reply.tool_calls:
        return True
    action = _action_part(reply.content or "")
    return bool(_text_call_markers().search(action)) or has_call_json(action)


def paper_api_output(text: str) -> str:
    """What the authors' API handler returned for this reply: the content if not empty, else the tool calls as the
    openai SDK of their runs printed them, else "" (their "[ERROR]", dropped by the scorer like an empty output).

    The SDK's class was `ChatCompletionMessageToolCall` then; openai >= 1.99 prints
    `ChatCompletionMessageFunctionToolCall`, which their signature no longer matches.
    """
    reply = parse_reply(text)
    if reply.content:
        return reply.content
    if reply.tool_calls:
        return (
            "["
            + ", ".join(
                f"ChatCompletionMessageToolCall(id={call.get('id')!r}, function=Function(arguments="
                f"{call['function'].get('arguments')!r}, name={call['function'].get('name')!r}), "
                f"type={call.get('type') or 'function'!r})"
                for call in reply.tool_calls
            )
            + "]"
        )
    return ""


def detector(family: str) -> Callable[[str], bool]:
    """Tool-call detection under `timealign` for a registered family or `api` (read from the registry each call,
    so a family added to FAMILIES is detected without another change)."""
    return _api if family == "api" else family_detector(FAMILIES[family])


def known_families() -> list[str]:
    return sorted([*FAMILIES, "api"])


def _check(family: str, protocol: str) -> None:
    if family not in known_families():
        raise ValueError(f"unknown tool-call family {family!r}; known: {', '.join(known_families())}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown evaluation protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def paper_visible_text(text: str, family: str) -> str:
    """The output as the authors' pipeline saw it: the tokenizer's special tokens dropped, whitespace stripped."""
    _check(family, "paper")
    if family == "api":  # a reply of eval.backend=chat: the string the authors' API handler returned
        return paper_api_output(text)
    return re.sub(FAMILIES[family].paper_special_tokens, "", text).strip()


def is_empty_output(text: str, family: str) -> bool:
    """An output with nothing in it but whitespace and special tokens (the authors' `out == ""`)."""
    return paper_visible_text(text, family) == ""


def is_tool_call(text: str, family: str, protocol: str = "timealign") -> bool:
    """Whether `text` is a tool-call attempt of `family`, decided as `protocol` decides (see the module table).

    Under `paper` an empty output is "no call" here; the metrics leave it out of the denominator.
    """
    _check(family, protocol)
    if protocol == "paper":
        visible = paper_visible_text(text, family)
        return all(mark in visible for mark in paper_signature(family))
    return detector(family)(text)
