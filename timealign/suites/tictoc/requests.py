"""TicToc samples as chat-completions requests for API models (`eval.backend=chat`), in either prompt protocol.

An API model gets messages and tool schemas, and its server applies the model's own template, so the protocols here
decide the *messages*, not a prompt string. `ChatRequestRenderer.prompt(messages, tools)` returns the canonical
request string of `timealign.backends.chat` (`{"messages": [...], "tools": [...]}`), which the suite caches and the
backend posts.

`paper`: the TicToc authors' API handler (chengez/TicToc `inference/api/openai.py` `format_input`, prepared by
`timealign.render.paper.paper_messages(..., api=True)`): `[<time>] ` with a trailing space before the text of every
message with text and no tool calls, the system message included; the reminder / rules text of their
`inference/sys_pmts.py` appended to the system message; a tool-call message keeps `tool_calls` as the data has them
(arguments the data's string, a Python-literal one too) and gets no `content`; a tool message keeps `tool_call_id`
and loses `name`. The tools are the sample's `function` list as given.

`timealign`: the same messages as `PromptRenderer` prepares them for a local model, adapted to what an API takes:

| choice                                        | why                                                          |
|-----------------------------------------------|--------------------------------------------------------------|
| `[2025-08-11T14:02:57Z]` (no space) on user,  | the stamps the local models are trained and evaluated on     |
| assistant and tool messages, not the system   | (`PromptRenderer`), so API and local numbers compare         |
| tool-call messages stamped too (content =     | when the agent last acted is the information the task is    |
| the stamp, beside `tool_calls`)               | about; an API takes content beside tool calls                |
| arguments as normalised JSON strings          | the API's type; a Python-literal string (`{'a': 1}` in v1)   |
|                                               | becomes JSON, as `PromptRenderer` normalises it (vLLM would  |
|                                               | replace an unparseable one by {})                            |
| tool messages lose `name`                     | OpenAI's tool message is role, content, tool_call_id         |
| a call without an id gets `call00001`, ...    | the API requires ids (`render.chat.assign_call_ids`)         |
| system additions joined with a blank line     | `PromptRenderer`'s reminder / rules texts (Fig. 12)          |
| no stamp on the reply                         | a chat API cannot prefill the assistant turn: the last       |
|                                               | message's stamp is the reply's time; so no elapsed badge     |
|                                               | (`data.elapsed` is refused, not dropped)                     |

What the server's template does with the messages (a "Today Date" line, where stamps land) is the server's; with a
vLLM-served open model use `eval.backend=openai` to send our rendering instead.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from timealign.backends.clock import clock_request, tool_result_age
from timealign.render.chat import PROMPT_MODES, assign_call_ids, clean_message
from timealign.render.chat_api import request_string
from timealign.render.paper import PAPER_PROMPT_MODES, paper_messages
from timealign.render.timefmt import format_timestamp

PROTOCOLS = ("timealign", "paper")


def timealign_api_messages(messages: list[dict], *, timestamps: bool, prompt_mode: str = "none") -> list[dict]:
    """The `timealign` protocol's request messages (the module table)."""
    out = []
    for message in messages:
        msg = clean_message(copy.deepcopy(dict(message)))
        role = msg.get("role")
        if role == "tool":
            msg.pop("name", None)
        if timestamps and role in ("user", "assistant", "tool"):
            if message.get("time") is None:
                raise ValueError(f"a {role} message has no `time` but timestamps are on")
            msg["content"] = format_timestamp(message["time"]) + (msg.get("content") or "")
        if msg.get("tool_calls"):
            for call in msg["tool_calls"]:
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
            if not msg.get("content"):
                msg.pop("content", None)
        out.append(msg)
    assign_call_ids(out)  # an API requires ids: calls without one get PromptRenderer's deterministic ids
    addition = PROMPT_MODES[prompt_mode]
    if addition:
        if out and out[0].get("role") == "system":
            out[0]["content"] = (out[0].get("content") or "") + "\n\n" + addition
        else:
            out.insert(0, {"role": "system", "content": addition})
    return out


def _decode_tools(tools: Any) -> list:
    if tools is None:
        return []
    return list(json.loads(tools) if isinstance(tools, str) else tools)


@dataclass
class ChatRequestRenderer:
    """`PromptRenderer`'s interface (`prompt`, `protocol`, `timestamps`, `prompt_mode`, `elapsed`) for API models."""

    protocol: str = "timealign"
    timestamps: bool = True
    prompt_mode: str = "none"
    elapsed: bool = False

    @classmethod
    def for_data(cls, data: Any, *, timestamps: bool | None = None, prompt_mode: str = "none") -> ChatRequestRenderer:
        """The renderer a recipe's `data` section asks for (`data.protocol`, `data.timestamps`, `data.elapsed`)."""
        return cls(
            protocol=getattr(data, "protocol", "timealign"),
            timestamps=data.timestamps if timestamps is None else timestamps,
            prompt_mode=prompt_mode,
            elapsed=bool(getattr(data, "elapsed", False)),
        )

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"data.protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        modes = PAPER_PROMPT_MODES if self.protocol == "paper" else PROMPT_MODES
        if self.prompt_mode not in modes:
            raise ValueError(f"unknown prompt_mode {self.prompt_mode!r}; known: {', '.join(modes)}")
        if self.elapsed and (self.protocol == "paper" or self.timestamps):
            raise ValueError(
                "data.elapsed writes the elapsed badge after the reply's stamp, which a chat API cannot "
                "prefill (eval.backend=chat); set data.elapsed=false"
            )

    def messages(self, messages: list[dict]) -> list[dict]:
        if self.protocol == "paper":
            return paper_messages(messages, timestamps=self.timestamps, prompt_mode=self.prompt_mode, api=True)
        return timealign_api_messages(messages, timestamps=self.timestamps, prompt_mode=self.prompt_mode)

    def prompt(self, messages: list[dict], tools: Any = None) -> str:
        """The canonical request string for one sample's prompt messages and tools."""
        return request_string(self.messages(messages), _decode_tools(tools))


@dataclass
class ClockRequestRenderer:
    """What `eval.backend=clock` (the elapsed-time rule, `timealign.backends.clock`) reads of a sample: its messages'
    roles and times and its calls, as the canonical request string; no prompt is rendered for any model.

    `prompt` also checks that the rule can decide the sample (the reply and the last tool result have times), so a
    sample it cannot decide stops the run here, as bad data, instead of becoming a failed generation. The attributes
    are `PromptRenderer`'s, for the report's settings: the rule reads every time (`timestamps`), no system prompt.
    """

    protocol: str = "clock"
    timestamps: bool = True
    prompt_mode: str = "none"
    elapsed: bool = False

    def prompt(self, messages: list[dict], tools: Any = None) -> str:
        tool_result_age(messages)
        return clock_request(messages, tools)
