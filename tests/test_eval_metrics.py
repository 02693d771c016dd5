"""TicToc metrics on hand-counted examples; tool-call detection on each family's real output format."""

import pytest

from timealign.suites.tictoc.metrics import confusion, length_bucket, nar_from_counts, summarize, tictoc_report
from timealign.suites.tictoc.tool_calls import detect_family, is_tool_call, known_families
from timealign.tiny import TINY_CHAT_TEMPLATE

T, N = "prefer_tool", "prefer_no_tool"


def test_nar_worked_example():
    # 10 prefer-Tool samples, 7 with a call; 20 prefer-noTool samples, 5 with a call.
    labels = [T] * 10 + [N] * 20
    called = [True] * 7 + [False] * 3 + [True] * 5 + [False] * 15
    assert confusion(labels, called) == {"tp": 7, "fn": 3, "tn": 15, "fp": 5}
    m = summarize(labels, called)
    assert m["nar"] == pytest.approx(0.5 * (7 / 10 + 15 / 20))  # 0.725
    assert m["attempt_rate_prefer_tool"] == pytest.approx(0.7)
    assert m["attempt_rate_prefer_no_tool"] == pytest.approx(0.25)
    assert m["tool_calls"] == 12


def test_nar_of_constant_policies_is_chance():
    labels = [T] * 3 + [N] * 9
    assert summarize(labels, [True] * 12)["nar"] == 0.5  # always call: TPR 1, TNR 0
    assert summarize(labels, [False] * 12)["nar"] == 0.5
    assert nar_from_counts({"tp": 2, "fn": 0, "tn": 0, "fp": 0}) is None  # a class is missing


def test_length_buckets_and_breakdowns():
    assert [length_bucket(n) for n in (5, 7, 8, 12, 13, 21)] == ["short", "short", "medium", "medium", "long", "long"]
    rows = [{"label": T, "sensitivity": "high", "elapse_level": 2, "num_turns": 5},
            {"label": N, "sensitivity": "high", "elapse_level": 0, "num_turns": 13},
            {"label": N, "sensitivity": "low", "elapse_level": 0, "num_turns": 9}]
    report = tictoc_report(rows, [True, True, False])
    assert report["overall"]["nar"] == pytest.approx(0.5 * (1 + 1 / 2))
    assert report["by_sensitivity"]["high"]["fp"] == 1 and report["by_sensitivity"]["low"]["tn"] == 1
    assert set(report["by_elapse_level"]) == {"small", "large"}
    assert report["by_length"]["long"]["n"] == 1


QWEN_CALL = '<tool_call>\n{"name": "get_stock_price", "arguments": {"symbol": "ACME"}}\n</tool_call><|im_end|>'
QWEN3_THINK_CALL = ("<think>\nThe last check was 3 hours ago, prices move.\n</think>\n\n" + QWEN_CALL)
QWEN3_THINK_ANSWER = ("<think>\nMaybe I should emit <tool_call> again... no, it was 4 seconds ago.\n</think>\n\n"
                      "ACME is at 101.25 USD.<|im_end|>")
LLAMA_CALL = '{"name": "get_stock_price", "parameters": {"symbol": "ACME"}}<|eot_id|>'
LLAMA_TRUNCATED = '{"name": "get_stock_price", "parameters": {"sym'
LLAMA_BUILTIN = '<|python_tag|>brave_search.call(query="ACME stock price")<|eom_id|>'
LLAMA_TEXT = 'ACME is at 101.25. The last lookup returned {"price": 101.25}.<|eot_id|>'
MISTRAL_CALL = '[TOOL_CALLS][{"name": "get_stock_price", "arguments": {"symbol": "ACME"}}]</s>'
MISTRAL_V11_CALL = '[TOOL_CALLS]get_stock_price[ARGS]{"symbol": "ACME"}</s>'


@pytest.mark.parametrize("family, text, expected", [
    ("qwen", QWEN_CALL, True), ("qwen", QWEN3_THINK_CALL, True), ("qwen", QWEN3_THINK_ANSWER, False),
    ("qwen", "ACME is at 101.25 USD.<|im_end|>", False),
    ("llama3", LLAMA_CALL, True), ("llama3", LLAMA_TRUNCATED, True), ("llama3", LLAMA_BUILTIN, True),
    ("llama3", LLAMA_TEXT, False), ("llama3", '{"answer": 3}', False),
    ("mistral", MISTRAL_CALL, True), ("mistral", MISTRAL_V11_CALL, True), ("mistral", "ACME is at 101.", False),
    ("tiny", '<tool_call>{"name": "get_price", "arguments": {}}</tool_call><|im_end|>', True),
    ("tiny", "The price is 3.<|im_end|>", False),
])
def test_tool_call_detection(family, text, expected):
    assert is_tool_call(text, family) is expected


def test_unknown_family_lists_known_ones():
    with pytest.raises(ValueError) as err:
        is_tool_call("x", "gemma")
    for family in known_families():
        assert family in str(err.value)
    with pytest.raises(ValueError, match="set eval.family"):
        detect_family("{{ messages }}")


def test_family_detection_from_templates():
    assert detect_family(TINY_CHAT_TEMPLATE) == "tiny"
    assert detect_family("{{- '<|start_header_id|>' + message['role'] }}") == "llama3"
    assert detect_family("{%- if tools %}<tools>{% endif %}<|im_start|>...<tool_call>") == "qwen"
    assert detect_family("[AVAILABLE_TOOLS]...[TOOL_CALLS]") == "mistral"
