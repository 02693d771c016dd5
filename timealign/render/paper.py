"""The `paper` protocol: prompts exactly as the TicToc authors' inference code renders them.

The authors (chengez/TicToc at c0b2b56, `inference/local/*.py` with `templates/*.jinja`, `inference/api/*.py`)
prepare each trajectory's messages the same way for every model, then render them with a template of their own per
family (vLLM's tool-calling example templates), through a plain `jinja2.Environment(trim_blocks=True,
lstrip_blocks=True)`. What that means for the prompt string, and what this module reproduces without their code:

- Message preparation (`paper_messages`): a message with text and no `tool_calls` gets `"[<time>] "` in front of
  its text when timestamps are on (the time string as the data gives it, trailing space included; the system
  message too); a message with a `tool_calls` key keeps it as the data has it (arguments a JSON *string*, even a
  Python-literal one, or a mapping where the data gave one; a call without an `id` has none; an empty list stays
  an empty list) and has `content` None (local models: its text is dropped) or no `content` (API models); a tool
  message keeps `tool_call_id` (when it has one) and loses `name`. The reminder / rules text is appended to the
  system message (after its stamp). The generation prompt carries no timestamp.
- Jinja's own `tojson` (not transformers'): keys sorted, `<`, `>`, `&`, `'` written as `\\u003c`-style escapes,
  non-ASCII escaped. Llama's template sends a tool result's text through it (a string is "iterable"), so the
  result appears as a quoted JSON string; a call's arguments string is quoted again.
- Per family (`TEMPLATES`): Llama 3.1 *and* 3.2 use the Llama 3.1 template with `custom_tools=None` (so no tool
  schemas) and "Today Date:" the date of the trajectory's first message; Qwen 2.5 *and* Qwen 3 use the Qwen3
  template with `enable_thinking=False` (an empty think block closes the generation prompt) except the Qwen3
  reasoning run (`thinking=True`); Ministral has no generation prompt, puts the system text into the last user turn
  and refuses tool-call ids that are not 9 characters (the authors skip such samples); the DeepSeek-R1 distills get
  no BOS (their handlers pass none) and a generation prompt that opens `<think>`.
- The BOS token stays in the string where the authors' string had it: their vLLM run tokenized the string with
  `add_special_tokens=True`, so the model saw two BOS tokens, and so it does here.

A sample the authors' code cannot render raises `UnrenderableSample` naming the reason; the TicToc suite reports
such samples (the authors' run printed an error and skipped them). `tests/test_paper_prompts.py` holds golden
prompts of real v1 samples for every family and setting, and checks them against the authors' templates when a
checkout of their repository is at hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from timealign.render.families import FAMILIES, detect_family

# inference/sys_pmts.py of the authors' code: appended to the system message as is (leading space included).
PAPER_REMINDER = " Note that the environment may be dynamic. Be aware of the time elapsed."
PAPER_RULES = (
    " Note that the environment may be dynamic. Be aware of the time elapsed. Depending on the scenario and how much "
    "time has passed, whether it's preferable to call a tool or not can vary.\nFor example, suppose you were a ski "
    "resort snow reporter with access to a tool that retrieves the current snow depth and which trails are open at "
    "the resort. If it has been only a few minutes since your last retrieval when a user asks about the snow, it's "
    "unlikely that the status has changed\u2014so it's better not to call the tool again. However, if hours or even "
    "days have passed, then it's clearly better to call the tool again to retrieve the latest information.\nAs "
    "another example, suppose you were an agent checking immigration or visa processing cases for users, and you have "
    "access to a tool that retrieves stage updates from a government agency on active cases. If it has been only a "
    "few minutes since you last checked when a user asks for an update, it's very unlikely the status has changed, "
    "so calling the tool again isn't necessary. But if more than a day has passed since the previous check, then it's "
    "clearly better to query the tool again to get the most up-to-date information."
)
PAPER_PROMPT_MODES = {"none": "", "reminder": PAPER_REMINDER, "rules": PAPER_RULES}


class UnrenderableSample(ValueError):
    """The authors' code raises on this sample (their evaluation skipped it); the message says why."""


