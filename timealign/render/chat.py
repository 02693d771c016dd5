"""The one prompt-rendering module: chat template + timestamps + tools + system-prompt modes.

Data prep, training and evaluation all call `PromptRenderer`, so the model is trained on exactly the text it is
evaluated on (train/eval skew is the classic bug of this field).

Timestamps follow the TicToc paper's open-weight setup (Sec. 3, "Evaluation setup"): the wall-clock time
`[2025-12-04T10:22:44Z]` sits at the very start of every user, assistant and tool message, right after the
template's role header. We get there by prefixing each message's content before the model's own chat template runs,
which for text messages is byte-identical to editing the template and works for every model family. The generation
prompt gets the current time too (a deployed system stamps the reply it is about to produce), so the completion, a
tool call or a direct answer, starts right after the timestamp. Templates that drop the content of tool-call
messages (Llama 3.1 does) lose that message's timestamp: `PromptRenderer.check_template` reports it.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import logging
from dataclasses import dataclass
from typing import Any

from timealign.render.paper import PaperRenderer
from timealign.render.timefmt import (
    elapsed_badge,
    format_timestamp,
    parse_time,
)

logger = logging.getLogger(__name__)

# System-prompt additions of the TicToc paper (Sec. 3.4 and Fig. 12).
# data.elapsed_separator: the text between the elapsed badge and the reply it stamps.
ELAPSED_SEPARATORS = {"direct": "", "newline": "\n", "space": " "}
REMINDER_PROMPT = "Note that the environment may be dynamic. Be aware of the time elapsed."
RULES_PROMPT = (
    "Note that the environment may be dynamic. Be aware of the time elapsed. Depending on the scenario and how much "
    "time has passed, whether it's preferable to call a tool or not can vary.\n\n"
    "For example, suppose you were a smart garden assistant with access to a tool that measures soil moisture "
    "levels for houseplants. If you successfully retrieved the moisture level just five minutes ago and it read "
    '"Wet", it is physically impossible for the soil to have dried out in such a short time. Therefore, calling the '
    "tool again is unnecessary. However, if four days have passed since the last check, natural evaporation has "
    "certainly occurred, so you must call the tool again to see if the plants need watering.\n\n"
    "As another example, suppose you were a student aid agent checking an online gradebook to see if a professor has "
    'posted final exam results. If you checked the portal a few seconds ago and the grade was "Pending", calling '
    "the tool again immediately is not needed, as human grading takes time. But if a week has passed since your "
    "last check, it is highly probable the professor has finished grading, so it is clearly better to query the "
    "tool again to get the latest result."
)
# Llama 3.1's template default for "Today Date"; used when prompts carry no times (see `template_date`).
DEFAULT_TEMPLATE_DATE = "26 Jul 2024"
PROMPT_MODES = {"none": None, "reminder": REMINDER_PROMPT, "rules": RULES_PROMPT}


def parse_tool_arguments(arguments: Any) -> Any:
    """Tool-call arguments as a mapping. OpenAI data stores a JSON string; chat templates want a mapping.

    A Python-literal dict string (`"{'location': 'Malibu'}"`, seen in the TicToc v1 release) is accepted too.
    """
    if arguments is None:
        return {}
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except json.JSONDecodeError as err:
        try:
            value = ast.literal_eval(arguments)
        except (ValueError, SyntaxError):
            raise ValueError(f"tool-call arguments are not valid JSON: {arguments[:80]!r} ({err})") from None
        if not isinstance(value, dict):
            raise ValueError(f"tool-call arguments are not a mapping: {arguments[:80]!r}") from None
        return value


def clean_message(message: dict) -> dict:
    """Drop Arrow's null padding and our `time` key; normalise tool calls for chat templates."""
    out = {k: v for k, v in message.items() if v is not None and k != "time"}
    if out.get("tool_calls"):
        calls = []
        for call in out["tool_calls"]:
            fn = call.get("function") or call
            fixed = {
                "type": "function",
                "function": {"name": fn["name"], "arguments": parse_tool_arguments(fn.get("arguments"))},
            }
            if call.get("id"):
                fixed["id"] = call["id"]
            calls.append(fixed)
        out["tool_calls"] = calls
    else:
        out.pop("tool_calls", None)
    if out.get("role") == "assistant" and "content" not in out:
        out["content"] = ""
    return out


def assign_call_ids(messages: list[dict]) -> list[dict]:
    """Give each tool call without an `id` (allowed by the TicToc layout) a deterministic one, and the tool message
    answering it (the next one without a `tool_call_id`) the same; in place, returns `messages`.

    Chat formats link a result to its call by id (OpenAI's API requires one; Mistral's template refuses a call
    without a 9-character one), and a served model always sees ids, so the `timealign` protocol writes the link the
    data left to the order. `call00001`, `call00002`, ... in conversation order (9 alphanumeric characters, as
    Mistral's template needs), skipping ids the conversation already uses: the same record always renders the same
    prompt. (The `paper` protocol renders calls as the data has them: timealign/render/paper.py.)
    """
    used = {c.get("id") for m in messages for c in m.get("tool_calls") or () if c.get("id")}
    counter, waiting = 0, []  # ids given to the latest call message's id-less calls, not yet answered
    for message in messages:
        if message.get("tool_calls"):
            waiting = []
            for call in message["tool_calls"]:
                if call.get("id"):
                    continue
                counter += 1
                while f"call{counter:05d}" in used:
                    counter += 1
                call["id"] = f"call{counter:05d}"
                used.add(call["id"])
                waiting.append(call["id"])
        elif message.get("role") == "tool" and not message.get("tool_call_id") and waiting:
            message["tool_call_id"] = waiting.pop(0)
    return messages


