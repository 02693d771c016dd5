"""`timealign serve` as a real process, with the official `openai` SDK as client, in front of a recording upstream.

Parity: v1 held-out trajectories sent with their timestamps reach the upstream as the very prompt the TicToc
evaluator renders for them (byte for byte). Then tool calls, streaming, the SQLite clock across a restart, the bounds
and error bodies, and the key never logged. The real vLLM upstream is tests/test_serve_vllm.py (make test-vllm).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

import httpx
import openai  # the official SDK as client (the dev extra)
import pytest
from serve_helpers import RecordingUpstream, client_messages, decoded_tools, gateway, write_checkpoint

from timealign.config import load_recipe

STAMP = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\]")


@pytest.fixture(scope="module")
def v1_recipe(tictoc_v1_dir, tmp_path_factory):
    """The tiny recipe on the v1 release with the elapsed badge on (the demo's training render settings)."""
    prepared = tmp_path_factory.mktemp("v1-pairs")
    return load_recipe(
        "tiny",
        {
            "data.source": "v1",
            "data.path": str(tictoc_v1_dir),
            "data.prepared_dir": str(prepared),
            "data.elapsed": "true",
            "eval.max_samples": "24",
        },
    )


@pytest.fixture(scope="module")
def checkpoint(v1_recipe, tiny_model_dir, tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", tiny_model_dir, v1_recipe)


@pytest.fixture()
def upstream():
    server = RecordingUpstream()
    yield server
    server.close()


def start(checkpoint, upstream, tmp_path, *extra, name="gateway", **kw):
    return gateway(
        [f"checkpoint={checkpoint}", f"upstream={upstream.url}", f"store={tmp_path / 'clock.sqlite'}", *extra],
        tmp_path / f"{name}.log",
        **kw,
    )


def test_prompts_equal_the_evaluators_byte_for_byte(v1_recipe, checkpoint, upstream, tmp_path, tiny_tokenizer):
    from timealign.render.chat import PromptRenderer
    from timealign.suites.tictoc.suite import heldout_sample, tictoc_prompts

    rows, _ = heldout_sample(v1_recipe)  # the rows `eval/run.py` scores, as the suite reads them
    expected = tictoc_prompts(PromptRenderer.for_data(tiny_tokenizer, v1_recipe.data), rows)
    assert all(" since the last tool result)" in p for p in expected[:1])  # the elapsed badge is in play
    with start(checkpoint, upstream, tmp_path) as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="unused")
        for row in rows:
            client.chat.completions.create(
                model="served-tiny",
                messages=client_messages(row["prompt"]),
                tools=decoded_tools(row["tools"]) or openai.omit,
                max_tokens=16,
                temperature=0,
            )
    assert len(upstream.prompts()) == len(rows) == 24
    for sent, wanted, row in zip(upstream.prompts(), expected, rows):
        assert sent == wanted, row["id"]
    body = upstream.requests[0][1]
    assert body["model"] == "served-tiny" and body["max_tokens"] == 16 and body["temperature"] == 0
    assert body["skip_special_tokens"] is False  # tool-call markers stay visible, as the evaluator decodes


def test_tool_calls_and_streaming(checkpoint, upstream, tmp_path):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    with start(checkpoint, upstream, tmp_path) as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="unused")
        assert [m.id for m in client.models.list()] == ["served-tiny"]

        upstream.reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
        reply = client.chat.completions.create(model="served-tiny", messages=asked, tools=tools)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)

        upstream.reply = "It is sunny.<|im_end|>"
        reply = client.chat.completions.create(model="served-tiny", messages=asked, tools=tools)
        assert reply.choices[0].message.content == "It is sunny." and reply.choices[0].message.tool_calls is None
        assert reply.choices[0].finish_reason == "stop"

        # streamed, no tools: the upstream's pieces arrive as content deltas
        upstream.reply = "Sunny and warm all day.<|im_end|>"
        chunks = list(client.chat.completions.create(model="served-tiny", messages=asked, stream=True))
        assert upstream.requests[-1][1]["stream"] is True
        deltas = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
        assert len(deltas) > 3 and "".join(deltas) == "Sunny and warm all day."
        assert chunks[-1].choices[0].finish_reason == "stop"

        # streamed with tools: the call arrives as a tool_calls delta once the reply is complete
        upstream.reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        chunks = list(client.chat.completions.create(model="served-tiny", messages=asked, tools=tools, stream=True))
        calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
        assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
            ("get_weather", {"city": "Rome"})
        ]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"


def stamps(prompt: str) -> list[datetime]:
    return [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in STAMP.findall(prompt)]