def jinja_tojson(value: Any, indent: int | None = None) -> str:
    """Jinja2's built-in `tojson` filter (what a plain `jinja2.Environment` applies): sorted keys, HTML-safe."""
    try:
        text = json.dumps(value, sort_keys=True, indent=indent)
    except TypeError as err:
        raise UnrenderableSample(f"the template cannot serialise {type(value).__name__}: {err}") from None
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")


def _time_string(message: dict) -> str:
    time = message.get("time")
    if isinstance(time, (list, tuple)):
        raise UnrenderableSample("a message's `time` is a list; pick the elapse level's time first")
    if time is None:
        raise UnrenderableSample(f"a {message.get('role')} message has no `time` but timestamps are on")
    return str(time)


def paper_messages(
    messages: list[dict], *, timestamps: bool, prompt_mode: str = "none", api: bool = False
) -> list[dict]:
    """The messages as the authors' handlers pass them on (to a template, or to a chat-completions API if `api`)."""
    if prompt_mode not in PAPER_PROMPT_MODES:
        raise ValueError(f"unknown prompt_mode {prompt_mode!r}; known: {', '.join(PAPER_PROMPT_MODES)}")
    out = []
    for msg in messages:
        m: dict[str, Any] = {"role": msg["role"]}
        calls = msg.get("tool_calls")  # Arrow stores a missing key as None: None means "no tool_calls key"
        if msg.get("content") is not None and calls is None:
            text = msg["content"]
            m["content"] = f"[{_time_string(msg)}] {text}" if timestamps else text
            if m["role"] == "system":
                m["content"] += PAPER_PROMPT_MODES[prompt_mode]
        if calls is not None:
            m["tool_calls"] = [_raw_call(call) for call in calls]
            if not api:
                m["content"] = None
        if msg["role"] == "tool" and msg.get("tool_call_id") is not None:
            m["tool_call_id"] = msg["tool_call_id"]
        out.append(m)
    return out


def _raw_call(call: dict) -> dict:
    """A call as the data gave it: no `id` key when it had none, arguments a mapping when given as one (a pair
    row stores a mapping as its JSON text with `arguments_mapping`: timealign/data/tictoc_pairs.py)."""
    fn = call.get("function") or {}
    arguments = fn.get("arguments")
    if call.get("arguments_mapping"):
        arguments = json.loads(arguments)
    out = {
        "id": call.get("id"),
        "function": {"name": fn.get("name"), "arguments": arguments},
        "type": call.get("type") or "function",
    }
    if out["id"] is None:
        del out["id"]
    return out


