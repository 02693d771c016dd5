"""The shared renderer: timestamps at every message start, the generation prompt, prompt/completion split."""

import re

import pytest

from timealign.render.chat import REMINDER_PROMPT, PromptRenderer, parse_tool_arguments
from timealign.render.timefmt import format_elapsed, format_timestamp

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_price",
            "description": "Current price of a stock.",
            "parameters": {"type": "object", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]},
        },
    }
]
HISTORY = [
    {"role": "system", "content": "You are a trading assistant.", "time": "2025-12-04T10:00:00Z"},
    {"role": "user", "content": "Price of ACME?", "time": "2025-12-04T10:00:00Z"},
    {
        "role": "assistant",
        "content": None,
        "time": "2025-12-04T10:00:04Z",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "get_price",
        "content": '{"price": 101.5}',
        "time": "2025-12-04T10:00:05Z",
    },
    {"role": "assistant", "content": "ACME trades at 101.5.", "time": "2025-12-04T10:00:09Z"},
    {"role": "user", "content": "And now?", "time": "2025-12-04T13:22:44Z"},
]
TOOL_REPLY = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'}}],
}
TEXT_REPLY = {"role": "assistant", "content": "ACME trades at 101.5."}


def test_format_timestamp():
    assert format_timestamp("2025-12-04T10:22:44Z") == "[2025-12-04T10:22:44Z]"
    assert format_timestamp("2025-12-04T11:22:44+01:00") == "[2025-12-04T10:22:44Z]"


def test_every_message_starts_with_its_time(tiny_tokenizer):
    prompt = PromptRenderer(tiny_tokenizer).prompt(HISTORY, TOOLS)
    # Each user/assistant/tool header is followed immediately by that message's stamp; system has none.
    headers = re.findall(r"<\|im_start\|>(\w+)\n(\[[^\]]+\])?", prompt)
    assert headers == [
        ("system", ""),
        ("user", "[2025-12-04T10:00:00Z]"),
        ("assistant", "[2025-12-04T10:00:04Z]"),
        ("tool", "[2025-12-04T10:00:05Z]"),
        ("assistant", "[2025-12-04T10:00:09Z]"),
        ("user", "[2025-12-04T13:22:44Z]"),
        ("assistant", "[2025-12-04T13:22:44Z]"),  # the generation prompt carries the reply time
    ]
    assert prompt.endswith("<|im_start|>assistant\n[2025-12-04T13:22:44Z]")
    assert '"name": "get_price"' in prompt.split("<|im_end|>")[0]  # tools listed in the system turn


def test_no_timestamp_condition(tiny_tokenizer):
    prompt = PromptRenderer(tiny_tokenizer, timestamps=False).prompt(HISTORY, TOOLS)
    assert "2025-" not in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_pair_splits_prompt_and_completion_like_the_template(tiny_tokenizer):
    renderer = PromptRenderer(tiny_tokenizer)
    pair = renderer.pair(HISTORY, TOOL_REPLY, TEXT_REPLY, TOOLS)
    assert pair["chosen"] == (
        '<tool_call>{"name": "get_price", "arguments": {"symbol": "ACME"}}</tool_call><|im_end|>'
    )
    assert pair["rejected"] == "ACME trades at 101.5.<|im_end|>"
    # prompt + completion is exactly the template's rendering of the conversation with the stamped reply.
    stamped = dict(TOOL_REPLY, time=HISTORY[-1]["time"])
    full = tiny_tokenizer.apply_chat_template(
        renderer.prepare_messages(HISTORY + [stamped]), tools=TOOLS, tokenize=False
    )
    assert full.rstrip() == pair["prompt"] + pair["chosen"]
    assert pair["prompt"] == renderer.prompt(HISTORY, TOOLS)
    assert renderer.completion(HISTORY, TEXT_REPLY, TOOLS) == pair["rejected"]
    assert renderer.check_template(HISTORY, TOOLS) == []


