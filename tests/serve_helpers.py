"""The gateway as a real process (`python -m timealign.serve`), and a small recording upstream for tests without vLLM.

The recording upstream is a plain local HTTP server of the test (not the thing under test): it lists one model,
records every request's body and headers, and answers completions with a set text, whole or streamed as SSE; it can
be told to stall (for the gateway's deadline).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from helpers import JSONHandler, LocalServer, free_port, wait_until_serving

REPO = Path(__file__).resolve().parents[1]


class RecordingUpstream(LocalServer):
    """An OpenAI-compatible stand-in upstream on a free loopback port; `requests` holds (path, body, headers)."""

    def __init__(self, model: str = "served-tiny"):
        self.model, self.requests, self.reply, self.delay = model, [], "It is sunny.", 0.0
        owner = self

        class Handler(JSONHandler):
            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": owner.model, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append((self.path, body, dict(self.headers)))
                if owner.delay:
                    time.sleep(owner.delay)
                text = owner.reply
                if self.path.endswith("/chat/completions"):  # an API model: a message back
                    message = {"role": "assistant", "content": text}
                    self._send(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
                    return
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    pieces = re.findall(r"<\|[^|]*\|>|[^<]{1,4}|<", text)  # a special token is one piece, as a token
                    for n, piece in enumerate(pieces):
                        event = {"choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                        if n == len(pieces) - 1:
                            event["choices"][0]["finish_reason"] = "stop"
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                self._send(200, {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": None})

        super().__init__(Handler)

    def prompts(self) -> list[str]:
        return [body["prompt"] for path, body, _ in self.requests if path.endswith("/completions")]


def write_checkpoint(folder: Path, model_dir: Path, recipe) -> Path:
    """A served model folder: the tiny model's files and the recipe it was "trained" with, as training saves it."""
    import shutil

    from timealign.render.checkpoint import CHECKPOINT_RECIPE

    shutil.copytree(model_dir, folder, dirs_exist_ok=True)
    (folder / CHECKPOINT_RECIPE).write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    return folder


class Gateway:
    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process, self.url, self.log = process, url, log

    def log_text(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def gateway(args: list[str], log: Path, *, python: str = sys.executable, env: dict | None = None, startup_s=120):
    """`python -m timealign.serve ARGS port=FREE` as a process; yields a Gateway with its base URL (.../v1)."""
    port = free_port()
    full_env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", **(env or {}))
    with open(log, "w") as out:
        process = subprocess.Popen(
            [python, "-m", "timealign.serve", *args, f"port={port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=REPO,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_serving(process, f"{url}/models", log, startup_s, "the gateway")
        yield Gateway(process, url, log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def client_messages(messages: list[dict]) -> list[dict]:
    """Evaluation messages (a `time` key, Arrow's null padding) as a client sends them: `timestamp`, no nulls."""
    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if v is not None and k != "time"}
        if message.get("time") is not None:
            m["timestamp"] = message["time"]
        out.append(m)
    return out


def decoded_tools(tools):
    if tools is None:
        return None
    return list(json.loads(tools) if isinstance(tools, str) else tools) or None
