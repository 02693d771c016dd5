"""The `paper` protocol's scoring against the TicToc authors' own scorer (../shared/reference/tictoc/get_metric.py).

Their counting runs as they wrote it (their file executed as a script, with stand-ins for the `openai` and
`jsonschema` imports it makes at import time) on a corpus of outputs; timealign must drop the same outputs from the
denominator (empty, or holding "[ERROR]") and count the same tool calls.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import runpy
import sys
import types

import pytest

from tests.paper_reference import authors
from timealign.render.tool_calls import is_tool_call, paper_visible_text
from timealign.suites.tictoc.metrics import paper_dropped, summarize

CALL = '<tool_call>\n{"name": "track", "arguments": {"package_id": "pkg_1"}}\n</tool_call>'
# (the model's text as timealign reads it, the output as the authors' run stored it: vLLM's skip_special_tokens=True,
# then .strip())
CORPUS = [
    ("", ""),
    ("   ", ""),
    ("<|im_end|>", ""),
    ("[ERROR] Rate limit reached", "[ERROR] Rate limit reached"),
    ("It is on route.", "It is on route."),
    (CALL, CALL),
    ("Let me check. " + CALL, "Let me check. " + CALL),
    ("The log said [ERROR]; " + CALL, "The log said [ERROR]; " + CALL),
    ("Failed: [ERROR].<|im_end|>", "Failed: [ERROR]."),
    ("[error] is not their mark", "[error] is not their mark"),
    ("ERROR", "ERROR"),
    (CALL + "[ERROR]", CALL + "[ERROR]"),
    ("\n[ERROR]\n", "[ERROR]"),
    ("Sure.<|im_end|>\n", "Sure."),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "track",
            "description": "Parcel status",
            "parameters": {"type": "object", "properties": {"package_id": {}}, "required": ["package_id"]},
        },
    }
]


def _their_counts(tmp_path, monkeypatch, outputs: list[str]) -> tuple[int, int]:
    """(total, attempted) as get_metric.py prints them for Qwen3-8B outputs."""
    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    data = [{"id": f"s{i}", "function": TOOLS} for i in range(len(outputs))]
    (tmp_path / "set.json").write_text(json.dumps(data))
    (tmp_path / "out" / "Qwen3-8B").mkdir(parents=True)
    (tmp_path / "out" / "Qwen3-8B" / "Qwen3-8B-set-notime.json").write_text(
        json.dumps([{"id": f"s{i}", "output": out} for i, out in enumerate(outputs)])
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(repo))
    monkeypatch.setitem(sys.modules, "openai", types.SimpleNamespace(OpenAI=object))
    monkeypatch.setitem(sys.modules, "jsonschema", types.SimpleNamespace(validate=lambda **_: None))
    monkeypatch.setattr(
        sys, "argv", ["get_metric.py", "--data", "set", "--model", "Qwen/Qwen3-8B", "--output_dir", "out"]
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(repo / "get_metric.py"), run_name="__main__")
    attempted, total = re.search(r"Attempted tool calls: (\d+) out of (\d+)", printed.getvalue()).groups()
    return int(total), int(attempted)


@pytest.mark.parametrize("subset", [CORPUS, CORPUS[2:8], [(CALL, CALL), ("[ERROR] x", "[ERROR] x"), ("ok", "ok")]])
def test_paper_drops_the_outputs_their_scorer_drops(subset, tmp_path, monkeypatch):
    total, attempted = _their_counts(tmp_path, monkeypatch, [stored for _, stored in subset])
    dropped = [paper_dropped(text, "qwen") for text, _ in subset]
    called = [is_tool_call(text, "qwen", "paper") for text, _ in subset]
    ours = summarize(["prefer_tool"] * len(subset), called, dropped, protocol="paper")
    assert (ours["n"], ours["tool_calls"]) == (total, attempted)


def test_error_outputs_are_dropped_in_paper_only():
    assert paper_dropped("[ERROR] timeout", "qwen") and paper_dropped("<|im_end|>", "qwen")
    assert not paper_dropped("[error] timeout", "qwen") and not paper_dropped(CALL, "qwen")
    # under timealign nothing is dropped: an "[ERROR]" reply is an answer without a call
    assert summarize(["prefer_tool"], [False], [False], protocol="timealign")["n"] == 1


# Realistic outputs of each local family (as timealign reads them: special tokens kept) and what the authors' run
# stored (vLLM skip_special_tokens=True, then .strip()). Calls in the family's own format, calls drafted inside a
# think block, half-written calls, plain answers, empty and failed outputs.
LLAMA_CALL = '{"name": "track", "parameters": {"package_id": "pkg_1"}}'
MISTRAL_CALL = '[{"name": "track", "arguments": {"package_id": "pkg_1"}}]'
HERMES_CALL = '<tool_call>\n{"name": "track", "arguments": {"package_id": "pkg_1"}}\n</tool_call>'
R1_CALL = (
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>track\n```json\n{"package_id": "pkg_1"}\n```'
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
)
FAMILY_CORPUS = {
    "llama3": [
        (LLAMA_CALL + "<|eot_id|>", LLAMA_CALL),
        ("<|python_tag|>" + LLAMA_CALL + "<|eom_id|>", LLAMA_CALL),
        ("The package is on route.<|eot_id|>", "The package is on route."),
        ('I could send {"name": "track"} to check.', 'I could send {"name": "track"} to check.'),
        ('Set "parameters" first, then "name".', 'Set "parameters" first, then "name".'),
        ("<|eot_id|>", ""),
        ("[ERROR] CUDA out of memory", "[ERROR] CUDA out of memory"),
    ],
    "mistral": [
        ("[TOOL_CALLS]" + MISTRAL_CALL + "</s>", MISTRAL_CALL),
        ("[TOOL_CALLS] " + MISTRAL_CALL, MISTRAL_CALL),
        ("It is on route.</s>", "It is on route."),
        ('{"name": "track"}', '{"name": "track"}'),
        ("</s>", ""),
        ("[ERROR] timeout", "[ERROR] timeout"),
    ],
    "qwen": [
        (
            "<think>\nAsked again.\n</think>\n\n" + HERMES_CALL + "<|im_end|>",
            "<think>\nAsked again.\n</think>\n\n" + HERMES_CALL,
        ),
        (HERMES_CALL + "<|im_end|>", HERMES_CALL),
        (
            "<think>\nNo <tool_call> needed, no </tool_call>.\n</think>\n\nOn route.",
            "<think>\nNo <tool_call> needed, no </tool_call>.\n</think>\n\nOn route.",
        ),
        ('<tool_call>\n{"name": "track"', '<tool_call>\n{"name": "track"'),
        ("It is on route.<|im_end|>", "It is on route."),
        ("<|im_end|>", ""),
    ],
    "deepseek_r1": [
        ("Asked again.\n</think>\n\n" + R1_CALL + "<｜end▁of▁sentence｜>", "Asked again.\n</think>\n\n" + R1_CALL),
        ("Hmm.\n</think>\n\nIt is on route.<｜end▁of▁sentence｜>", "Hmm.\n</think>\n\nIt is on route."),
        ("I will not use <｜tool▁call▁begin｜> now.", "I will not use <｜tool▁call▁begin｜> now."),
        ("<｜end▁of▁sentence｜>", ""),
        ("[ERROR] timeout", "[ERROR] timeout"),
    ],
}


def _their_decision(tmp_path, monkeypatch, model: str, output: str) -> str:
    """get_metric.py's reading of one stored output for `model`: dropped, call or none."""
    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    name = model.split("/")[-1]
    folder = tmp_path / name
    (folder / "out" / name).mkdir(parents=True, exist_ok=True)
    (folder / "set.json").write_text(json.dumps([{"id": "s0", "function": TOOLS}]))
    (folder / "out" / name / f"{name}-set-notime.json").write_text(json.dumps([{"id": "s0", "output": output}]))
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(repo))
    monkeypatch.setitem(sys.modules, "openai", types.SimpleNamespace(OpenAI=object))
    monkeypatch.setitem(sys.modules, "jsonschema", types.SimpleNamespace(validate=lambda **_: None))
    monkeypatch.setattr(sys, "argv", ["get_metric.py", "--data", "set", "--model", model, "--output_dir", "out"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(repo / "get_metric.py"), run_name="__main__")
    attempted, total = re.search(r"Attempted tool calls: (\d+) out of (\d+)", printed.getvalue()).groups()
    return "dropped" if total == "0" else "call" if attempted == "1" else "none"


def _local_models() -> dict[str, str]:
    """Every local model their scorer has a signature for -> its timealign family."""
    from timealign.render.paper import PAPER_MODELS

    repo = authors.authors_repo()
    assert repo is not None, f"the authors' code is needed: {authors.SHARED_REFERENCE} or TIMEALIGN_TICTOC_REPO"
    spec = importlib.util.spec_from_file_location("tictoc_authors_model_map", repo / "inference" / "model_map.py")
    model_map = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_map)
    return {
        model: PAPER_MODELS[handler]["family"]
        for model, handler in model_map.MODEL_TO_HANDLER.items()
        if handler in PAPER_MODELS and model in model_map.MODEL_TO_TOOLCALL_SIGNATURE
    }


def test_paper_detection_equals_their_scorer_for_every_local_model(tmp_path, monkeypatch):
    """Per output, for each of their local models: their get_metric.py (signature of model_map.py, run as they
    wrote it) and timealign under `paper` drop, count as a call or count as no call the same outputs."""
    models = _local_models()
    assert set(models.values()) == set(FAMILY_CORPUS) and len(models) == 7
    seen = set()
    for model, family in models.items():
        for k, (text, stored) in enumerate(FAMILY_CORPUS[family]):
            assert paper_visible_text(text, family) == stored, (family, text)  # what their decoding left
            theirs = _their_decision(tmp_path / str(k), monkeypatch, model, stored)
            ours = (
                "dropped" if paper_dropped(text, family) else "call" if is_tool_call(text, family, "paper") else "none"
            )
            assert ours == theirs, (model, text)
            seen.add(theirs)
    assert seen == {"dropped", "call", "none"}