def test_first_completion_token_is_the_decision(tiny_tokenizer):
    pair = PromptRenderer(tiny_tokenizer).pair(HISTORY, TOOL_REPLY, TEXT_REPLY, TOOLS)
    prompt_ids = tiny_tokenizer(pair["prompt"])["input_ids"]
    full_ids = tiny_tokenizer(pair["prompt"] + pair["chosen"])["input_ids"]
    assert full_ids[: len(prompt_ids)] == prompt_ids  # the stamp's "]" does not merge into the completion
    assert tiny_tokenizer.convert_ids_to_tokens(full_ids[len(prompt_ids)]) == "<tool_call>"


def test_prompt_modes(tiny_tokenizer):
    prompt = PromptRenderer(tiny_tokenizer, prompt_mode="reminder").prompt(HISTORY, TOOLS)
    assert "You are a trading assistant.\n\n" + REMINDER_PROMPT in prompt
    rules = PromptRenderer(tiny_tokenizer, prompt_mode="rules").prompt(HISTORY[1:], TOOLS)
    assert "smart garden assistant" in rules
    with pytest.raises(ValueError, match="known: none, reminder, rules"):
        PromptRenderer(tiny_tokenizer, prompt_mode="shout")


def test_missing_time_is_an_error_only_with_timestamps(tiny_tokenizer):
    history = [dict(m) for m in HISTORY]
    del history[3]["time"]
    with pytest.raises(ValueError, match="tool message has no `time`"):
        PromptRenderer(tiny_tokenizer).prompt(history, TOOLS)
    assert PromptRenderer(tiny_tokenizer, timestamps=False).prompt(history, TOOLS)


def test_tool_arguments_json_or_python_literal():
    assert parse_tool_arguments('{"location": "Malibu"}') == {"location": "Malibu"}
    assert parse_tool_arguments("{'location': 'Malibu Beach'}") == {"location": "Malibu Beach"}  # TicToc v1
    assert parse_tool_arguments("") == {} and parse_tool_arguments(None) == {}
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_tool_arguments("{location: Malibu")


def test_one_bos_for_tokenizers_that_add_it(tiny_model_dir):
    """Llama-style tokenizers add BOS themselves; the rendered text must not carry a second one."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    bos = "<|endoftext|>"
    tok.bos_token = bos
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tok.convert_tokens_to_ids(bos))]
    )
    tok.chat_template = "{{ bos_token }}" + tok.chat_template
    prompt = PromptRenderer(tok).prompt(HISTORY, TOOLS)
    ids = tok(prompt)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (59, "59 seconds"),
        (60, "1 minute"),
        (193, "3 minutes 13 seconds"),
        (3600, "1 hour"),
        (3725, "1 hour 2 minutes"),
        (86400 + 5, "1 day"),  # a zero unit ends the phrase
        (3 * 86400 + 5 * 3600, "3 days 5 hours"),
        (31 * 86400, "1 month 1 day"),
        (400 * 86400, "1 year 1 month"),
    ],
)
def test_format_elapsed(seconds, text):
    assert format_elapsed(seconds) == text


def test_format_elapsed_refuses_negative_gaps():
    with pytest.raises(ValueError, match="out of order"):
        format_elapsed(-1)


def test_elapsed_badge_sits_on_the_reply_stamp_only(tiny_tokenizer):
    renderer = PromptRenderer(tiny_tokenizer, elapsed=True)
    prompt = renderer.prompt(HISTORY, TOOLS)
    # 13:22:44 - 10:00:05 (the tool result) = 3 h 22 min 39 s; two largest units
    assert prompt.endswith("[2025-12-04T13:22:44Z] (+3 hours 22 minutes since the last tool result)")
    assert prompt.count("since the last tool result") == 1  # history messages keep their plain stamps
    pair = renderer.pair(HISTORY, TOOL_REPLY, TEXT_REPLY, TOOLS)
    assert pair["prompt"] == prompt
    assert pair["chosen"].startswith("<tool_call>") and pair["rejected"].startswith("ACME trades")
    # The prompt without the badge is the plain renderer's: the badge is the only difference.
    plain = PromptRenderer(tiny_tokenizer).prompt(HISTORY, TOOLS)
    assert prompt == plain + " (+3 hours 22 minutes since the last tool result)"


@pytest.mark.parametrize("separator, text", [("newline", "\n"), ("space", " ")])
def test_elapsed_separator_sits_between_the_badge_and_the_reply(tiny_tokenizer, separator, text):
    """data.elapsed_separator: the prompt ends with the badge and the separator, the completions follow it unchanged,
    and prompt + completion is the template's own rendering of the stamped reply."""
    from timealign.config import DataSection

    renderer = PromptRenderer.for_data(tiny_tokenizer, DataSection(elapsed=True, elapsed_separator=separator))
    badge = " (+3 hours 22 minutes since the last tool result)"
    plain = PromptRenderer(tiny_tokenizer).prompt(HISTORY, TOOLS)
    assert renderer.prompt(HISTORY, TOOLS) == plain + badge + text
    pair = renderer.pair(HISTORY, TOOL_REPLY, TEXT_REPLY, TOOLS)
    assert pair["prompt"] == plain + badge + text
    assert pair["chosen"].startswith("<tool_call>") and pair["rejected"].startswith("ACME trades")
    bare = PromptRenderer(tiny_tokenizer, elapsed=True).pair(HISTORY, TOOL_REPLY, TEXT_REPLY, TOOLS)
    assert (pair["chosen"], pair["rejected"]) == (bare["chosen"], bare["rejected"])
    # No badge (no tool result yet), no separator: it separates the badge, not the stamp.
    no_tool = [m for m in HISTORY if m["role"] in ("system", "user")]
    assert renderer.prompt(no_tool, TOOLS).endswith("[2025-12-04T13:22:44Z]")
    with pytest.raises(ValueError, match="unknown elapsed_separator 'tab'"):
        PromptRenderer(tiny_tokenizer, elapsed=True, elapsed_separator="tab")


