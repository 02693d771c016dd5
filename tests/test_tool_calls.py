"""Tool-call detection per family on realistic outputs, pattern by pattern, under the `timealign` and `paper`
protocols (the table in timealign/render/tool_calls.py), and empty outputs through the TicToc suite.

Outputs are written as timealign decodes them: special tokens kept (end-of-turn markers, `[TOOL_CALLS]`,
`<|python_tag|>`).
"""

import pytest

from timealign.models.tiny import TINY_CHAT_TEMPLATE
from timealign.render.families import detect_family
from timealign.render.tool_calls import (
    PROTOCOLS,
    has_call_json,
    is_empty_output,
    is_tool_call,
    known_families,
    paper_visible_text,
)

QWEN_CALL = '<tool_call>\n{"name": "get_stock_price", "arguments": {"symbol": "ACME"}}\n</tool_call><|im_end|>'
QWEN3_THINK_CALL = "<think>\nThe last check was 3 hours ago, prices move.\n</think>\n\n" + QWEN_CALL
QWEN3_THINK_ANSWER = (
    "<think>\nMaybe I should emit <tool_call> again... no, it was 4 seconds ago.\n</think>\n\n"
    "ACME is at 101.25 USD.<|im_end|>"
)
LLAMA_CALL = '{"name": "get_stock_price", "parameters": {"symbol": "ACME"}}<|eot_id|>'
LLAMA_TRUNCATED = '{"name": "get_stock_price", "parameters": {"sym'
LLAMA_BUILTIN = '<|python_tag|>brave_search.call(query="ACME stock price")<|eom_id|>'
LLAMA_TEXT = 'ACME is at 101.25. The last lookup returned {"price": 101.25}.<|eot_id|>'
MISTRAL_CALL = '[TOOL_CALLS][{"name": "get_stock_price", "arguments": {"symbol": "ACME"}}]</s>'
MISTRAL_V11_CALL = '[TOOL_CALLS]get_stock_price[ARGS]{"symbol": "ACME"}</s>'


@pytest.mark.parametrize(
    "family, text, expected",
    [
        ("qwen", QWEN_CALL, True),
        ("qwen", QWEN3_THINK_CALL, True),
        ("qwen", QWEN3_THINK_ANSWER, False),
        ("qwen", "ACME is at 101.25 USD.<|im_end|>", False),
        ("llama3", LLAMA_CALL, True),
        ("llama3", LLAMA_TRUNCATED, True),
        ("llama3", LLAMA_BUILTIN, True),
        ("llama3", LLAMA_TEXT, False),
        ("llama3", '{"answer": 3}', False),
        ("mistral", MISTRAL_CALL, True),
        ("mistral", MISTRAL_V11_CALL, True),
        ("mistral", "ACME is at 101.", False),
        ("tiny", '<tool_call>{"name": "get_price", "arguments": {}}</tool_call><|im_end|>', True),
        ("tiny", "The price is 3.<|im_end|>", False),
    ],
)
def test_tool_call_detection(family, text, expected):
    assert is_tool_call(text, family) is expected


def test_unknown_family_lists_known_ones():
    with pytest.raises(ValueError) as err:
        is_tool_call("x", "gemma")
    for family in known_families():
        assert family in str(err.value)
    with pytest.raises(ValueError, match="name it with family=NAME"):
        detect_family("{{ messages }}")


def test_family_detection_from_templates():
    assert detect_family(TINY_CHAT_TEMPLATE) == "tiny"
    assert detect_family("{{- '<|start_header_id|>' + message['role'] }}") == "llama3"
    assert detect_family("{%- if tools %}<tools>{% endif %}<|im_start|>...<tool_call>") == "qwen"
    assert detect_family("[AVAILABLE_TOOLS]...[TOOL_CALLS]") == "mistral"