def test_arrival_times_survive_a_restart(checkpoint, upstream, tmp_path):
    """Messages without timestamps get their arrival time, kept in SQLite: after a restart the history keeps its
    times, the gateway's reply keeps the time it was made, and the new message shows the real gap."""
    first = [{"role": "user", "content": "Is my package out for delivery?"}]
    headers = {"X-Conversation-Id": "conv-1"}
    before = datetime.now(timezone.utc).replace(microsecond=0)
    with start(checkpoint, upstream, tmp_path) as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="unused")
        upstream.reply = "Let me check.<|im_end|>"
        reply = client.chat.completions.create(model="served-tiny", messages=first, extra_headers=headers)
    (asked_at, reply_at) = stamps(upstream.prompts()[-1])  # the user message and the reply's own stamp
    assert before <= asked_at <= datetime.now(timezone.utc) and reply_at == asked_at
    time.sleep(2.2)
    history = [*first, {"role": "assistant", "content": reply.choices[0].message.content}]
    with start(checkpoint, upstream, tmp_path, name="restarted") as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="unused")
        client.chat.completions.create(
            model="served-tiny", messages=[*history, {"role": "user", "content": "And now?"}], extra_headers=headers
        )
        t_user, t_reply, t_new, t_answer = stamps(upstream.prompts()[-1])
        assert (t_user, t_reply) == (asked_at, asked_at)  # the clock survived the restart
        assert (t_new - asked_at).total_seconds() >= 2 and t_answer == t_new
        # another conversation id with the same text: its own clock
        client.chat.completions.create(model="served-tiny", messages=first, extra_headers={"X-Conversation-Id": "c2"})
        assert stamps(upstream.prompts()[-1])[0] >= t_new
        # a client timestamp wins, with its offset converted to UTC
        timed = [{"role": "user", "content": "hi", "timestamp": "2025-08-11T16:02:57+02:00"}]
        client.chat.completions.create(model="served-tiny", messages=timed)
        assert upstream.prompts()[-1].count("[2025-08-11T14:02:57Z]") == 2  # the message and the reply's stamp


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and "Traceback" not in response.text
    return body["error"]


def test_bad_requests_get_openai_error_bodies(checkpoint, upstream, tmp_path):
    ok = {"model": "served-tiny", "messages": [{"role": "user", "content": "hi"}]}
    with start(checkpoint, upstream, tmp_path, "max_request_bytes=20000", "request_timeout=1.5") as gw:
        post = lambda body, **kw: httpx.post(f"{gw.url}/chat/completions", timeout=30, **kw, json=body)  # noqa: E731
        cases = [
            (post({"model": "served-tiny"}), 400, "`messages` must be a non-empty list"),
            (post({**ok, "model": "gpt-4"}), 404, "does not exist here"),
            (post({**ok, "messages": [{"role": "wizard", "content": "x"}]}), 400, "messages[0].role must be one of"),
            (post({**ok, "max_tokens": 10**6}), 400, "max_tokens must be an integer from 1 to 4096"),
            (post({**ok, "n": 3}), 400, "only n=1"),
            (post({**ok, "messages": [{"role": "system", "content": "Be brief."}]}), 400, "must end with a user"),
            (post({**ok, "messages": [{"role": "user", "content": "x", "timestamp": "yesterday"}]}), 400, "ISO 8601"),
            (
                post(
                    {
                        **ok,
                        "messages": [
                            {"role": "user", "content": "a", "timestamp": "2025-01-02T00:00:00Z"},
                            {"role": "user", "content": "b", "timestamp": "2025-01-01T00:00:00Z"},
                        ],
                    }
                ),
                400,
                "must not go backwards",
            ),
            (post({**ok, "messages": [{"role": "user", "content": "x" * 30000}]}), 413, "max_request_bytes"),
            (httpx.post(f"{gw.url}/chat/completions", content=b"{not json", timeout=30), 400, "not JSON"),
            (httpx.get(f"{gw.url}/nowhere", timeout=30), 404, "no route /v1/nowhere"),
            (httpx.get(f"{gw.url}/chat/completions", timeout=30), 405, "Method Not Allowed"),
        ]
        for response, status, text in cases:
            assert response.status_code == status, response.text
            assert text in error_of(response)["message"], response.text
        upstream.delay = 4  # past request_timeout: the whole exchange is bounded
        started = time.monotonic()
        response = post(ok)
        assert response.status_code == 504 and "within 1.5 s" in error_of(response)["message"]
        assert time.monotonic() - started < 3.5
        upstream.delay = 0
        assert post(ok).status_code == 200
    # an upstream that is gone: 502 naming it
    upstream.close()
    with start(checkpoint, upstream, tmp_path, "upstream_model=served-tiny", name="gone") as gw:
        response = httpx.post(f"{gw.url}/chat/completions", json=ok, timeout=30)
        assert response.status_code == 502 and "cannot reach upstream" in error_of(response)["message"]