def test_elapsed_separator_without_the_badge_is_refused_when_the_recipe_loads():
    from timealign.config import RecipeError, load_recipe

    for overrides in ({}, {"data.elapsed": "true", "data.timestamps": "false"}):
        with pytest.raises(RecipeError, match="data.elapsed_separator=newline separates the elapsed badge"):
            load_recipe("tiny", {"data.elapsed_separator": "newline", **overrides}, task="dpo")
    recipe = load_recipe("tiny", {"data.elapsed_separator": "newline", "data.elapsed": "true"}, task="dpo")
    assert recipe.data.elapsed_separator == "newline"


def test_elapsed_badge_needs_timestamps_and_a_tool_result(tiny_tokenizer):
    assert "since the last" not in PromptRenderer(tiny_tokenizer, timestamps=False, elapsed=True).prompt(
        HISTORY, TOOLS
    )
    no_tool = [m for m in HISTORY if m["role"] in ("system", "user")]
    assert PromptRenderer(tiny_tokenizer, elapsed=True).prompt(no_tool, TOOLS).endswith("[2025-12-04T13:22:44Z]")


def test_renderer_for_data_follows_the_recipe(tiny_tokenizer):
    from timealign.config import DataSection

    r = PromptRenderer.for_data(tiny_tokenizer, DataSection(timestamps=True, elapsed=True))
    assert (r.timestamps, r.elapsed) == (True, True)
    assert PromptRenderer.for_data(tiny_tokenizer, DataSection(elapsed=True), timestamps=False).timestamps is False


def test_timer_renderer_for_timer_follows_the_recipe(tiny_tokenizer):
    from timealign.config import TimerSection
    from timealign.render.timer import TimerRenderer

    r = TimerRenderer.for_timer(tiny_tokenizer, TimerSection(special_tokens=False, order="utterance_first"))
    assert (r.tokenizer, r.special_tokens, r.order) == (tiny_tokenizer, False, "utterance_first")
    with pytest.raises(ValueError, match="lacks the TIMER tokens"):  # the default section needs the markers
        TimerRenderer.for_timer(tiny_tokenizer, TimerSection())