# ------------------------------------------------------------------ the patterns, both protocols
ARGS = '{"symbol": "ACME"}'
DRAFT_CALL = '<tool_call>\n{"name": "get_stock_price", "arguments": ' + ARGS + "}\n</tool_call>"
R1_CALL = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_stock_price\n```json\n"
    + ARGS
    + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
)

# (family, pattern, output, paper decision, timealign decision)
PATTERNS = [
    # text before a JSON call
    (
        "llama3",
        "text before call",
        'Let me check the latest price for you.\n\n{"name": "get_stock_price", "parameters": ' + ARGS + "}<|eot_id|>",
        True,
        True,
    ),
    (
        "mistral",
        "text before call",
        'Sure, let me fetch that. [{"name": "get_stock_price", "arguments": ' + ARGS + "}]</s>",
        True,
        True,
    ),
    ("qwen", "text before call", "I will look that up.\n" + DRAFT_CALL + "<|im_end|>", True, True),
    # a fenced ```json call
    (
        "llama3",
        "fenced call",
        '```json\n{"name": "get_stock_price", "parameters": ' + ARGS + "}\n```<|eot_id|>",
        True,
        True,
    ),
    (
        "mistral",
        "fenced call",
        '```json\n[{"name": "get_stock_price", "arguments": ' + ARGS + "}]\n```</s>",
        True,
        True,
    ),
    (
        "qwen",
        "fenced call, no tags",
        '```json\n{"name": "get_stock_price", "arguments": ' + ARGS + "}\n```<|im_end|>",
        False,
        True,
    ),
    ("tiny", "fenced call, no tags", '```json\n{"name": "get_price", "arguments": {}}\n```<|im_end|>', False, True),
    (
        "qwen",
        "bare JSON call, no tags",
        '{"name": "get_stock_price", "arguments": ' + ARGS + "}<|im_end|>",
        False,
        True,
    ),
    (
        "deepseek_r1",
        "fenced call, no tags",
        'It has been hours.\n</think>\n\n```json\n{"name": "get_stock_price", "arguments": '
        + ARGS
        + "}\n```<｜end▁of▁sentence｜>",
        False,
        True,
    ),
    # the OpenAI-style nested call
    (
        "llama3",
        "nested, parameters",
        '{"type": "function", "function": {"name": "get_stock_price", "parameters": ' + ARGS + "}}<|eot_id|>",
        True,
        True,
    ),
    (
        "llama3",
        "nested, arguments",
        '{"type": "function", "function": {"name": "get_stock_price", "arguments": ' + ARGS + "}}<|eot_id|>",
        False,
        True,
    ),
    (
        "mistral",
        "nested, parameters",
        '[{"type": "function", "function": {"name": "get_stock_price", "parameters": ' + ARGS + "}}]</s>",
        False,
        True,
    ),
    (
        "qwen",
        "nested, no tags",
        '{"type": "function", "function": {"name": "get_stock_price", "arguments": ' + ARGS + "}}<|im_end|>",
        False,
        True,
    ),
    # Ministral JSON without the [TOOL_CALLS] token
    ("mistral", "no [TOOL_CALLS]", '[{"name": "get_stock_price", "arguments": ' + ARGS + "}]</s>", True, True),
    (
        "mistral",
        "with [TOOL_CALLS]",
        '[TOOL_CALLS][{"name": "get_stock_price", "arguments": ' + ARGS + "}]</s>",
        True,
        True,
    ),
    # a reasoning block that drafts a call and then answers directly
    (
        "qwen",
        "think drafts a call, then answers",
        "<think>\nThe user wants the ACME price again. I could call the tool:\n"
        + DRAFT_CALL
        + "\nBut I fetched it 30 seconds ago, so I can answer directly.\n</think>\n\nACME is still at 101.25 USD."
        "<|im_end|>",
        True,
        False,
    ),
    (
        "qwen",
        "think, then call",
        "<think>\nThe last check was 3 hours ago; prices move.\n</think>\n\n" + DRAFT_CALL + "<|im_end|>",
        True,
        True,
    ),
    (
        "qwen",
        "reasoning cut off after a draft",
        "<think>\nDraft:\n" + DRAFT_CALL + "\nHmm, but the last lookup was only",
        True,
        False,
    ),
    (
        "deepseek_r1",
        "think drafts a call, then answers",
        "The user asked again. I could emit " + R1_CALL + " but the price was fetched a minute ago.\n</think>\n\n"
        "ACME is at 101.25 USD.<｜end▁of▁sentence｜>",
        True,
        False,
    ),
    (
        "deepseek_r1",
        "think, then call",
        "Hours have passed since the last lookup, so I should refresh it.\n</think>\n\n"
        + R1_CALL
        + "<｜end▁of▁sentence｜>",
        True,
        True,
    ),
    ("deepseek_r1", "reasoning cut off after a draft", "I could call " + R1_CALL + " but maybe", True, False),
    # <|python_tag|> calls on Llama
    (
        "llama3",
        "python_tag builtin",
        '<|python_tag|>brave_search.call(query="ACME stock price today")<|eom_id|>',
        False,
        True,
    ),
    (
        "llama3",
        "python_tag JSON",
        '<|python_tag|>{"name": "get_stock_price", "parameters": ' + ARGS + "}<|eom_id|>",
        True,
        True,
    ),
    # "arguments" instead of "parameters" on Llama
    ("llama3", "arguments key", '{"name": "get_stock_price", "arguments": ' + ARGS + "}<|eot_id|>", False, True),
    # truncated calls (the token limit cut them)
    ("llama3", "truncated after parameters", '{"name": "get_stock_price", "parameters": {"sym', True, True),
    ("llama3", "truncated in the name", '{"name": "get_stock_pri', False, True),
    ("llama3", "truncated nested", '{"type": "function", "function": {"name": "get_st', False, True),
    ("qwen", "truncated", '<tool_call>\n{"name": "get_stock_price", "argu', False, True),
    ("tiny", "truncated", '<tool_call>{"name": "get_', False, True),
    ("mistral", "truncated", '[TOOL_CALLS][{"name": "get_stock_price", "argu', False, True),
    ("mistral", "truncated, no token", '[{"name": "get_stock_price", "arguments": {"sym', True, True),
    (
        "deepseek_r1",
        "truncated",
        "Refresh it.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_st",
        False,
        True,
    ),
    # plain answers stay answers in both protocols, JSON in them included
    (
        "llama3",
        "answer quoting JSON",
        'ACME is at 101.25. The last lookup returned {"price": 101.25}.<|eot_id|>',
        False,
        False,
    ),
    ("mistral", "answer with braces", "ACME is at {101.25} USD, as of {noon}.</s>", False, False),
    ("qwen", "answer", "ACME is at 101.25 USD.<|im_end|>", False, False),
    (
        "deepseek_r1",
        "answer",
        "It was checked a minute ago.\n</think>\n\nACME is at 101.25 USD.<｜end▁of▁sentence｜>",
        False,
        False,
    ),
]


