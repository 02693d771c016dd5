"""The elapsed-time rule as a backend (`eval.backend=clock`): no model; a tool call when the agent's latest tool
result is older than `eval.clock_seconds` (default 1800 s) at the time of the reply, or when there is none.

The rule is the baseline a trained model's TicToc NAR is read against (issue 33; NOTES.md "The hub release of TicToc
and the elapsed-time rule"). It decides on the structured sample, not on a rendered prompt:

- the reply time is the time of the conversation's last message (the final user question; in v1 data the time of the
  sample's elapse level, as `timealign.data.tictoc` turns each record into samples);
- the last tool result is the latest `tool` message before that question; its age is reply time - its time, in
  seconds, fractional seconds and time zones included (`timealign.render.timefmt.parse_time`);
- call when there is no earlier tool result, or when age > the threshold (an age equal to it is not older).

So that the rule's decisions go through the same detection, scoring, bootstrap and breakdowns as a model's, it speaks
the string-in/string-out flow of `eval.backend=chat` (`timealign.render.chat_api`): its "prompt" is the canonical
request string `{"messages": [...], "tools": [...]}` of the sample's messages with their times (`clock_request`, which
the TicToc suite renders with `ClockRequestRenderer`), and its output is a canonical chat reply: the latest earlier
tool call re-issued as a structured call, or a text answer that says the result is fresh enough. Tool-call detection
reads those replies as the `api` family (`timealign.render.tool_calls`), under either protocol.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from timealign.render.chat_api import ChatReply, reply_string, request_string
from timealign.render.timefmt import parse_time

DEFAULT_SECONDS = 1800.0
RULE = "a tool call when the last tool result is older than {seconds:g} s at the reply time, or when there is none"


def _time(message: dict, what: str) -> datetime:
    value = message.get("time")
    if value in (None, "", []):
        role = message.get("role")
        raise ValueError(f"the elapsed-time rule needs the time of {what}; this {role} message has none")
    if isinstance(value, list):
        raise ValueError(
            f"{what} has a list of times ({value!r}): give the rule one sample per elapse level "
            "(timealign.data.tictoc turns each v1 record into them)"
        )
    return parse_time(value)


def tool_result_age(messages: list[dict]) -> float | None:
    """Seconds from the latest `tool` message before the last message (the question) to the last message's time;
    None when no tool result comes before it. Raises ValueError when a time it needs is missing or they go back."""
    if not messages:
        raise ValueError("the elapsed-time rule got a sample with no messages")
    reply_time = _time(messages[-1], "the reply (the last message)")
    last = next((m for m in reversed(messages[:-1]) if m.get("role") == "tool"), None)
    if last is None:
        return None
    age = (reply_time - _time(last, "the last tool result")).total_seconds()
    if age < 0:
        raise ValueError(f"the last tool result ({last['time']}) is later than the reply ({messages[-1]['time']})")
    return age


def clock_calls(messages: list[dict], seconds: float = DEFAULT_SECONDS) -> bool:
    """The rule's decision: True (call the tool) when there is no earlier tool result or it is older than
    `seconds`."""
    age = tool_result_age(messages)
    return age is None or age > seconds


def check_seconds(seconds: Any) -> float:
    """`eval.clock_seconds` as a float; anything else is a ValueError naming the key."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"eval.clock_seconds must be a number of seconds >= 0, got {seconds!r}")
    return float(seconds)


def _rule_message(message: dict) -> dict:
    """What the rule reads of a message: role and time, and the calls of an assistant message (to re-issue one)."""
    time = message.get("time")
    if isinstance(time, datetime):
        time = time.isoformat()
    out: dict[str, Any] = {"role": message.get("role"), "time": time}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or call
        arguments = fn.get("arguments")
        calls.append(
            {
                "name": fn.get("name"),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
            }
        )
    if calls:
        out["tool_calls"] = calls
    return out


def clock_request(messages: list[dict], tools: Any = None) -> str:
    """The canonical request string the clock backend reads (`timealign.render.chat_api.request_string`)."""
    decoded = json.loads(tools) if isinstance(tools, str) else tools
    return request_string([_rule_message(m) for m in messages], list(decoded or []))


def _call_to_reissue(messages: list[dict], tools: list) -> dict:
    """The latest call in the conversation (the one whose result is stale), else the first tool with no arguments,
    else (a sample with neither) a call with no name: the decision is to call, whatever there is to call."""
    for message in reversed(messages):
        calls = message.get("tool_calls") or []
        if calls:
            return dict(calls[-1])
    if tools:
        fn = tools[0].get("function") or tools[0]
        return {"name": fn.get("name"), "arguments": "{}"}
    return {"name": None, "arguments": "{}"}


def clock_reply(messages: list[dict], tools: list, seconds: float) -> ChatReply:
    """The rule's reply to one sample: a structured call re-issuing the latest call, or a text answer."""
    age = tool_result_age(messages)
    if age is None or age > seconds:
        call = _call_to_reissue(messages, tools)
        return ChatReply(
            content=None,
            tool_calls=[{"id": "clock", "type": "function", "function": call}],
            finish_reason="tool_calls",
        )
    return ChatReply(
        content=f"(elapsed-time rule: the last tool result is {age:g} s old, not older than {seconds:g} s: no call)",
        finish_reason="stop",
    )


class ClockBackend:
    """`eval.backend=clock`: the rule as a backend of the evaluator (`timealign.backends.base` interface).

    `generate` takes `clock_request` strings and returns canonical chat replies; there is no tokenizer and no
    sampling. The TicToc suite does not cache its replies (they are recomputed, so a changed rule never reads old
    ones); `fingerprint` still carries the threshold for any caller that does.
    """

    name = "clock"
    tokenizer = None

    def __init__(self, seconds: float = DEFAULT_SECONDS):
        self.seconds = check_seconds(seconds)
        self.sampling: dict = {}
        self.model_id = f"elapsed-time rule, {self.seconds:g} s"

    @property
    def fingerprint(self) -> str:
        return f"clock:{self.seconds!r}"

    @property
    def rule(self) -> str:
        return RULE.format(seconds=self.seconds)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 0, desc: str | None = None, **sampling):
        """One reply per request string (a list); a request the rule cannot decide (a missing time) raises
        ValueError. The rule has no token limit and no sampling: `max_new_tokens` and sampling settings do not
        apply."""
        outputs = []
        for prompt in prompts:
            request = json.loads(prompt)
            outputs.append(reply_string(clock_reply(request["messages"], request["tools"], self.seconds)))
        return outputs

    def close(self) -> None:
        """Nothing to free."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
