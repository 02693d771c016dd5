"""API models through the chat-completions backend (`eval.backend=chat`, timealign/backends/chat.py).

The pure parts first, with hand-written expectations: the requests of both prompt protocols (the `paper` one is the
TicToc authors' `inference/api/openai.py format_input`), realistic API replies to canonical strings, tool-call
detection of the `api` family under both protocols (text and calls together, calls written as text, empty replies),
the metrics on them, and per-sample failures. Then the real vLLM OpenAI-compatible server on the CPU engine, started
with `--enable-auto-tool-choice --tool-call-parser hermes`: the tiny template renders tools in a ChatML system turn
and calls as `<tool_call>{...}</tool_call>`, both tags special tokens, which vLLM 0.32's hermes parser accepts. A
random tiny model never calls on its own, so the server tests serve a tiny model trained here in seconds to answer
each of four scenarios one way (a call, text, text then a call); the structured path under `tool_choice=auto`, the
forced one (`required`, a named tool) and the eval CLI run end to end. The server tests need vLLM (`make test-vllm`)
and are skipped without it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from needs import require_vllm
from vllm_server import vllm_server

from timealign.backends.base import BackendError, GenerationError
from timealign.backends.chat import ChatBackend, reply_from_response
from timealign.backends.factory import make_backend
from timealign.config import load_recipe
from timealign.render.chat import RULES_PROMPT
from timealign.render.chat_api import ChatReply, parse_reply, reply_string
from timealign.render.paper import PAPER_REMINDER
from timealign.render.tool_calls import is_empty_output, is_tool_call, paper_api_output
from timealign.suites.tictoc.metrics import summarize
from timealign.suites.tictoc.requests import ChatRequestRenderer
from timealign.suites.tictoc.suite import evaluate_tictoc


def _m(role, content, time, **extra):
    """A message as a prepared pair row holds it (Arrow pads missing keys with None)."""
    return {
        "role": role,
        "content": content,
        "time": time,
        "tool_calls": None,
        "tool_call_id": None,
        "name": None,
        **extra,
    }


SAMPLE = [
    _m("system", "You track parcels.", "2025-03-01T09:00:00Z"),
    _m("user", "Where is my parcel 77?", "2025-03-01T09:00:05Z"),
    _m(
        "assistant",
        None,
        "2025-03-01T09:00:06Z",
        tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": "track", "arguments": "{'parcel': 77}"}}
        ],
    ),
    _m("tool", '{"status": "in transit"}', "2025-03-01T09:00:07Z", tool_call_id="call_1", name="track"),
    _m("assistant", "It is in transit.", "2025-03-01T09:00:08Z"),
    _m("user", "Is it delivered now?", "2025-03-01T15:30:00Z"),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "track",
            "description": "Parcel status.",
            "parameters": {"type": "object", "properties": {"parcel": {"type": "integer"}}, "required": ["parcel"]},
        },
    }
]


# ----------------------------------------------------------------------------------------------- requests
def test_paper_requests_are_the_authors_api_messages():
    request = json.loads(ChatRequestRenderer(protocol="paper").prompt(SAMPLE, json.dumps(TOOLS)))
    assert request == {
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "[2025-03-01T09:00:00Z] You track parcels."},
            {"role": "user", "content": "[2025-03-01T09:00:05Z] Where is my parcel 77?"},
            # no content key; the arguments string as the data has it, Python literal and all
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "track", "arguments": "{'parcel': 77}"}}
                ],
            },
            {"role": "tool", "content": '[2025-03-01T09:00:07Z] {"status": "in transit"}', "tool_call_id": "call_1"},
            {"role": "assistant", "content": "[2025-03-01T09:00:08Z] It is in transit."},
            {"role": "user", "content": "[2025-03-01T15:30:00Z] Is it delivered now?"},
        ],
    }

    plain = json.loads(
        ChatRequestRenderer(protocol="paper", timestamps=False, prompt_mode="reminder").prompt(SAMPLE, TOOLS)
    )["messages"]
    assert plain[0] == {"role": "system", "content": "You track parcels." + PAPER_REMINDER}
    assert PAPER_REMINDER == " Note that the environment may be dynamic. Be aware of the time elapsed."
    assert [m.get("content") for m in plain[1:]] == [
        "Where is my parcel 77?",
        None,
        '{"status": "in transit"}',
        "It is in transit.",
        "Is it delivered now?",
    ]


def test_timealign_requests_stamp_every_turn_and_send_json_arguments():
    request = json.loads(ChatRequestRenderer(protocol="timealign").prompt(SAMPLE, TOOLS))
    assert request == {
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "You track parcels."},
            {"role": "user", "content": "[2025-03-01T09:00:05Z]Where is my parcel 77?"},
            {
                "role": "assistant",
                "content": "[2025-03-01T09:00:06Z]",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "track", "arguments": '{"parcel": 77}'}}
                ],
            },
            {"role": "tool", "content": '[2025-03-01T09:00:07Z]{"status": "in transit"}', "tool_call_id": "call_1"},
            {"role": "assistant", "content": "[2025-03-01T09:00:08Z]It is in transit."},
            {"role": "user", "content": "[2025-03-01T15:30:00Z]Is it delivered now?"},
        ],
    }

    plain = json.loads(ChatRequestRenderer(timestamps=False, prompt_mode="rules").prompt(SAMPLE, TOOLS))["messages"]
    assert plain[0] == {"role": "system", "content": "You track parcels.\n\n" + RULES_PROMPT}
    assert "content" not in plain[2] and plain[2]["tool_calls"][0]["function"]["arguments"] == '{"parcel": 77}'
    # the same sample renders to the same string every time (the cache key)
    assert ChatRequestRenderer().prompt(SAMPLE, TOOLS) == ChatRequestRenderer().prompt(SAMPLE, json.dumps(TOOLS))


def test_request_renderer_refuses_what_an_api_cannot_carry():
    with pytest.raises(ValueError, match="elapsed badge.*cannot prefill"):
        ChatRequestRenderer(elapsed=True)
    with pytest.raises(ValueError, match="data.protocol"):
        ChatRequestRenderer(protocol="authors")
    with pytest.raises(ValueError, match="unknown prompt_mode"):
        ChatRequestRenderer(prompt_mode="hint")
    with pytest.raises(ValueError, match="has no `time`"):
        ChatRequestRenderer().prompt([_m("user", "hi", None)], TOOLS)


def _json_or_none(text):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


def test_every_v1_sample_becomes_a_request(tictoc_v1_dir):
    """All real v1 samples render in both protocols; the paper requests keep the data's arguments strings (some are
    Python literals, e.g. tide_height_12), the timealign ones send JSON for every call."""
    from tests.paper_reference.make_golden import sample_rows

    rows = list(sample_rows(tictoc_v1_dir).values())
    raw = [c["function"]["arguments"] for r in rows for m in r["prompt"] for c in m.get("tool_calls") or []]
    not_json = sum(_json_or_none(a) is None for a in raw)
    assert not_json > 0
    for protocol in ("paper", "timealign"):
        sent = [
            c["function"]["arguments"]
            for r in rows
            for m in json.loads(ChatRequestRenderer(protocol=protocol).prompt(r["prompt"], r["tools"]))["messages"]
            for c in m.get("tool_calls") or []
        ]
        assert len(sent) == len(raw)
        assert sum(_json_or_none(a) is None for a in sent) == (not_json if protocol == "paper" else 0)
        if protocol == "paper":
            assert sent == raw


def test_request_body_follows_the_recipe():
    recipe = load_recipe("tiny", {"eval.backend": "chat", "eval.base_url": "http://127.0.0.1:9/v1"})
    backend = make_backend(recipe.eval, "gpt-4.1-2025-04-14")
    assert isinstance(backend, ChatBackend) and backend.tokenizer is None
    body = backend.request_body(SAMPLE[:2], TOOLS, max_new_tokens=64)
    assert body == {
        "model": "gpt-4.1-2025-04-14",
        "messages": SAMPLE[:2],
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_completion_tokens": 64,
        "temperature": 0.0,
    }  # greedy: nothing else, no vLLM extras

    sampled = backend.request_body(SAMPLE[:2], TOOLS, max_new_tokens=0, temperature=0.6, top_p=0.95, top_k=20)
    assert "max_completion_tokens" not in sampled  # 0: no limit, as the authors'
    assert (sampled["temperature"], sampled["top_p"], sampled["seed"], sampled["top_k"]) == (0.6, 0.95, 0, 20)
    assert "tools" not in backend.request_body(SAMPLE[:2], [], max_new_tokens=8)  # no tool_choice without tools

    authors = make_backend(
        load_recipe(
            "tiny",
            {
                "eval.backend": "chat",
                "eval.base_url": "http://127.0.0.1:9/v1",
                "eval.chat_sampling": "false",
                "eval.tool_choice": "track",
                "eval.served_model": "o3-2025-04-16",
            },
        ).eval,
        "ignored",
    )
    body = authors.request_body(SAMPLE[:2], TOOLS, max_new_tokens=0)
    assert body == {
        "model": "o3-2025-04-16",
        "messages": SAMPLE[:2],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "track"}},
    }
    assert authors.resolve_sampling() == {
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "min_p": None,
        "seed": None,
    }
    assert backend.fingerprint != authors.fingerprint  # tool choice and sampling are part of the cache key
    with pytest.raises(BackendError, match="chat_sampling=false"):
        authors.resolve_sampling(temperature=0.7)
    with pytest.raises(BackendError, match="not rendered prompt strings"):
        backend.ask("<|im_start|>user\nhi<|im_end|>\n")


# ----------------------------------------------------------------------------------------------- replies
def _response(message: dict, finish_reason: str, model: str = "gpt-4.1-2025-04-14") -> dict:
    """A chat-completions response body as the API sends it."""
    return {
        "id": "chatcmpl-BxYz",
        "object": "chat.completion",
        "created": 1752000000,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 210, "completion_tokens": 17, "total_tokens": 227},
    }


CALL = {"id": "call_Qm2rB7", "type": "function", "function": {"name": "track", "arguments": '{"parcel":77}'}}
HERMES_TEXT = '<tool_call>\n{"name": "track", "arguments": {"parcel": 77}}\n</tool_call>'
# (name, response, paper call, timealign call, empty)
REPLIES = [
    (
        "gpt-4.1 structured call",
        _response({"content": None, "tool_calls": [CALL], "refusal": None, "annotations": []}, "tool_calls"),
        True,
        True,
        False,
    ),
    (
        "text answer",
        _response(
            {"content": "It was in transit at 09:00; it may have moved since.", "refusal": None, "annotations": []},
            "stop",
        ),
        False,
        False,
        False,
    ),
    (
        "gpt-4o text and a call",
        _response(
            {"content": "Let me check the latest status.", "tool_calls": [CALL]}, "tool_calls", "gpt-4o-2024-11-20"
        ),
        False,
        True,
        False,
    ),
    (
        "a server without a tool parser",
        _response({"content": HERMES_TEXT, "tool_calls": []}, "stop", "qwen"),
        False,
        True,
        False,
    ),
    (
        "a Llama-style JSON call as text",
        _response({"content": '{"name": "track", "parameters": {"parcel": 77}}'}, "stop", "llama"),
        False,
        True,
        False,
    ),
    (
        "deepseek-reasoner: reasoning, then text",
        _response(
            {"content": "It was in transit 6 hours ago.", "reasoning_content": "Maybe call track? No."},
            "stop",
            "deepseek-reasoner",
        ),
        False,
        False,
        False,
    ),
    (
        "a call drafted in a think block",
        _response(
            {"content": "<think>I could " + HERMES_TEXT + " but no.</think>It is still in transit."}, "stop", "qwen3"
        ),
        False,
        False,
        False,
    ),
    ("o3 spent its budget on reasoning", _response({"content": None}, "length", "o3-2025-04-16"), False, False, True),
    (
        "vLLM forced call (required)",
        _response({"content": "", "tool_calls": [CALL]}, "tool_calls", "tiny"),
        True,
        True,
        False,
    ),
]


def test_replies_to_canonical_strings():
    texts = [reply_string(reply_from_response(r)) for _, r, *_ in REPLIES]
    call = '{"id": "call_Qm2rB7", "type": "function", "function": {"name": "track", "arguments": "{\\"parcel\\":77}"}}'
    assert texts[0] == '{"content": null, "tool_calls": [' + call + '], "finish_reason": "tool_calls"}'
    assert texts[2] == (
        '{"content": "Let me check the latest status.", "tool_calls": [' + call + '], "finish_reason": "tool_calls"}'
    )
    assert texts[5] == (
        '{"content": "It was in transit 6 hours ago.", "tool_calls": [], "finish_reason": "stop", '
        '"reasoning": "Maybe call track? No."}'
    )
    assert texts[7] == '{"content": null, "tool_calls": [], "finish_reason": "length"}'
    assert parse_reply(texts[2]) == ChatReply("Let me check the latest status.", [CALL], "tool_calls")
    assert parse_reply(texts[7]).empty and not parse_reply(texts[0]).empty
    # a server that sends arguments as an object: stored as the JSON string the API type says
    odd = reply_from_response(
        _response(
            {
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "track", "arguments": {"parcel": 77}}}
                ],
            },
            "tool_calls",
        )
    )
    assert odd.tool_calls[0]["function"]["arguments"] == '{"parcel": 77}'
    with pytest.raises(BackendError, match="unexpected"):
        reply_from_response({"error": {"message": "The model `gpt-9` does not exist"}})
    with pytest.raises(ValueError, match="not a chat reply"):
        parse_reply('<tool_call>{"name": "track"}</tool_call>')


@pytest.mark.parametrize("name,response,paper,timealign,empty", REPLIES, ids=[r[0] for r in REPLIES])
def test_api_detection_under_both_protocols(name, response, paper, timealign, empty):
    text = reply_string(reply_from_response(response))
    assert is_tool_call(text, "api", "paper") is paper
    assert is_tool_call(text, "api", "timealign") is timealign
    assert is_empty_output(text, "api") is empty


def test_paper_api_output_is_what_the_authors_handler_returned():
    texts = [reply_string(reply_from_response(r)) for _, r, *_ in REPLIES]
    assert paper_api_output(texts[0]) == (
        "[ChatCompletionMessageToolCall(id='call_Qm2rB7', function=Function("
        "arguments='{\"parcel\":77}', name='track'), type='function')]"
    )
    assert paper_api_output(texts[2]) == "Let me check the latest status."  # content wins, the call is lost
    assert paper_api_output(texts[7]) == ""  # their "[ERROR]": left out of the denominator


def test_metrics_on_api_replies_by_hand():
    labels = [
        "prefer_tool",
        "prefer_no_tool",
        "prefer_tool",
        "prefer_tool",
        "prefer_no_tool",
        "prefer_no_tool",
        "prefer_tool",
        "prefer_tool",
        "prefer_no_tool",
    ]
    texts = [reply_string(reply_from_response(r)) for _, r, *_ in REPLIES]
    empty = [is_empty_output(t, "api") for t in texts]
    # timealign: calls at 0, 2, 3, 4, 8 -> TP 3 (0, 2, 3), FN 2 (6, 7), FP 2 (4, 8), TN 2 (1, 5); the empty one stays
    ours = summarize(labels, [is_tool_call(t, "api") for t in texts], empty, "timealign")
    assert (ours["n"], ours["tp"], ours["fn"], ours["fp"], ours["tn"]) == (9, 3, 2, 2, 2)
    assert ours["nar"] == pytest.approx(0.5 * (3 / 5 + 2 / 4)) and ours["empty_outputs"] == 1
    # paper: calls at 0 and 8; reply 7 (empty) leaves -> TP 1, FN 3 (2, 3, 6), FP 1 (8), TN 3 (1, 4, 5)
    paper = summarize(labels, [is_tool_call(t, "api", "paper") for t in texts], empty, "paper")
    assert (paper["n"], paper["tp"], paper["fn"], paper["fp"], paper["tn"]) == (8, 1, 3, 1, 3)
    assert paper["nar"] == pytest.approx(0.5 * (1 / 4 + 3 / 4)) and paper["empty_outputs"] == 1


def _rows(n: int = 2) -> list[dict]:
    return [
        {
            "id": f"parcel_{i}",
            "elapse_level": 1,
            "label": "prefer_tool",
            "sensitivity": "high",
            "num_turns": 6,
            "prompt": SAMPLE,
            "tools": json.dumps(TOOLS),
        }
        for i in range(n)
    ]


def test_failed_requests_are_recorded_per_sample(tmp_path):
    """The authors' handler wrote "[ERROR]: <exception>" and the scorer dropped it; here a failed request is listed
    under `errors` with its message, left out of the metrics, not cached, and retried by a rerun."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket is closed
    backend = ChatBackend(f"http://127.0.0.1:{port}/v1", model="gpt-4.1", max_retries=0)
    with pytest.raises(GenerationError, match="cannot reach"):
        backend.generate([ChatRequestRenderer().prompt(SAMPLE, TOOLS)], max_new_tokens=8, desc=None)
    report = evaluate_tictoc(
        backend, _rows(), ChatRequestRenderer(), family="api", max_new_tokens=8, cache_dir=tmp_path
    )
    assert [e["id"] for e in report["errors"]] == ["parcel_0", "parcel_1"]
    assert all("cannot reach" in e["error"] for e in report["errors"])
    assert report["overall"]["n"] == 0 and report["overall"]["nar"] is None
    assert report["settings"]["family"] == "api" and report["settings"]["backend"] == "chat"
    assert report["generation"]["failed"] == 2 and not (tmp_path / "tictoc.jsonl").read_text()