@pytest.mark.parametrize("family, pattern, text, paper, ours", PATTERNS, ids=[f"{p[0]}: {p[1]}" for p in PATTERNS])
def test_each_pattern_under_both_protocols(family, pattern, text, paper, ours):
    assert is_tool_call(text, family, protocol="paper") is paper
    assert is_tool_call(text, family, protocol="timealign") is ours
    assert is_tool_call(text, family) is ours  # timealign is the default


def test_paper_protocol_sees_what_the_authors_vllm_decoding_saw():
    # Special tokens are skipped (the Llama python tag, Mistral's [TOOL_CALLS], end-of-turn markers) and the text
    # stripped; Qwen's <tool_call> is not special and stays.
    assert (
        paper_visible_text('<|python_tag|>brave_search.call(query="x")<|eom_id|>', "llama3")
        == 'brave_search.call(query="x")'
    )
    assert paper_visible_text('[TOOL_CALLS][{"name": "f"}]</s>', "mistral") == '[{"name": "f"}]'
    assert paper_visible_text(DRAFT_CALL + "<|im_end|>\n", "qwen") == DRAFT_CALL


@pytest.mark.parametrize(
    "family, text",
    [
        ("llama3", "<|eot_id|>"),
        ("llama3", "  \n"),
        ("qwen", "\n<|im_end|>"),
        ("tiny", "<|im_end|>"),
        ("mistral", "</s>"),
        ("deepseek_r1", "<｜end▁of▁sentence｜>"),
        ("qwen", ""),
    ],
)
def test_empty_outputs(family, text):
    assert is_empty_output(text, family)
    for protocol in PROTOCOLS:
        assert is_tool_call(text, family, protocol) is False


def test_not_empty():
    assert not is_empty_output("OK.<|eot_id|>", "llama3")
    assert not is_empty_output("<think>\n</think>", "qwen")  # the reasoning block is text, not special tokens


def test_call_json_scanner():
    assert has_call_json('x {"a": 1} y [{"name": "f", "arguments": {}}]')
    assert has_call_json('{"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}')
    assert not has_call_json('{"name": "Ada Lovelace", "born": 1815}')  # a name alone is not a call
    assert not has_call_json('{"note": "a brace } in a string", "n": 1} and {not json}')
    assert not has_call_json('{"name": "Ada", "note": "still typing')  # cut off, but nothing call-like


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match="protocol"):
        is_tool_call("x", "qwen", protocol="bfcl")