# -- the families' templates, as functions of the prepared messages ------------------------------------------------
def _llama3(messages: list[dict], tools: list | None, *, add_generation_prompt: bool, date: str, **_) -> str:
    # custom_tools=None is passed, so the template sets tools to None: no "Environment: ipython", no schemas.
    if not messages:
        raise UnrenderableSample("no messages")
    parts = ["<|begin_of_text|>"]
    system = ""
    if messages[0]["role"] == "system":
        system = (messages[0].get("content") or "").strip()
        messages = messages[1:]
    parts.append("<|start_header_id|>system<|end_header_id|>\n\n")
    parts.append(f"Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{system}<|eot_id|>")
    for m in messages:
        role = m["role"]
        if role not in ("ipython", "tool") and "tool_calls" not in m:
            parts.append(f"<|start_header_id|>{role}<|end_header_id|>\n\n{(m.get('content') or '').strip()}<|eot_id|>")
        elif "tool_calls" in m:
            if len(m["tool_calls"]) != 1:
                raise UnrenderableSample(
                    "the Llama 3.1 template only supports single tool-calls at once (an assistant message has "
                    f"{len(m['tool_calls'])}{' (an empty tool_calls list)' if not m['tool_calls'] else ''})"
                )
            fn = m["tool_calls"][0]["function"]
            parts.append(
                '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "'
                + str(fn["name"])
                + '", "parameters": '
                + jinja_tojson(fn["arguments"])
                + "}<|eot_id|>"
            )
        else:
            content = m.get("content")
            if content is None:
                raise UnrenderableSample("a tool message has no content")
            # A string is "iterable" to Jinja, so the template JSON-quotes the tool result.
            body = jinja_tojson(content) if isinstance(content, (str, dict, list)) else str(content)
            parts.append(f"<|start_header_id|>ipython<|end_header_id|>\n\n{body}<|eot_id|>")
    if add_generation_prompt:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def _qwen(messages: list[dict], tools: list | None, *, add_generation_prompt: bool, thinking: bool, **_) -> str:
    parts = []
    if tools:
        parts.append("<|im_start|>system\n")
        if messages[0]["role"] == "system":
            parts.append(messages[0]["content"] + "\n\n")
        parts.append(
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
            "provided with function signatures within <tools></tools> XML tags:\n<tools>"
        )
        parts += ["\n" + jinja_tojson(tool) for tool in tools]
        parts.append(
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
            'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
            "<args-json-object>}\n</tool_call><|im_end|>\n"
        )
    elif messages[0]["role"] == "system":
        parts.append(f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n")
    last_query = len(messages) - 1
    for index in range(len(messages) - 1, -1, -1):
        m = messages[index]
        text = m.get("content")
        if (
            m["role"] == "user"
            and isinstance(text, str)
            and not (text.startswith("<tool_response>") and text.endswith("</tool_response>"))
        ):
            last_query = index
            break
    for i, m in enumerate(messages):
        content = m["content"] if isinstance(m.get("content"), str) else ""
        first, last = i == 0, i == len(messages) - 1
        role = m["role"]
        if role == "user" or (role == "system" and not first):
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif role == "assistant":
            reasoning = ""
            if "</think>" in content:
                reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = content.split("</think>")[-1].lstrip("\n")
            if i > last_query and (last or reasoning):
                parts.append(
                    f"<|im_start|>{role}\n<think>\n{reasoning.strip(chr(10))}\n</think>\n\n" + content.lstrip("\n")
                )
            else:
                parts.append(f"<|im_start|>{role}\n{content}")
            for k, call in enumerate(m.get("tool_calls") or []):
                if (k == 0 and content) or k > 0:
                    parts.append("\n")
                fn = call.get("function") or call
                arguments = fn["arguments"]
                parts.append(
                    '<tool_call>\n{"name": "'
                    + str(fn["name"])
                    + '", "arguments": '
                    + (arguments if isinstance(arguments, str) else jinja_tojson(arguments))
                    + "}\n</tool_call>"
                )
            parts.append("<|im_end|>\n")
        elif role == "tool":
            if first or messages[i - 1]["role"] != "tool":
                parts.append("<|im_start|>user")
            parts.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if last or messages[i + 1]["role"] != "tool":
                parts.append("<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
        if not thinking:
            parts.append("<think>\n\n</think>\n\n")
    return "".join(parts)


def _ministral_tools(tools: list) -> str:
    parts = ["[AVAILABLE_TOOLS]["]
    for k, tool in enumerate(tools):
        fn = tool["function"]
        items = [(key, val) for key, val in fn.items() if key != "return"]
        # `"\"" + key + "\": " + val | tojson` adds a str to tojson's Markup, which HTML-escapes the str part.
        fields = [
            f'"{key}": "{val}"' if isinstance(val, str) else _markup_escape(f'"{key}": ') + jinja_tojson(val)
            for key, val in items
        ]
        parts.append('{"type": "function", "function": {' + ", ".join(fields) + "}}")
        parts.append(", " if k < len(tools) - 1 else "]")
    parts.append("[/AVAILABLE_TOOLS]")
    return "".join(parts)


def _markup_escape(text: str) -> str:
    """markupsafe.escape, as Jinja applies it to a plain string added to a Markup value."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("'", "&#39;")
        .replace('"', "&#34;")
    )


def _ministral_id(value: Any) -> str:
    if value is None:
        raise UnrenderableSample(
            "Ministral's template needs 9-character tool-call ids, got a call or result without one"
        )
    if not isinstance(value, str) or len(value) != 9:
        raise UnrenderableSample(f"Ministral's template needs 9-character tool-call ids, got {value!r}")
    return value


def _ministral_turn(m: dict) -> str:
    """One non-user message of the Ministral template."""
    if m.get("tool_calls") is not None:
        calls = []
        for call in m["tool_calls"]:
            calls.append(jinja_tojson(call["function"])[:-1] + f', "id": "{_ministral_id(call.get("id"))}"}}')
        return "[TOOL_CALLS][" + ", ".join(calls) + ("]</s>" if calls else "")
    if m["role"] == "assistant":
        return str(m.get("content")) + "</s>"
    if m["role"] in ("tool", "tool_results"):
        return (
            f'[TOOL_RESULTS]{{"content": {m.get("content")}, '
            f'"call_id": "{_ministral_id(m.get("tool_call_id"))}"}}[/TOOL_RESULTS]'
        )
    raise UnrenderableSample("Ministral's template supports user and assistant roles after an optional system message")


def _ministral(messages: list[dict], tools: list | None, *, add_generation_prompt: bool, **_) -> str:
    # The template has no generation prompt: the prompt ends with the last user turn's [/INST].
    system = None
    if messages[0]["role"] == "system":
        system, messages = messages[0].get("content"), messages[1:]
    users = [m for m in messages if m["role"] == "user"]
    expected_user = True
    for m in messages:
        if m["role"] in ("tool", "tool_results") or m.get("tool_calls") is not None:
            continue
        if (m["role"] == "user") != expected_user:
            raise UnrenderableSample(
                "after the optional system message, Ministral's roles must alternate user/assistant (a message "
                "with `tool_calls`, even an empty list, is a call, not a turn)"
            )
        expected_user = not expected_user
    parts = ["<s>"]
    for i, m in enumerate(messages):
        if m["role"] == "user":
            if tools is not None and m == users[-1]:
                parts.append(_ministral_tools(tools))
            if i == len(messages) - 1 and system is not None:
                parts.append(f"[INST]{system}\n\n{m['content']}[/INST]")
            else:
                parts.append(f"[INST]{m['content']}[/INST]")
        else:
            parts.append(_ministral_turn(m))
    return "".join(parts)


def _deepseek_r1(messages: list[dict], tools: list | None, *, add_generation_prompt: bool, bos: str = "", **_) -> str:
    # The authors' R1-Distill-Llama handler passes Llama 3's "<|begin_of_text|>" as bos_token; the Qwen one passes
    # none, so the template writes "".
    system = ""
    for m in messages:
        if m["role"] == "system":
            system = m.get("content") or ""
    parts = [bos, system]
    first_call, in_tools, first_output = True, False, True
    for m in messages:
        role, content = m["role"], m.get("content")
        if role == "user":
            in_tools = False
            parts.append("<｜User｜>" + content)
        if role == "assistant" and content is None:
            in_tools = False
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                body = (
                    (call.get("type") or "function")
                    + "<｜tool▁sep｜>"
                    + fn["name"]
                    + "\n```json\n"
                    + _string(fn["arguments"])
                    + "\n```<｜tool▁call▁end｜>"
                )
                if first_call:
                    parts.append("<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + body)
                    first_call = False
                else:  # the template never resets this flag: later calls all take this branch
                    parts.append("\n<｜tool▁call▁begin｜>" + body + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")
        if role == "assistant" and content is not None:
            if in_tools:
                parts.append("<｜tool▁outputs▁end｜>" + content + "<｜end▁of▁sentence｜>")
                in_tools = False
            else:
                if "</think>" in content:
                    content = content.split("</think>")[-1]
                parts.append("<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>")
        if role == "tool":
            in_tools = True
            if first_output:
                parts.append(
                    "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + _string(content) + "<｜tool▁output▁end｜>"
                )
                first_output = False
            else:
                parts.append("\n<｜tool▁output▁begin｜>" + _string(content) + "<｜tool▁output▁end｜>")
    if in_tools:
        parts.append("<｜tool▁outputs▁end｜>")
    if add_generation_prompt and not in_tools:
        parts.append("<｜Assistant｜><think>\n")
    return "".join(parts)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise UnrenderableSample(
            f"the DeepSeek template concatenates strings; got {type(value).__name__} (tool-call arguments given as a "
            "mapping, or a tool result that is not text)"
        )
    return value


# a family's `paper_template` (timealign/render/families.py) -> (render function, the authors' template file it stands
# for); the tiny test models speak ChatML with <tool_call> and use Qwen's
TEMPLATES: dict[str, tuple[Callable[..., str], str]] = {
    "llama3": (_llama3, "templates/llama3_1.jinja"),
    "qwen": (_qwen, "templates/qwen3.jinja"),
    "mistral": (_ministral, "templates/ministral.jinja"),
    "deepseek_r1": (_deepseek_r1, "templates/deepseek_distill_llama.jinja"),
}


# The authors' local handlers (inference/model_map.py) -> how PaperRenderer reproduces each, and its vLLM budget.
PAPER_MODELS: dict[str, dict[str, Any]] = {
    "llama3_1": {"family": "llama3", "max_tokens": 2048},  # meta-llama/Llama-3.1-8B-Instruct
    "llama3_2": {"family": "llama3", "max_tokens": 4096},  # meta-llama/Llama-3.2-3B-Instruct
    "qwen2_5": {"family": "qwen", "thinking": False, "max_tokens": 4096},  # Qwen/Qwen2.5-7B-Instruct
    "qwen3": {"family": "qwen", "thinking": False, "max_tokens": 4096},  # Qwen/Qwen3-8B
    "qwen3_reason": {"family": "qwen", "thinking": True, "max_tokens": 4096},  # Qwen/Qwen3-8B, reasoning
    "ministral": {"family": "mistral", "max_tokens": 2048},  # mistralai/Ministral-8B-Instruct-2410
    "deepseek_distill_llama": {"family": "deepseek_r1", "bos": "<|begin_of_text|>", "max_tokens": 4096},
    "deepseek_distill_qwen": {"family": "deepseek_r1", "bos": "", "max_tokens": 4096},
}


@dataclass
class PaperRenderer:
    """`PromptRenderer`'s interface with the authors' rendering (see the module docstring).

    `family` picks the template (None: read off the tokenizer's chat template); `thinking` is the Qwen3 reasoning
    run (`enable_thinking=True`); the authors' default for Qwen is thinking off.
    """

    tokenizer: Any
    timestamps: bool = True
    prompt_mode: str = "none"
    family: str | None = None
    thinking: bool = False
    elapsed: bool = False  # the authors have no elapsed badge; kept for the settings report
    bos: str | None = None  # the DeepSeek template's BOS text; None: from the model's spec (`deepseek_bos`)

    def __post_init__(self):
        if self.prompt_mode not in PAPER_PROMPT_MODES:
            raise ValueError(f"unknown prompt_mode {self.prompt_mode!r}; known: {', '.join(PAPER_PROMPT_MODES)}")
        if self.elapsed:
            raise ValueError(
                "data.elapsed (the elapsed-time badge) is a timealign addition; the paper protocol has "
                "none: set data.elapsed=false or data.protocol=timealign"
            )
        if self.family is None:
            self.family = detect_family(getattr(self.tokenizer, "chat_template", None))
        if self.family not in FAMILIES:
            raise ValueError(f"no paper-protocol template for family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.bos is None:
            self.bos = deepseek_bos(self.tokenizer) if FAMILIES[self.family].paper_template == "deepseek_r1" else ""

    protocol = "paper"

    def _render(self, messages: list[dict], tools: Any, add_generation_prompt: bool) -> str:
        prepared = paper_messages(messages, timestamps=self.timestamps, prompt_mode=self.prompt_mode)
        if not prepared:
            raise UnrenderableSample("no messages")
        render, _ = TEMPLATES[FAMILIES[self.family].paper_template]
        date = str(messages[0].get("time") or "").split("T")[0]
        return render(
            prepared,
            _decode_tools(tools),
            add_generation_prompt=add_generation_prompt,
            date=date,
            thinking=self.thinking,
            bos=self.bos,
        )

    def prompt(self, messages: list[dict], tools: Any = None) -> str:
        """The generation prompt, byte for byte what the authors' handler renders for these messages."""
        return self._render(messages, tools, add_generation_prompt=True)

    def completion(self, messages: list[dict], response: dict, tools: Any = None) -> str:
        """The reply's text after `prompt()` as the family's template writes it (for training in this protocol)."""
        reply = dict(response, time=messages[-1].get("time") if messages else None)
        if FAMILIES[self.family].paper_template == "mistral":
            # The template moves the system text into the *last* user turn, so the prompt is not a prefix of the
            # conversation with the reply added; the reply is rendered on its own, as the template writes it.
            return _ministral_turn(paper_messages([reply], timestamps=False)[0])
        if FAMILIES[self.family].paper_template == "deepseek_r1":
            raise ValueError(
                "the authors' DeepSeek-R1 template opens a <think> block in the generation prompt that a "
                "rendered reply never continues: training in the paper protocol is not defined for it; "
                "use data.protocol=timealign"
            )
        prompt = self.prompt(messages, tools)
        # Replies carry no stamp in the authors' prompts' last turn: render the reply's text without one.
        full = self._render_with_reply(messages, reply, tools)
        if not full.startswith(prompt):
            raise ValueError(f"the paper {self.family} template renders the prompt differently once a reply follows")
        text = full[len(prompt) :]
        return text.rstrip("\n") if text.endswith("<|im_end|>\n") else text

    def _render_with_reply(self, messages: list[dict], reply: dict, tools: Any) -> str:
        prepared = paper_messages(messages, timestamps=self.timestamps, prompt_mode=self.prompt_mode)
        prepared += paper_messages([reply], timestamps=False)
        render, _ = TEMPLATES[FAMILIES[self.family].paper_template]
        date = str(messages[0].get("time") or "").split("T")[0]
        return render(
            prepared,
            _decode_tools(tools),
            add_generation_prompt=False,
            date=date,
            thinking=self.thinking,
            bos=self.bos,
        )

    def pair(self, messages: list[dict], chosen: dict, rejected: dict, tools: Any = None) -> dict[str, str]:
        """TRL's preference layout (strings) for one pair, rendered in this protocol."""
        return {
            "prompt": self.prompt(messages, tools),
            "chosen": self.completion(messages, chosen, tools),
            "rejected": self.completion(messages, rejected, tools),
        }

    def check_template(self, messages: list[dict], tools: Any = None) -> list[str]:
        """The authors never stamp tool-call messages; that is the protocol, not a template defect."""
        return []


def deepseek_bos(tokenizer: Any) -> str:
    """The BOS text the authors' handler writes for this R1 distill (`PAPER_MODELS`' `bos`): see `deepseek_distill`."""
    return PAPER_MODELS[deepseek_distill(tokenizer)]["bos"]


# config.json `model_type` of each R1 distill's base, and the distill's released name
DEEPSEEK_DISTILLS = {"llama": "deepseek_distill_llama", "qwen2": "deepseek_distill_qwen"}
DEEPSEEK_DISTILL_NAMES = {"distill-llama": "deepseek_distill_llama", "distill-qwen": "deepseek_distill_qwen"}


def deepseek_distill(tokenizer: Any) -> str:
    """Which R1 distill (a `PAPER_MODELS` key) the tokenizer's model is: from the model's spec, not its vocabulary.

    The two distills share a template and their released tokenizers share their special tokens (the Qwen one
    renamed Qwen's `<|im_start|>` / `<|im_end|>` ids to `<｜User｜>` / `<｜Assistant｜>`), so the vocabulary cannot
    tell them apart; the model's config.json (`model_type` llama or qwen2) can, else the released name.
    """
    name = str(getattr(tokenizer, "name_or_path", "") or "")
    model_type = _model_type(name)
    if model_type in DEEPSEEK_DISTILLS:
        return DEEPSEEK_DISTILLS[model_type]
    for marker, model in DEEPSEEK_DISTILL_NAMES.items():
        if model_type is None and marker in name.lower():
            return model
    raise ValueError(
        f"cannot tell which DeepSeek-R1 distill {name or 'this tokenizer'!r} is (its config.json "
        f"model_type is {model_type!r}; the paper protocol needs llama or qwen2 to pick the BOS the "
        "authors wrote): load the tokenizer from the model's folder or its released name"
    )


def _model_type(name: str) -> str | None:
    """config.json's `model_type` of the model at `name` (a folder, or a hub name in the local cache); None if none."""
    if not name:
        return None
    config = Path(name) / "config.json"
    if config.is_file():
        return json.loads(config.read_text()).get("model_type")
    if Path(name).exists():
        return None
    from transformers.utils import cached_file

    path = cached_file(
        name,
        "config.json",
        local_files_only=True,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    return json.loads(Path(path).read_text()).get("model_type") if path else None


def _decode_tools(tools: Any) -> list | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        tools = json.loads(tools)
    return list(tools)
