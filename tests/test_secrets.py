"""API keys: sent only over https or to a loopback address (unless eval.allow_insecure_key), never kept in a URL.

A real HTTP server (http.server on 127.0.0.1, in a thread) stands in for the OpenAI-compatible endpoint and records
every request's Authorization header; the backend, the eval command and the TimelyChat partner are the real ones.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from timealign.backends.base import BackendError
from timealign.backends.openai import OpenAIBackend, RequestError, is_loopback, redact_url

SECRET = "sk-SECRET-4f9a2c"
UNREACHABLE = "http://10.255.255.1:9/v1"  # a black-holed address: a connection attempt would hang, not fail fast


class RecordingServer:
    """Answers /v1/completions and /v1/chat/completions with a fixed reply; records (path, Authorization)."""

    def __init__(self, host: str = "127.0.0.1", redirect_to: str | None = None):
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.endswith("/chat/completions"):
                    payload = {"choices": [{"message": {"role": "assistant", "content": "fine"}}]}
                else:
                    payload = {"choices": [{"text": " I will check.", "index": 0}]}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = RecordingServer()
    yield s
    s.close()


def _non_loopback_ipv4() -> str | None:
    """This machine's own address on a non-loopback interface (the route a packet to 10.255.255.1 would take)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.1", 9))  # UDP connect: picks the interface, sends nothing
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback(address) or address == "0.0.0.0" else address


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("128.0.0.1", False),
        ("::2", False),
        ("localhost.example.com", False),
        ("127.0.0.1.nip.io", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    "url,shown",
    [
        ("http://user:sk-123@host:8000/v1", "http://***@host:8000/v1"),
        ("http://sk-123@host/v1", "http://***@host/v1"),
        ("https://host/v1?api_key=sk-123&x=1", "https://host/v1?api_key=***&x=***"),
        ("https://host/v1#sk-123", "https://host/v1#***"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_key_goes_to_a_loopback_server_over_http(server, monkeypatch):
    monkeypatch.setenv("TA_SECRET_KEY", SECRET)
    for url in (server.url, f"http://localhost:{server.port}/v1"):
        backend = OpenAIBackend(url, model="m", api_key_env="TA_SECRET_KEY", max_retries=0)
        assert backend.complete("hi", max_new_tokens=3) == " I will check."
        assert backend.chat([{"role": "user", "content": "hi"}]) == "fine"
    assert server.seen == [("/v1/completions", f"Bearer {SECRET}"), ("/v1/chat/completions", f"Bearer {SECRET}")] * 2


def test_key_refused_to_a_non_loopback_http_url_before_connecting(monkeypatch):
    from timealign.backends.factory import make_backend
    from timealign.config import load_recipe

    monkeypatch.setenv("TA_SECRET_KEY", SECRET)
    start = time.monotonic()
    with pytest.raises(BackendError) as err:
        OpenAIBackend(UNREACHABLE, model="m", api_key_env="TA_SECRET_KEY", timeout=60, max_retries=5)
    message = str(err.value)
    assert "refusing to send the API key from $TA_SECRET_KEY over plain http to http://10.255.255.1:9/v1" in message
    assert "eval.allow_insecure_key=true" in message and "https://" in message and SECRET not in message
    assert time.monotonic() - start < 5  # refused, not a 60 s connection timeout times 6 attempts

    for backend in ("openai", "chat"):  # the recipe path: eval.backend=openai and eval.backend=chat
        recipe = load_recipe(
            "tiny", {"eval.backend": backend, "eval.base_url": UNREACHABLE, "eval.api_key_env": "TA_SECRET_KEY"}
        )
        with pytest.raises(BackendError, match="refusing to send the API key"):
            make_backend(recipe.eval, "tiny")
        allowed = make_backend(
            load_recipe(
                "tiny",
                {
                    "eval.backend": backend,
                    "eval.base_url": UNREACHABLE,
                    "eval.api_key_env": "TA_SECRET_KEY",
                    "eval.allow_insecure_key": "true",
                },
            ).eval,
            "tiny",
        )
        assert allowed._headers()["Authorization"] == f"Bearer {SECRET}"  # the explicit key lets it through

    # https, or no key at all, is fine for any host
    assert OpenAIBackend("https://10.255.255.1:9/v1", model="m", api_key_env="TA_SECRET_KEY")
    no_key = OpenAIBackend(UNREACHABLE, model="m", api_key_env="TA_UNSET_KEY_VARIABLE")
    assert "Authorization" not in no_key._headers()
    assert "Authorization" not in OpenAIBackend(UNREACHABLE, model="m", api_key_env="")._headers()


def test_timelychat_partner_and_judge_follow_the_same_rule(monkeypatch):
    from timealign.suites.timelychat.dialog import partner_from_options
    from timealign.suites.timelychat.options import TimelyChatOptions

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # the partner's default key variable
    with pytest.raises(BackendError, match="refusing to send the API key from \\$OPENAI_API_KEY"):
        partner_from_options(TimelyChatOptions(partner_url=UNREACHABLE, partner_model="gpt-4o"))
    assert partner_from_options(TimelyChatOptions(partner_url="https://api.openai.com/v1", partner_model="gpt-4o"))


def test_a_real_non_loopback_server_gets_no_key_unless_allowed(monkeypatch):
    """The same refusal against a server that exists on this machine's network address: nothing reaches it."""
    address = _non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    listening = RecordingServer(host="0.0.0.0")
    try:
        url = f"http://{address}:{listening.port}/v1"
        monkeypatch.setenv("TA_SECRET_KEY", SECRET)
        with pytest.raises(BackendError, match="refusing"):
            OpenAIBackend(url, model="m", api_key_env="TA_SECRET_KEY")
        assert listening.seen == []
        allowed = OpenAIBackend(url, model="m", api_key_env="TA_SECRET_KEY", allow_insecure_key=True, max_retries=0)
        assert allowed.complete("hi", max_new_tokens=2) == " I will check."
        assert listening.seen == [("/v1/completions", f"Bearer {SECRET}")]
    finally:
        listening.close()


def test_a_key_in_the_url_is_refused_without_showing_it(server):
    for url in (
        f"http://user:{SECRET}@127.0.0.1:{server.port}/v1",
        f"http://{SECRET}@127.0.0.1:{server.port}/v1",
        f"{server.url}?api_key={SECRET}",
        f"https://user:{SECRET}@api.example.com/v1",
    ):
        with pytest.raises(BackendError) as err:
            OpenAIBackend(url, model="m", api_key_env="")
        assert SECRET not in str(err.value) and "eval.api_key_env" in str(err.value)
    assert server.seen == []  # refused before any request


def test_a_redirect_is_not_followed(monkeypatch):
    """An https server that redirects would otherwise hand the key on; the redirect is reported instead."""
    target = RecordingServer()
    source = RecordingServer(redirect_to=f"{target.url}/completions")
    try:
        monkeypatch.setenv("TA_SECRET_KEY", SECRET)
        backend = OpenAIBackend(source.url, model="m", api_key_env="TA_SECRET_KEY", max_retries=0)
        with pytest.raises(RequestError, match="HTTP 302, a redirect to .* not followed"):
            backend.complete("hi")
        assert len(source.seen) == 1 and target.seen == []
    finally:
        source.close()
        target.close()


def _files_under(folder: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()}


def test_the_eval_command_keeps_the_key_out_of_reports_logs_and_cache(
    server, tiny_model_dir, tmp_path, monkeypatch, caplog, capsys
):
    """The real eval path (eval/run.py, tictoc suite, eval.backend=openai, the resume cache): the key reaches the
    server as a bearer header, and appears in no file of the output folder, no log record and no printed line."""
    from tests.test_backends import tictoc_rows
    from timealign.eval.runner import main

    prepared = tmp_path / "prepared"
    tictoc_rows(prepared)
    monkeypatch.setenv("TA_SECRET_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    common = [
        "recipe=tiny",
        f"checkpoint={tiny_model_dir}",
        "eval.backend=openai",
        "eval.served_model=tiny-served",
        "eval.api_key_env=TA_SECRET_KEY",
        f"data.prepared_dir={prepared}",
        "data.synthetic_trajectories=4",
        "eval.max_samples=3",
        "eval.max_new_tokens=4",
        f"output_dir={tmp_path / 'run'}",
    ]
    out = tmp_path / "eval"
    assert main([*common, f"eval.base_url={server.url}", f"out={out}"]) == 0
    assert len(server.seen) == 3 and {auth for _, auth in server.seen} == {f"Bearer {SECRET}"}
    files = _files_under(out)
    report = json.loads((out / "tictoc.json").read_text())
    assert report["backend"]["model"] == f"openai:{server.url}|tiny-served" and report["overall"]["n"] == 3
    cache = files[str(out / "generations" / "tictoc.jsonl")].splitlines()
    assert len(cache) == 3 and json.loads(cache[0])["settings"]["backend"] == report["backend"]["model"]

    # the same key written into the URL: refused with exit 1 before any request, nowhere to be seen
    bad = tmp_path / "eval-bad"
    assert main([*common, f"eval.base_url=http://user:{SECRET}@127.0.0.1:{server.port}/v1", f"out={bad}"]) == 1
    assert main([*common, f"eval.base_url={server.url}?api_key={SECRET}", f"out={bad}"]) == 1
    assert len(server.seen) == 3
    files.update(_files_under(bad) if bad.exists() else {})
    files.update(_files_under(tmp_path / "run") if (tmp_path / "run").exists() else {})
    printed = capsys.readouterr()
    assert "carries user info" in printed.err + printed.out
    leaks = [name for name, text in files.items() if SECRET in text]
    assert leaks == []
    assert SECRET not in caplog.text and SECRET not in printed.out + printed.err


# -- recipe secrets (training.hub_token & co.): in memory only, <redacted> in everything written ---------------------

HUB_SECRET = "hf_SECRETtoken9d8e7f"


@pytest.mark.parametrize(
    "key,secret",
    [
        ("hub_token", True),
        ("training.hub_token", True),
        ("+training.hub_token", True),
        ("token", True),
        ("wandb.api_key", True),
        ("openai_apikey", True),
        ("db_password", True),
        ("client_secret", True),
        ("eval.api_key_env", False),
        ("training.pad_token", False),
        ("training.eos_token", False),
        ("timer.special_tokens", False),
        ("eval.max_new_tokens", False),
        ("include_num_input_tokens_seen", False),
    ],
)
def test_one_rule_says_which_fields_hold_secrets(key, secret):
    from timealign.config.secrets import is_secret_key

    assert is_secret_key(key) is secret


def test_the_recipe_holds_the_token_in_memory_and_shows_it_nowhere(monkeypatch):
    from trl import DPOConfig

    from timealign.config import load_recipe
    from timealign.config.secrets import REDACTED, redact
    from timealign.train.tracking import training_args

    monkeypatch.setenv("HF_TOKEN", "before")  # restored (unset) after the test
    monkeypatch.delenv("HF_TOKEN")
    recipe = load_recipe("tiny", {"training.hub_token": HUB_SECRET, "training.pad_token": "<pad>"})
    assert recipe.training["hub_token"] == REDACTED and recipe.training["pad_token"] == "<pad>"
    assert recipe.overrides == {"training.hub_token": REDACTED, "training.pad_token": "<pad>"}
    assert HUB_SECRET not in json.dumps(recipe.to_dict()) and recipe.secrets == {"training.hub_token": HUB_SECRET}
    assert redact({"a": {"hub_token": "x", "n": [{"api_key": "k"}]}}) == {
        "a": {"hub_token": REDACTED, "n": [{"api_key": REDACTED}]}
    }
    args = training_args(recipe, DPOConfig)
    assert args.hub_token is None and os.environ["HF_TOKEN"] == HUB_SECRET  # the hub reads it at push time


def _bytes_under(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_token_in_the_recipe_is_in_no_file_training_export_or_evaluation_writes(tmp_path):
    """training.hub_token on the command line: train (W&B offline, a checkpoint), export, evaluate (W&B offline):
    the token is in no file of output_dir, the export, the eval folder or the W&B folder, nor in any output."""
    import subprocess
    import sys

    import torch
    from helpers import REPO_ROOT, launcher_env

    env = launcher_env(WANDB_DIR=str(tmp_path), WANDB_PROJECT="secrets", TIMEALIGN_CACHE=str(tmp_path / "cache"))
    env.pop("HF_TOKEN", None)
    out, export, evals = tmp_path / "run", tmp_path / "export", tmp_path / "eval"
    data = ["data.synthetic_trajectories=8", f"training.hub_token={HUB_SECRET}"]
    commands = [
        [
            "train/dpo.py",
            "recipe=tiny",
            f"output_dir={out}",
            "training.max_steps=2",
            "training.save_strategy=steps",
            "training.save_steps=1",
            "training.report_to=[wandb]",
            "training.per_device_train_batch_size=2",
            *data,
        ],
        ["train/export.py", f"checkpoint={out}", f"out={export}"],
        [
            "eval/run.py",
            "recipe=tiny",
            f"checkpoint={out}",
            f"output_dir={out}",
            "suites=tictoc",
            "wandb=true",
            "eval.max_samples=2",
            "eval.max_new_tokens=4",
            f"out={evals}",
            *data,
        ],
    ]
    printed = ""
    for command in commands:
        proc = subprocess.run(
            [sys.executable, str(REPO_ROOT / command[0]), *command[1:]],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        printed += proc.stdout + proc.stderr
    files = _bytes_under(out, export, evals, tmp_path / "wandb")
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 2  # the training run and the eval run
    for name in (
        "timealign_recipe.yaml",
        "timealign_run.json",
        "training_args.bin",
        "README.md",
        "checkpoint-1/training_args.bin",
        "checkpoint-1/timealign_recipe.yaml",
    ):
        assert str(out / name) in files, name
    assert str(export / "timealign_recipe.yaml") in files and str(export / "README.md") in files
    assert [name for name, data in files.items() if HUB_SECRET.encode() in data] == []
    assert HUB_SECRET not in printed
    saved = yaml.safe_load((out / "timealign_recipe.yaml").read_text())
    assert saved["training"]["hub_token"] == "<redacted>"
    assert torch.load(out / "training_args.bin", weights_only=False).hub_token is None


def test_a_secret_on_the_command_line_is_blanked_in_argv(monkeypatch):
    import sys

    from timealign.config import load_recipe
    from timealign.config.secrets import REDACTED

    argv = ["train/dpo.py", "recipe=tiny", f"training.hub_token={HUB_SECRET}", "eval.api_key_env=MY_KEY"]
    monkeypatch.setattr(sys, "argv", list(argv))
    load_recipe("tiny", {"training.hub_token": HUB_SECRET, "eval.api_key_env": "MY_KEY"})
    assert sys.argv == [*argv[:2], f"training.hub_token={REDACTED}", "eval.api_key_env=MY_KEY"]
