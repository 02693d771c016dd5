"""The `paper` protocol's scoring against the TicToc authors' own scorer (../shared/reference/tictoc/get_metric.py).

Their counting runs as they wrote it (their file executed as a script, with stand-ins for the `openai` and
`jsonschema` imports it makes at import time) on a corpus of outputs; timealign must drop the same outputs from the
denominator (empty, or holding "[ERROR]") and count the same tool calls.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import runpy
import sys
import types

import pytest

from tests.paper_reference import authors
from timealign.render.tool_calls import is_tool_call
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