def test_deepseek_r1_template_detection():
    template = (
        "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'}}"
        "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
    )
    assert detect_family(template) == "deepseek_r1"


# ------------------------------------------------------------------ empty outputs through the suite
class ReplayBackend:
    """A generation engine that answers with fixed texts (the suite under test is real)."""

    name = "replay"

    def __init__(self, tokenizer, outputs):
        self.tokenizer, self.outputs = tokenizer, outputs

    def generate(self, prompts, **kwargs):
        return [self.outputs[i % len(self.outputs)] for i in range(len(prompts))]


@pytest.fixture(scope="module")
def tictoc_rows(tmp_path_factory):
    from timealign.config import DataSection
    from timealign.data.pairs import load_prepared, prepare

    folder = tmp_path_factory.mktemp("prepared")
    prepare(DataSection(synthetic_trajectories=4), folder)
    return load_prepared(folder)["test"].to_list()[:6]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_suite_counts_empty_outputs_in_every_protocol(tiny_tokenizer, tictoc_rows, tmp_path, protocol):
    from timealign.suites.tictoc.suite import evaluate_tictoc, markdown_summary

    outputs = [
        '<tool_call>{"name": "get_price", "arguments": {}}</tool_call><|im_end|>',
        "<|im_end|>",
        "The price is 3.<|im_end|>",
    ]
    backend = ReplayBackend(tiny_tokenizer, outputs)
    report = evaluate_tictoc(
        backend,
        tictoc_rows,
        family="tiny",
        max_new_tokens=4,
        cache_dir=tmp_path / protocol,
        protocol=protocol,
        desc=None,
    )
    expected_empty = sum(1 for i in range(len(tictoc_rows)) if i % 3 == 1)
    assert report["overall"]["empty_outputs"] == expected_empty
    assert report["settings"]["protocol"] == protocol
    assert [s["empty_output"] for s in report["samples"]] == [i % 3 == 1 for i in range(len(tictoc_rows))]
    scored = len(tictoc_rows) - (expected_empty if protocol == "paper" else 0)
    assert report["overall"]["n"] == scored
    assert sum(m["n"] for m in report["by_elapse_level"].values()) == scored
    assert f"| {expected_empty} |" in markdown_summary(report).split("empty outputs", 1)[1].splitlines()[0]


def test_a_family_is_one_registry_entry(monkeypatch):
    """Adding a model family is one ModelFamily in timealign/render/families.py: template detection, tool-call
    detection under both protocols, the paper renderer and the shared-prompt model types all read that entry."""
    from transformers import AutoConfig

    from timealign.render import families
    from timealign.render.paper import PaperRenderer
    from timealign.train import shared_prompt

    entry = families.ModelFamily(
        "toy",
        (("<start_of_turn>",),),
        r"```tool_code",
        "none",
        ("```tool_code", "```"),
        r"<(?:start|end)_of_turn>",
        "qwen",
        ("gemma3_text",),
    )
    monkeypatch.setitem(families.FAMILIES, "toy", entry)
    assert detect_family("{{ '<start_of_turn>user' }}") == "toy"
    assert "toy" in known_families()
    assert is_tool_call('```tool_code\nget_weather(city="Oslo")\n```', "toy")
    assert is_tool_call("```tool_code\nget_weather()\n```<end_of_turn>", "toy", protocol="paper")
    assert not is_tool_call("It is sunny in Oslo.", "toy")
    assert paper_visible_text("<end_of_turn>", "toy") == ""
    prompt = PaperRenderer(None, family="toy").prompt(
        [{"role": "user", "content": "hi", "time": "2024-01-01T00:00:00Z"}]
    )
    assert prompt.startswith("<|im_start|>")  # its paper_template: the Qwen renderer
    config = AutoConfig.for_model(
        "gemma3_text",
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=16,
    )
    config._attn_implementation = "sdpa"
    config.sliding_window = None
    shared_prompt.check_model(config)  # accepted: its model type is the new entry's
    monkeypatch.delitem(families.FAMILIES, "toy")
    with pytest.raises(ValueError, match="verified for model types"):
        shared_prompt.check_model(config)