def test_keys_pass_through_and_are_never_logged(checkpoint, upstream, tmp_path):
    env_key, client_key = "sk-env-0123456789secret", "sk-client-9876543210secret"
    messages = [{"role": "user", "content": "hi"}]
    extra = ("log_level=debug", "data.elapsed=false")  # an override of a render setting: served, and warned about
    with start(checkpoint, upstream, tmp_path, *extra, env={"OPENAI_API_KEY": env_key}) as gw:
        openai.OpenAI(base_url=gw.url, api_key=client_key).chat.completions.create(
            model="served-tiny", messages=messages
        )
        assert upstream.requests[-1][2]["Authorization"] == f"Bearer {client_key}"  # the client's, passed through
        httpx.post(f"{gw.url}/chat/completions", json={"model": "served-tiny", "messages": messages}, timeout=30)
        assert upstream.requests[-1][2]["Authorization"] == f"Bearer {env_key}"  # none given: the configured one
        log = gw.log_text()
    assert (
        "serving with prompts other than the checkpoint was trained on: data.elapsed: True (trained) -> False" in log
    )
    assert "POST /v1/chat/completions" in log  # the log is there, the keys are not
    assert env_key not in log and client_key not in log and "secret" not in log


def run_cli(*args):
    env = {"PYTHONPATH": ".", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "timealign.serve", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_command_line(checkpoint, tmp_path):
    help_text = run_cli("--help")
    assert help_text.returncode == 0 and "upstream_api" in help_text.stdout and "127.0.0.1" in help_text.stdout
    cases = [
        ((), "timealign serve needs the settings the model was trained with"),
        ((f"checkpoint={tmp_path}",), "holds no timealign_recipe.yaml"),
        ((f"checkpoint={checkpoint}", "upstream=ftp://x"), "must be an http:// or https:// URL"),
        ((f"checkpoint={checkpoint}", "port=70000"), "port=70000: give a port from 1 to 65535"),
        ((f"checkpoint={checkpoint}", "request_timeout=0"), "request_timeout=0.0 must be a positive number"),
        ((f"checkpoint={checkpoint}", "upstream=http://127.0.0.1:9/v1"), "cannot list the models of upstream="),
        (("recipe=tiny",), "upstream_api=completions renders prompts with the checkpoint's tokenizer"),
        ((f"checkpoint={checkpoint}", "upstream_api=chat", "upstream_model=m"), "data.elapsed"),
    ]
    for args, message in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])


def test_a_store_that_cannot_hold_the_clock_is_one_line(tmp_path):
    """Issue 42: store= a file that is not a database ended in sqlite3.DatabaseError's traceback, naming neither the
    file nor store=. Now one line, exit 2, before the port is bound; another program's database is left as it was
    (no table added, its journal mode kept)."""
    import sqlite3

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    before = other.read_bytes()
    cases = [
        (notes, "DatabaseError: file is not a database"),
        (other, "a SQLite database of another program, with tables users"),
    ]
    for store, why in cases:
        args = ("recipe=tiny", "upstream_api=chat", "upstream_model=m", "upstream=http://127.0.0.1:9/v1")
        proc = run_cli(*args, f"store={store}")
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        expected = (
            f"error: store={store} cannot hold the gateway's clock ({why}): give a new file (it is created) or "
            "the store of an earlier `timealign serve`; store=:memory: keeps the times in memory only"
        )
        assert [x for x in lines if x.startswith("error")] == lines[-1:] == [expected], proc.stderr[-3000:]
    assert notes.read_text() == "my notes\n" and other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "notes.txt"]


def test_api_model_gets_the_evaluators_chat_messages(tictoc_v1_dir, upstream, tmp_path):
    """upstream_api=chat: the stamped messages the evaluator's chat backend sends (here the paper protocol with its
    reminder prompt), and the tools as given."""
    from timealign.suites.tictoc.requests import ChatRequestRenderer
    from timealign.suites.tictoc.suite import heldout_sample

    overrides = {
        "data.source": "v1",
        "data.path": str(tictoc_v1_dir),
        "data.prepared_dir": str(tmp_path / "pairs"),
        "data.protocol": "paper",
        "eval.max_samples": "6",
    }
    recipe = load_recipe("tiny", overrides)
    rows, _ = heldout_sample(recipe)
    renderer = ChatRequestRenderer.for_data(recipe.data, prompt_mode="reminder")
    args = ["recipe=tiny", *(f"{k}={v}" for k, v in overrides.items()), "upstream_api=chat", "prompt_mode=reminder"]
    with gateway(
        [*args, f"upstream={upstream.url}", f"store={tmp_path / 'clock.sqlite'}"], tmp_path / "chat.log"
    ) as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="unused")
        for row in rows:
            reply = client.chat.completions.create(
                model="served-tiny", messages=client_messages(row["prompt"]), tools=decoded_tools(row["tools"])
            )
            assert reply.choices[0].message.content == "It is sunny."
    for (path, body, _), row in zip(upstream.requests, rows):
        assert path == "/v1/chat/completions"
        assert body["messages"] == json.loads(renderer.prompt(row["prompt"], row["tools"]))["messages"]
        assert body["tools"] == decoded_tools(row["tools"]) and body["tool_choice"] == "auto"
    assert "Be aware of the time elapsed" in upstream.requests[0][1]["messages"][0]["content"]
