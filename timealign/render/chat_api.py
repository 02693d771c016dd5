"""The canonical strings of `eval.backend=chat` (`timealign.backends.chat`): the suites' string-in/string-out flow
(and the resume cache keyed by prompt strings) carries an API model's request and reply as canonical JSON.

- a *request* string `{"messages": [...], "tools": [...]}` (`request_string`; the TicToc suite renders it with
  `timealign.suites.tictoc.requests.ChatRequestRenderer`);
- a *reply* string `{"content": ..., "tool_calls": [...], "finish_reason": ...}` (`reply_string`), the message as the
  server returned it: tool calls as `{"id", "type", "function": {"name", "arguments"}}` with the arguments string
  as sent, plus `reasoning` where the server returned one. `parse_reply` reads it back; tool-call detection (the
  `api` family of `timealign.render.tool_calls`) and data prep's generated answers decide on it.

Below the data layer, so data prep, the suites and the backend share one reading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def request_string(messages: list[dict], tools: list | None) -> str:
    """The canonical request: messages and tools in their given key order (deterministic for the same sample)."""
    return json.dumps({"messages": messages, "tools": list(tools) if tools else []}, ensure_ascii=False)


@dataclass
class ChatReply:
    """One assistant message as the server returned it. `tool_calls`: [] when it made none."""

    content: str | None
    tool_calls: list[dict] = field(default_factory=list)
    finish_reason: str | None = None
    reasoning: str | None = None

    @property
    def empty(self) -> bool:
        """Neither content nor a call (the authors' handler returned "[ERROR]" for such a reply)."""
        return not self.content and not self.tool_calls


def reply_text(reply: ChatReply) -> str:
    """Everything the model wrote in a reply (content, reasoning, tool names and arguments), for the length bound."""
    parts = [reply.content, reply.reasoning]
    for call in reply.tool_calls:
        parts += [call["function"].get("name"), call["function"].get("arguments")]
    return "".join(part if isinstance(part, str) else json.dumps(part) for part in parts if part is not None)


def reply_string(reply: ChatReply) -> str:
    out: dict[str, Any] = {
        "content": reply.content,
        "tool_calls": reply.tool_calls,
        "finish_reason": reply.finish_reason,
    }
    if reply.reasoning:
        out["reasoning"] = reply.reasoning
    return json.dumps(out, ensure_ascii=False)


def parse_reply(text: str) -> ChatReply:
    """A reply string back as a ChatReply; anything else is a ValueError naming it."""
    try:
        data = json.loads(text)
        reply = ChatReply(
            content=data["content"],
            tool_calls=list(data["tool_calls"]),
            finish_reason=data.get("finish_reason"),
            reasoning=data.get("reasoning"),
        )
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(
            f'not a chat reply of eval.backend=chat ({{"content": ..., "tool_calls": [...]}}): {text[:120]!r}'
        ) from None
    if reply.content is not None and not isinstance(reply.content, str):
        raise ValueError(f"a chat reply's content must be a string or null: {text[:120]!r}")
    return reply