# ----------------------------------------------------------------------------------------------- the real server
needs_vllm = pytest.mark.vllm
KINDS = ("call", "text", "both", "call")  # by scenario, in sorted id order
TEXT, PREAMBLE = "It has not changed.", "Let me check."


def _server_messages(messages: list[dict]) -> list[dict]:
    """The messages as vLLM hands them to the template: tool-call arguments parsed to a mapping."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            try:
                args = json.loads(call["function"]["arguments"])
            except json.JSONDecodeError:
                args = {}
            call["function"]["arguments"] = args if isinstance(args, dict) else {}
    return out


def _last_call(row: dict) -> dict:
    fn = [c for m in row["prompt"] if m.get("tool_calls") for c in m["tool_calls"]][-1]["function"]
    return {"name": fn["name"], "arguments": json.loads(fn["arguments"])}


def _kind(row: dict, ids: list[str]) -> str:
    return KINDS[ids.index(row["id"]) % len(KINDS)]


def _target(row: dict, ids: list[str]) -> str:
    call = "<tool_call>" + json.dumps(_last_call(row)) + "</tool_call>"
    return {"call": call, "text": TEXT, "both": PREAMBLE + call}[_kind(row, ids)]


def build_api_agent(out: Path, base_dir: Path, rows: list[dict]) -> Path:
    """The tiny model trained to answer each scenario one way (KINDS) when served behind a chat API.

    Trained on the prompts the server renders for our requests in both protocols (the first elapse level of each
    scenario; the others differ in their last stamp only), until greedy decoding reproduces every target.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    ids = sorted({r["id"] for r in rows})
    examples, checks = [], []
    for protocol in ("paper", "timealign"):
        renderer = ChatRequestRenderer(protocol=protocol)
        for row in rows:
            request = json.loads(renderer.prompt(row["prompt"], row["tools"]))
            prompt = tokenizer.apply_chat_template(
                _server_messages(request["messages"]),
                tools=request["tools"],
                add_generation_prompt=True,
                tokenize=False,
            )
            pair = (
                tokenizer(prompt, add_special_tokens=False)["input_ids"],
                tokenizer(_target(row, ids) + tokenizer.eos_token, add_special_tokens=False)["input_ids"],
            )
            checks.append(pair)
            if row["elapse_level"] == 0:
                examples.append(pair)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    width = max(len(p) + len(c) for p, c in examples)
    inputs = torch.full((len(examples), width), tokenizer.pad_token_id)
    labels = torch.full((len(examples), width), -100)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (p, c) in enumerate(examples):
        inputs[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)

    def solved() -> bool:
        model.eval()
        with torch.no_grad():
            ok = all(
                model.generate(torch.tensor([p]), max_new_tokens=len(c), do_sample=False)[0, len(p) :].tolist() == c
                for p, c in checks
            )
        model.train()
        return ok

    for step in range(1, 301):
        model(input_ids=inputs, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 20 == 0 and solved():
            break
    else:
        raise AssertionError("the tiny API agent did not learn its targets in 300 steps")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def short_rows(tmp_path_factory):
    """Held-out synthetic TicToc rows, histories cut to the first exchange and the final question (fast to train)."""
    from helpers import tictoc_rows

    rows = tictoc_rows(tmp_path_factory.mktemp("prepared"))
    return [dict(r, prompt=r["prompt"][:4] + r["prompt"][-1:]) for r in rows]


@pytest.fixture(scope="module")
def api_agent(tiny_model_dir, short_rows, tmp_path_factory):
    require_vllm()
    return build_api_agent(tmp_path_factory.mktemp("api-agent"), tiny_model_dir, short_rows)


@pytest.fixture(scope="module")
def server(api_agent, tmp_path_factory):
    """`python -m vllm.entrypoints.openai.api_server` with auto tool choice and the hermes parser (CPU engine)."""
    with vllm_server(
        api_agent,
        "tiny-api",
        tmp_path_factory.mktemp("server") / "server.log",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ) as url:
        yield url, api_agent


def _chat_backend(url: str, **overrides) -> ChatBackend:
    recipe = load_recipe(
        "tiny",
        {
            "eval.backend": "chat",
            "eval.base_url": f"{url}/v1",
            "eval.served_model": "tiny-api",
            "eval.batch_size": "4",
            **overrides,
        },
    )
    return make_backend(recipe.eval, "tiny-api")


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    return json.loads(urllib.request.urlopen(request, timeout=120).read())


@needs_vllm
@pytest.mark.slow
def test_the_server_renders_our_requests_unchanged(server, short_rows):
    """vLLM's /tokenize of a request equals the tiny template applied to its messages here: the stamps, the tool
    schemas and the calls reach the model's template as sent, in both protocols."""
    from transformers import AutoTokenizer

    url, model_dir = server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for protocol in ("paper", "timealign"):
        request = json.loads(
            ChatRequestRenderer(protocol=protocol).prompt(short_rows[0]["prompt"], short_rows[0]["tools"])
        )
        ours = tokenizer.apply_chat_template(
            _server_messages(request["messages"]), tools=request["tools"], add_generation_prompt=True, tokenize=False
        )
        served = _post(f"{url}/tokenize", {"model": "tiny-api", "add_generation_prompt": True, **request})
        assert served["tokens"] == tokenizer(ours, add_special_tokens=False)["input_ids"]
        assert ("[2023-08-11T14:02:57Z]" if protocol == "timealign" else "[2023-08-11T14:02:57Z] ") in ours


@needs_vllm
@pytest.mark.slow
def test_structured_tool_calls_under_auto_tool_choice(server, short_rows, tmp_path):
    """tool_choice=auto: the hermes parser turns the model's <tool_call> into structured `tool_calls`, text before
    it into `content`; detection and NAR by hand under both protocols."""
    url, _ = server
    ids = sorted({r["id"] for r in short_rows})
    # the rows the hand counts below are about (scenario -> labels at elapse levels 0, 1, 2)
    assert {i: [r["label"][len("prefer_") :] for r in short_rows if r["id"] == i] for i in ids} == {
        "airline_baggage_policy_1": ["no_tool", "no_tool", "tool"],  # KINDS: call
        "hotel_room_availability_rates_1": ["no_tool", "tool", "tool"],  # text
        "live_sports_score_tracker_1": ["no_tool", "tool", "tool"],  # text, then a call
        "stock_market_order_book_1": ["no_tool", "tool", "tool"],
    }  # call
    backend = _chat_backend(url)
    reports = {}
    for protocol in ("timealign", "paper"):
        reports[protocol] = evaluate_tictoc(
            backend,
            short_rows,
            ChatRequestRenderer(protocol=protocol),
            family="api",
            max_new_tokens=64,
            cache_dir=tmp_path / protocol,
            protocol=protocol,
        )
    for protocol, report in reports.items():
        for row, sample in zip(short_rows, report["samples"]):
            reply, kind = parse_reply(sample["output"]), _kind(row, ids)
            call = [{"name": _last_call(row)["name"], "arguments": json.dumps(_last_call(row)["arguments"])}]
            assert [c["function"] for c in reply.tool_calls] == ([] if kind == "text" else call), (protocol, row["id"])
            assert reply.content == {"call": None, "text": TEXT, "both": PREAMBLE}[kind]
            assert reply.finish_reason == ("stop" if kind == "text" else "tool_calls")
    # timealign: calls in airline, sports, stock -> TP 1+2+2, FN 2 (hotel), FP 2+1+1, TN 1 (hotel)
    o = reports["timealign"]["overall"]
    assert (o["n"], o["tp"], o["fn"], o["fp"], o["tn"]) == (12, 5, 2, 4, 1)
    assert o["nar"] == pytest.approx(0.5 * (5 / 7 + 1 / 5)) and o["empty_outputs"] == 0
    # paper: sports' text wins over its call -> calls in airline, stock: TP 1+2, FN 2+2, FP 2+1, TN 1+1
    o = reports["paper"]["overall"]
    assert (o["n"], o["tp"], o["fn"], o["fp"], o["tn"]) == (12, 3, 4, 3, 2)
    assert o["nar"] == pytest.approx(0.5 * (3 / 7 + 2 / 5))
    again = evaluate_tictoc(
        backend, short_rows, ChatRequestRenderer(), family="api", max_new_tokens=64, cache_dir=tmp_path / "timealign"
    )
    assert again["generation"]["cached"] == 12 and again["samples"] == reports["timealign"]["samples"]


@needs_vllm
@pytest.mark.slow
def test_forced_tool_calls_and_a_failed_request(server, short_rows, tmp_path):
    """tool_choice=required and a named tool: vLLM's hermes structural tag forces `<tool_call>{"name": "<a tool>",
    "arguments": ` (the arguments' value is left free). A call the model would make anyway comes back structured; a
    forced one whose arguments never close within the budget comes back as text with finish_reason "length": a call
    attempt under timealign's text fallback, no call for the authors' scorer. A request over the server's
    max_model_len fails alone (HTTP 400), recorded for its sample."""
    url, _ = server
    ids = sorted({r["id"] for r in short_rows})
    report = evaluate_tictoc(
        _chat_backend(url, **{"eval.tool_choice": "required"}),
        short_rows,
        ChatRequestRenderer(),
        family="api",
        max_new_tokens=48,
        cache_dir=tmp_path / "required",
    )
    for row, sample in zip(short_rows, report["samples"]):
        reply, names = parse_reply(sample["output"]), [t["function"]["name"] for t in json.loads(row["tools"])]
        assert reply.content in (None, "") or reply.content.startswith('<tool_call>{"name": "')
        assert all(call["function"]["name"] in names for call in reply.tool_calls)
        assert bool(reply.tool_calls) or reply.finish_reason == "length"
        if _kind(row, ids) == "call":  # the forced prefix is what the model writes anyway: the trained call
            assert [c["function"]["name"] for c in reply.tool_calls] == [_last_call(row)["name"]]
            assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == _last_call(row)["arguments"]
            assert reply.finish_reason == "tool_calls"
        assert is_tool_call(sample["output"], "api", "timealign")
    o = report["overall"]
    assert o["tool_calls"] == len(short_rows) and o["attempt_rate_prefer_tool"] == 1.0
    structured = sum(bool(parse_reply(s["output"]).tool_calls) for s in report["samples"])
    assert sum(is_tool_call(s["output"], "api", "paper") for s in report["samples"]) == structured >= 6

    stock = [r for r in short_rows if r["id"] == "stock_market_order_book_1"]
    named = evaluate_tictoc(
        _chat_backend(url, **{"eval.tool_choice": "get_order_book"}),
        stock,
        ChatRequestRenderer(),
        family="api",
        max_new_tokens=48,
        cache_dir=tmp_path / "named",
    )
    for row, sample in zip(stock, named["samples"]):
        reply = parse_reply(sample["output"])
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls] == [
            ("get_order_book", _last_call(row)["arguments"])
        ]
        assert reply.content == "" and reply.finish_reason == "stop"  # OpenAI's finish reason for a named choice

    too_long = dict(
        short_rows[0],
        id="too_long",
        prompt=[*short_rows[0]["prompt"][:-1], dict(short_rows[0]["prompt"][-1], content="How much now? " * 2000)],
    )
    report = evaluate_tictoc(
        _chat_backend(url),
        [short_rows[0], too_long, short_rows[1]],
        ChatRequestRenderer(),
        family="api",
        max_new_tokens=48,
        cache_dir=tmp_path / "long",
    )
    assert [e["id"] for e in report["errors"]] == ["too_long"] and "HTTP 400" in report["errors"][0]["error"]
    assert report["overall"]["n"] == 2 and report["samples"][1]["output"] is None


