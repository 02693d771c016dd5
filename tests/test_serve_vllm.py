"""`timealign serve` in front of the real vLLM CPU server (`make test-vllm`), the official `openai` SDK as client.

A tiny agent trained by offset-DPO (full fine-tune, two steps) is served by vLLM; `eval/run.py` scores it through
the same server (eval.backend=openai), and the same held-out samples (synthetic: the tiny agent's own format) are
sent through the gateway with their timestamps. The gateway's replies (tool_calls, or content) must make the same
decision on every sample, hence the same NAR, and each reply is the evaluator's raw output read by the gateway's
parser; a streamed reply equals the unstreamed one. (The tiny agent rarely closes a call's JSON within the token
limit, so structured tool_calls are checked in tests/test_serve.py, against a recording upstream.)

    HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 TIMEALIGN_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest \
        tests/test_serve_vllm.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from needs import require_vllm
from serve_helpers import REPO, client_messages, decoded_tools, gateway
from vllm_server import vllm_server

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 48


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """offset-DPO of tiny-agent-blind (the demo's start: it writes tool calls) on synthetic TicToc pairs, 2 small
    steps, saved with its recipe (as train/dpo.py does). (The v1 release's prompts are checked byte for byte in
    tests/test_serve.py; the tiny agent only speaks the synthetic scenarios.)"""
    require_vllm()
    from timealign.config import load_recipe
    from timealign.train import dpo

    root = tmp_path_factory.mktemp("served")
    recipe = load_recipe(
        "tiny",
        {
            "model.name_or_path": "tiny-agent-blind",
            "data.synthetic_trajectories": "60",
            "data.prepared_dir": str(root / "data"),
            "data.elapsed": "true",
            "eval.max_samples": "16",
            "eval.max_new_tokens": str(MAX_NEW_TOKENS),
            "training.max_steps": "2",
            "training.max_length": "4096",
            "training.per_device_train_batch_size": "4",
            "training.learning_rate": "1e-5",
            "output_dir": str(root / "model"),
        },
    )
    return dpo.run(recipe)


def test_gateway_nar_equals_the_evaluators_through_vllm(trained, tmp_path):
    import openai

    from timealign.eval.data_identity import trained_recipe
    from timealign.render.tool_calls import is_tool_call
    from timealign.serve.replies import message_from_text
    from timealign.suites.tictoc.metrics import tictoc_report
    from timealign.suites.tictoc.suite import heldout_sample

    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", WANDB_MODE="offline")
    with vllm_server(trained, "served-tiny", tmp_path / "vllm.log", max_model_len=4096) as base:
        proc = subprocess.run(
            [
                sys.executable,
                "eval/run.py",
                f"checkpoint={trained}",
                "eval.backend=openai",
                f"eval.base_url={base}/v1",
                "eval.served_model=served-tiny",
                f"out={tmp_path / 'eval'}",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads((tmp_path / "eval" / "tictoc.json").read_text())
        evaluated = {(s["id"], s["elapse_level"]): s for s in report["samples"]}  # an id per scenario

        rows, _ = heldout_sample(trained_recipe(trained))  # the rows eval/run.py scored
        assert sorted((r["id"], r["elapse_level"]) for r in rows) == sorted(evaluated) and len(rows) == 16
        args = [f"checkpoint={trained}", f"upstream={base}/v1", f"store={tmp_path / 'clock.sqlite'}"]
        with gateway(args, tmp_path / "gateway.log") as gw:
            client = openai.OpenAI(base_url=gw.url, api_key="unused")
            replies = [
                client.chat.completions.create(
                    model="served-tiny",
                    messages=client_messages(row["prompt"]),
                    tools=decoded_tools(row["tools"]) or openai.omit,
                    max_tokens=MAX_NEW_TOKENS,
                    temperature=0,
                ).choices[0]
                for row in rows
            ]
            # streaming through the real server: the same text as unstreamed, in pieces (no tools: passed on live)
            ask = dict(model="served-tiny", messages=client_messages(rows[0]["prompt"]), max_tokens=MAX_NEW_TOKENS)
            whole = client.chat.completions.create(**ask, temperature=0).choices[0].message.content
            chunks = list(client.chat.completions.create(**ask, temperature=0, stream=True))
            streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
            assert len(chunks) > 3 and streamed == whole
            # with tools the reply is decided when complete: its chunks make up the unstreamed reply
            chunks = list(
                client.chat.completions.create(
                    **ask, tools=decoded_tools(rows[0]["tools"]), temperature=0, stream=True
                )
            )
            calls = [
                (t.function.name, t.function.arguments) for c in chunks for t in c.choices[0].delta.tool_calls or []
            ]
            assert "".join(c.choices[0].delta.content or "" for c in chunks) == (replies[0].message.content or "")
            assert calls == [(c.function.name, c.function.arguments) for c in replies[0].message.tool_calls or []]

    # every reply is the evaluator's raw output read by the project's parser: the same calls (ids aside), content
    for row, reply in zip(rows, replies):
        output = evaluated[row["id"], row["elapse_level"]]["output"]
        expected, called = message_from_text(output, "tiny")
        assert reply.message.content == expected["content"], (row["id"], output)
        got = [(c.function.name, c.function.arguments) for c in reply.message.tool_calls or []]
        assert got == [(c["function"]["name"], c["function"]["arguments"]) for c in expected.get("tool_calls", [])]
        assert (reply.finish_reason == "tool_calls") == called

    # the same decision on every sample, so the same NAR
    attempted = [bool(r.message.tool_calls) or is_tool_call(r.message.content or "", "tiny") for r in replies]
    assert attempted == [evaluated[row["id"], row["elapse_level"]]["tool_call"] for row in rows]
    empty = [not r.message.tool_calls and not (r.message.content or "").strip() for r in replies]
    ours = tictoc_report(rows, attempted, empty)["overall"]
    assert ours["nar"] == report["overall"]["nar"] and ours["n"] == report["overall"]["n"] == 16
    assert any(attempted), "the tiny agent attempted no call: a vacuous comparison"