def _decode_tools(tools: Any) -> list[dict] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        tools = json.loads(tools)
    return list(tools) or None  # `or None`: some templates render tool boilerplate for an empty list


@dataclass
class PromptRenderer:
    """Renders conversations with per-message times into model text.

    Messages are OpenAI-style dicts with an optional ISO `time` key. `timestamps=False` is the paper's
    no-timestamp condition. `prompt_mode` adds the paper's reminder or few-shot rules to the system prompt.
    `elapsed=True` (with timestamps) also writes how old the agent's latest information is after the stamp of the
    reply being generated: `[2025-08-10T12:58:51Z] (+3 minutes 13 seconds since the last tool result)`, the "time
    elapsed" badge the TicToc annotators saw ("how much time has passed since the previous information was
    retrieved", App. B.5, Fig. 13), so a model need not subtract two ISO strings itself.
    """

    tokenizer: Any
    timestamps: bool = True
    prompt_mode: str = "none"
    elapsed: bool = False
    elapsed_separator: str = "direct"  # a key of ELAPSED_SEPARATORS: what follows the badge, before the reply

    @classmethod
    def for_data(
        cls,
        tokenizer: Any,
        data: Any,
        *,
        timestamps: bool | None = None,
        prompt_mode: str = "none",
        family: str | None = None,
        reasoning: bool | None = None,
    ) -> "PromptRenderer | PaperRenderer":
        """The renderer a recipe's `data` section asks for: the one way to build a chat renderer from settings.

        Training, the tiny agent's warm-up and the TicToc suite all build it here, so a render option added to
        `DataSection` reaches training and evaluation alike. `timestamps` and `prompt_mode` are the evaluation-time
        overrides the eval command line allows (None: the recipe's `data.timestamps`; training renders "none").
        `data.protocol=paper` gives the TicToc authors' rendering (`PaperRenderer`), where `family` overrides the
        template read off the tokenizer and `reasoning` (the recipe's `eval.reasoning`) is the Qwen3 thinking run.
        """
        timestamps = data.timestamps if timestamps is None else timestamps
        protocol = getattr(data, "protocol", "timealign")
        if protocol == "paper":
            return PaperRenderer(
                tokenizer,
                timestamps=timestamps,
                prompt_mode=prompt_mode,
                family=family,
                thinking=bool(reasoning),
                elapsed=data.elapsed,
            )
        if protocol != "timealign":
            raise ValueError(f"data.protocol must be timealign or paper, got {protocol!r}")
        return cls(
            tokenizer,
            timestamps=timestamps,
            prompt_mode=prompt_mode,
            elapsed=data.elapsed,
            elapsed_separator=data.elapsed_separator,
        )

    protocol = "timealign"

    def __post_init__(self):
        if self.prompt_mode not in PROMPT_MODES:
            raise ValueError(f"unknown prompt_mode {self.prompt_mode!r}; known: {', '.join(PROMPT_MODES)}")
        if self.elapsed_separator not in ELAPSED_SEPARATORS:
            raise ValueError(
                f"unknown elapsed_separator {self.elapsed_separator!r}; known: {', '.join(ELAPSED_SEPARATORS)}"
            )
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; timealign renders every prompt through one")

    # -- message preparation -------------------------------------------------------------------------------
    def _prepare_one(self, message: dict, history: list[dict] | None = None) -> dict:
        """One template-ready message; `history` (the messages before it) is given for a reply, to stamp its badge."""
        msg = clean_message(copy.deepcopy(dict(message)))
        if self.timestamps and msg.get("role") in ("user", "assistant", "tool"):
            if message.get("time") is None:
                raise ValueError(f"a {msg['role']} message has no `time` but timestamps are on")
            msg["content"] = self.reply_stamp(history, message["time"]) + (msg.get("content") or "")
        return msg

    def reply_stamp(self, history: list[dict] | None, now: Any) -> str:
        """The stamp at the start of a reply: its time, plus the elapsed badge when `elapsed` and `history` given."""
        stamp = format_timestamp(now)
        if self.elapsed and history is not None:
            badge = elapsed_badge(history, now)
            stamp += badge + (ELAPSED_SEPARATORS[self.elapsed_separator] if badge else "")
        return stamp

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        """Template-ready copies: timestamps prefixed, system addition applied, tool calls normalised."""
        out = assign_call_ids([self._prepare_one(m) for m in messages])
        addition = PROMPT_MODES[self.prompt_mode]
        if addition:
            if out and out[0].get("role") == "system":
                out[0]["content"] = (out[0].get("content") or "") + "\n\n" + addition
            else:
                out.insert(0, {"role": "system", "content": addition})
        return out

    def template_date(self, messages: list[dict]) -> str:
        """The date templates may print (Llama's "Today Date: 26 Jul 2024"), fixed so no prompt depends on the day
        it is rendered (Llama 3.2's template would print today's date): the conversation's first date with
        timestamps on, the Llama 3.1 template's own default without (no time information leaks in)."""
        if self.timestamps:
            for message in messages:
                if message.get("time"):
                    return parse_time(message["time"]).strftime("%d %b %Y")
        return DEFAULT_TEMPLATE_DATE

    def _apply(self, messages: list[dict], tools, add_generation_prompt: bool, date: str) -> str:
        # date_string is the variable Llama 3.x templates read; templates without it ignore extra variables.
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=_decode_tools(tools),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            date_string=date,
        )
        # Rendered text is tokenized later with add_special_tokens=True (TRL's string path, vLLM, our HF backend),
        # which adds BOS again for Llama-style tokenizers: leave the template's BOS out so there is exactly one.
        bos = self._auto_bos
        if bos and text.startswith(bos):
            text = text[len(bos) :]
        return text

    @functools.cached_property
    def _auto_bos(self) -> str | None:
        """The BOS token the tokenizer adds by itself, if any."""
        bos, bos_id = getattr(self.tokenizer, "bos_token", None), getattr(self.tokenizer, "bos_token_id", None)
        if not bos or bos_id is None:
            return None
        ids = self.tokenizer("x", add_special_tokens=True)["input_ids"]
        return bos if ids and ids[0] == bos_id else None

    @staticmethod
    def reply_time(messages: list[dict]) -> Any:
        """The time the reply is produced: the last message's (the final user question's) time."""
        return messages[-1].get("time") if messages else None

    # -- public API ----------------------------------------------------------------------------------------
    def prompt(self, messages: list[dict], tools: Any = None) -> str:
        """The generation prompt that training and evaluation both feed the model."""
        text = self._apply(
            self.prepare_messages(messages), tools, add_generation_prompt=True, date=self.template_date(messages)
        )
        if self.timestamps:
            text += self.reply_stamp(messages, self.reply_time(messages))
        return text

    def completion(self, messages: list[dict], response: dict, tools: Any = None) -> str:
        """The text of `response` (one assistant message) as the template renders it after `prompt()`."""
        prepared = self.prepare_messages(messages)
        prompt_plain = self._apply(prepared, tools, True, date=self.template_date(messages))
        return self._completion(messages, prepared, prompt_plain, response, tools)

    def _completion(self, messages, prepared, prompt_plain: str, response: dict, tools) -> str:
        reply = dict(response)
        if self.timestamps:
            reply["time"] = self.reply_time(messages)
        full = self._apply(
            prepared + [self._prepare_one(reply, messages)],
            tools,
            add_generation_prompt=False,
            date=self.template_date(messages),
        )
        if not full.startswith(prompt_plain):
            raise ValueError(
                "the chat template renders the prompt differently once a reply follows it; cannot split "
                "prompt and completion (is the template's generation prompt consistent?)"
            )
        text = full[len(prompt_plain) :]
        if self.timestamps:
            stamp = self.reply_stamp(messages, self.reply_time(messages))
            if text.startswith(stamp):
                text = text[len(stamp) :]
            else:
                # The template dropped the reply's content (e.g. Llama 3.1 on tool calls): the prompt still ends
                # with the stamp, and the completion is the template's own rendering of the reply.
                logger.warning(
                    "chat template drops the timestamp of this %s reply",
                    "tool-call" if response.get("tool_calls") else "text",
                )
        # End on the EOS token itself (ChatML adds "\n" after <|im_end|>); TRL would otherwise append a second EOS.
        eos = getattr(self.tokenizer, "eos_token", None)
        if eos and text.rstrip().endswith(eos):
            text = text.rstrip()
        return text

    def pair(self, messages: list[dict], chosen: dict, rejected: dict, tools: Any = None) -> dict[str, str]:
        """TRL's standard preference layout (strings) for one conversational pair."""
        prepared = self.prepare_messages(messages)
        prompt_plain = self._apply(prepared, tools, add_generation_prompt=True, date=self.template_date(messages))
        prompt = prompt_plain + (self.reply_stamp(messages, self.reply_time(messages)) if self.timestamps else "")
        return {
            "prompt": prompt,
            "chosen": self._completion(messages, prepared, prompt_plain, chosen, tools),
            "rejected": self._completion(messages, prepared, prompt_plain, rejected, tools),
        }

    def check_template(self, messages: list[dict], tools: Any = None) -> list[str]:
        """Names the roles whose timestamps the template drops (empty list: all stamps rendered)."""
        if not self.timestamps:
            return []
        text = self._apply(
            self.prepare_messages(messages), tools, add_generation_prompt=False, date=self.template_date(messages)
        )
        return [
            m["role"]
            for m in messages
            if m.get("role") in ("user", "assistant", "tool") and format_timestamp(m["time"]) not in text
        ]