@needs_vllm
@pytest.mark.slow
def test_eval_cli_with_the_chat_backend(server, tmp_path):
    """`python eval/run.py ... eval.backend=chat` end to end on a few TicToc samples, in both prompt protocols."""
    from helpers import REPO_ROOT

    url, _ = server
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TIMEALIGN_CACHE=str(tmp_path / "cache"))
    common = [
        sys.executable,
        str(REPO_ROOT / "eval/run.py"),
        "recipe=tiny",
        "checkpoint=tiny-api",
        f"data.prepared_dir={tmp_path / 'prep'}",
        "data.synthetic_trajectories=2",
        "eval.max_samples=4",
        "eval.max_new_tokens=32",
        "eval.backend=chat",
        f"eval.base_url={url}/v1",
        "eval.served_model=tiny-api",
    ]
    for protocol in ("timealign", "paper"):
        out = tmp_path / f"eval-{protocol}"
        proc = subprocess.run(
            [*common, f"data.protocol={protocol}", f"out={out}"], env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads((out / "tictoc.json").read_text())
        assert report["backend"]["name"] == "chat" and report["settings"]["family"] == "api"
        assert report["settings"]["prompt_protocol"] == protocol == report["settings"]["protocol"]
        assert report["overall"]["n"] == 4 and report["generation"]["generated"] == 4 and not report["errors"]
        replies = [parse_reply(s["output"]) for s in report["samples"]]  # every output is a reply message
        assert report["overall"]["tool_calls"] == sum(
            is_tool_call(s["output"], "api", protocol) for s in report["samples"]
        )
        assert report["overall"]["empty_outputs"] == sum(r.empty for r in replies)
        assert "| NAR |" in (out / "report.md").read_text()
