"""The evaluator against a hostile OpenAI-compatible server (issue 22): every reply is bounded and every failure told.

A real HTTP server on 127.0.0.1 (the standard library's, in a thread) answers each request as the test scripts it:
30 MB bodies (announced and not), a completion far past max_new_tokens, a body or headers trickled a byte at a time,
malformed JSON, HTTP 500, no answer in time. Every loop of the server is bounded, so it stops by itself whatever the
client does. Checked: each request ends within its deadline (not per socket read), nothing huge is read whole or
stored, overlong completions count as failed samples with the reason, an evaluation with too many failed samples
exits 1 with the counts in the suite JSON, report.md and the log, and two evaluations into one out= do not both run.
No vLLM: the tiny model's tokenizer renders the prompts.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from helpers import LocalServer, tictoc_rows

from timealign.backends.base import GenerationError
from timealign.backends.chat import ChatBackend
from timealign.backends.limits import OverlongOutput, token_bound
from timealign.backends.openai import OpenAIBackend, RequestError
from timealign.render.chat_api import request_string

MB = 1 << 20
HUGE = 30 * MB
OK_REPLY = json.dumps({"choices": [{"text": " I will check.", "index": 0}]}).encode()


class HostileServer(LocalServer):
    """`script(n)` names how the n-th request (from 0) is answered; `sent[n]` counts the body bytes it got out."""

    def __init__(self, script):
        self.script, self.count, self.sent, self.modes = script, 0, {}, []
        self.release = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    number = outer.count
                    outer.count += 1
                mode = outer.script(number)
                outer.modes.append(mode)
                outer.sent[number] = 0
                try:
                    getattr(self, mode)(number)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: what a bounded client does

            def _head(self, code, length=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()

            def _body(self, number, data: bytes):
                self.wfile.write(data)
                outer.sent[number] += len(data)

            def ok(self, number):
                self._head(200, len(OK_REPLY))
                self._body(number, OK_REPLY)

            def _huge(self, number, announced: bool):
                # valid JSON whose text is 30 MB: a client that reads it whole gets a 30 MB "completion"
                start, end = b'{"choices": [{"index": 0, "text": "', b'"}]}'
                self._head(200, len(start) + HUGE + len(end) if announced else None)
                self._body(number, start)
                for _ in range(HUGE // MB):  # bounded: 30 chunks
                    self._body(number, b"a" * MB)
                self._body(number, end)

            def huge_announced(self, number):
                self._huge(number, announced=True)

            def huge_unannounced(self, number):  # no Content-Length: the body ends when the connection closes
                self._huge(number, announced=False)

            def long_text(self, number):  # under the byte cap, far past max_new_tokens
                data = json.dumps({"choices": [{"text": "tick " * 40_000, "index": 0}]}).encode()
                self._head(200, len(data))
                self._body(number, data)

            def long_chat(self, number):
                data = json.dumps(
                    {
                        "choices": [
                            {"message": {"role": "assistant", "content": "tock " * 40_000}, "finish_reason": "stop"}
                        ]
                    }
                ).encode()
                self._head(200, len(data))
                self._body(number, data)

            def trickle(self, number):  # headers at once, then one byte every 50 ms: 10 s for the whole body
                data = OK_REPLY.ljust(200)
                self._head(200, len(data))
                for i in range(len(data)):
                    self._body(number, data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.05)

            def trickle_headers(self, number):  # the status line, then the headers one byte every 50 ms
                self.wfile.write(b"HTTP/1.0 200 OK\r\n")
                for byte in b"X-Padding: " + b"x" * 200:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.05)
                self.wfile.write(b"\r\n\r\n" + OK_REPLY)

            def malformed(self, number):
                data = b'{"choices": [{"text": "half'
                self._head(200, len(data))
                self._body(number, data)

            def error500(self, number):
                data = b'{"error": "internal server error"}'
                self._head(500, len(data))
                self._body(number, data)

            def silent(self, number):  # answers after 5 s (bounded), long past the client's deadline
                time.sleep(5)
                self.ok(number)

            def held(self, number):  # answers once the test releases it (60 s at most)
                outer.release.wait(60)
                self.ok(number)

        super().__init__(Handler)

    def close(self):
        self.release.set()
        super().close()


@pytest.fixture
def hostile():
    servers = []

    def start(script):
        servers.append(HostileServer(script if callable(script) else (lambda n: script)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _backend(server, tokenizer=None, **kwargs) -> OpenAIBackend:
    return OpenAIBackend(
        server.url,
        model="m",
        tokenizer=tokenizer,
        api_key_env="",
        backoff=0.01,
        **{"max_retries": 0, "timeout": 1.0, **kwargs},
    )


def _timed(call):
    start = time.monotonic()
    try:
        call()
    except Exception as err:  # noqa: BLE001 - returned for the test to check
        return err, time.monotonic() - start
    return None, time.monotonic() - start


# ------------------------------------------------------------------------------------------ one request
@pytest.mark.parametrize("mode", ["huge_announced", "huge_unannounced"])
def test_a_30_mb_body_is_not_read_whole(hostile, mode):
    server = hostile(mode)
    err, _ = _timed(lambda: _backend(server, timeout=30).complete("hi", max_new_tokens=4))
    assert (
        isinstance(err, RequestError)
        and "more than the 8388608 bytes a reply may have" in str(err)
        and err.status == 200
    )
    if mode == "huge_unannounced":  # streamed: the client stopped reading soon after the cap and hung up
        time.sleep(0.5)
        assert server.sent[0] < HUGE
    else:  # refused on the announced length, before reading the body
        assert f"announced a {HUGE + 39}-byte reply" in str(err)
    assert server.count == 1  # not retried: the same server would send it again


def test_a_completion_past_max_new_tokens_is_a_failed_sample(hostile, tiny_tokenizer):
    server = hostile("long_text")
    err, _ = _timed(lambda: _backend(server, tiny_tokenizer).complete("hi", max_new_tokens=4))
    assert isinstance(err, OverlongOutput) and "max_new_tokens=4" in str(err) and "bound 2 x" in str(err)
    assert token_bound(4) == 24 and server.count == 1
    # the chat backend (API models) too, without a tokenizer: counted at 16 bytes a token at most
    chat_server = hostile("long_chat")
    chat = ChatBackend(chat_server.url, model="m", api_key_env="", max_retries=0, timeout=5)
    with pytest.raises(GenerationError) as failed:
        chat.generate([request_string([{"role": "user", "content": "hi"}], [])], max_new_tokens=4, desc=None)
    assert failed.value.outputs == [None] and "OverlongOutput" in failed.value.errors[0]


@pytest.mark.parametrize("mode", ["trickle", "trickle_headers", "silent"])
def test_the_timeout_bounds_the_whole_request_not_each_read(hostile, mode):
    server = hostile(mode)
    err, took = _timed(lambda: _backend(server, timeout=1.0).complete("hi", max_new_tokens=4))
    assert isinstance(err, RequestError) and "no complete answer within 1 s" in str(err), err
    assert took < 2.5, f"{mode}: {took:.1f} s against a 1 s limit"  # the server would take 10 s (trickle) or 5 s


def test_malformed_json_and_http_500_fail_their_sample(hostile):
    server = hostile("malformed")
    err, _ = _timed(lambda: _backend(server, max_retries=2).complete("hi", max_new_tokens=4))
    assert isinstance(err, RequestError) and "did not return JSON" in str(err) and server.count == 1
    server = hostile("error500")
    err, _ = _timed(lambda: _backend(server, max_retries=2).complete("hi", max_new_tokens=4))
    assert isinstance(err, RequestError) and "HTTP 500" in str(err) and server.count == 3  # retried twice


# ------------------------------------------------------------------------------------------ the evaluation
def _eval_args(tiny_model_dir, tmp_path, server, out, *extra) -> list[str]:
    prepared = tmp_path / "prepared"
    if not prepared.exists():
        tictoc_rows(prepared)
    return [
        "recipe=tiny",
        f"checkpoint={tiny_model_dir}",
        "eval.backend=openai",
        f"eval.base_url={server.url}",
        "eval.api_key_env=",
        f"data.prepared_dir={prepared}",
        "data.synthetic_trajectories=4",
        "eval.max_samples=6",
        "eval.max_new_tokens=4",
        "eval.request_timeout=1",
        "eval.max_retries=0",
        "eval.batch_size=3",
        f"out={out}",
        f"output_dir={tmp_path / 'run'}",
        *extra,
    ]


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_an_evaluation_whose_requests_fail_exits_1_with_the_counts(hostile, tiny_model_dir, tmp_path, caplog, capsys):
    from timealign.eval.runner import main

    modes = ["huge_unannounced", "long_text", "trickle", "malformed", "error500", "silent"]
    server = hostile(lambda n: modes[n] if n < len(modes) else "ok")
    out = tmp_path / "eval"
    caplog.set_level(logging.WARNING, logger="timealign.eval")
    start = time.monotonic()
    code = main(_eval_args(tiny_model_dir, tmp_path, server, out))
    took = time.monotonic() - start
    assert code == 1
    err = capsys.readouterr().err
    assert "tictoc: 6 of 6 generations failed, more than eval.max_failed_share=0.05" in err
    assert "tictoc: 6 of 6 generations failed" in caplog.text
    assert took < 30  # two rounds of three 1 s deadlines, plus loading the tokenizer; not 10 s per trickled read
    assert server.count == 6  # each failure once: nothing was retried (eval.max_retries=0)
    report = json.loads((out / "runs" / "001" / "tictoc.json").read_text())
    assert {k: report["failures"][k] for k in ("samples", "failed", "share")} == {
        "samples": 6,
        "failed": 6,
        "share": 1.0,
    }
    assert report["overall"]["n"] == 0 and len(report["errors"]) == 6
    reasons = " ".join(e["error"] for e in report["errors"])
    for reason in (
        "more than the 8388608 bytes",
        "OverlongOutput",
        "no complete answer within 1 s",
        "did not return JSON",
        "HTTP 500",
    ):
        assert reason in reasons
    assert "failed generations: 6 of 6" in (out / "runs" / "001" / "report.md").read_text()
    run_info = json.loads((out / "runs" / "001" / "run.json").read_text())
    assert run_info["complete"] is False and "6 of 6 generations failed" in run_info["failed"]
    assert not (out / "latest").exists() and not (out / "tictoc.json").exists()  # not published
    assert _size(out) < 200_000  # nothing huge stored: 30 MB and 200 kB bodies never reached the cache or report

    # the server fixed: the rerun generates the failed samples (none was cached) and publishes
    server.script = lambda n: "ok"
    assert main(_eval_args(tiny_model_dir, tmp_path, server, out)) == 0
    published = json.loads((out / "tictoc.json").read_text())
    assert published["failures"]["failed"] == 0 and published["generation"]["generated"] == 6


def test_a_few_failed_samples_under_the_share_are_reported_not_fatal(hostile, tiny_model_dir, tmp_path):
    from timealign.eval.runner import main

    server = hostile(lambda n: "error500" if n == 2 else "ok")
    out = tmp_path / "eval"
    assert main(_eval_args(tiny_model_dir, tmp_path, server, out, "eval.max_failed_share=0.2")) == 0
    report = json.loads((out / "tictoc.json").read_text())
    assert report["failures"]["failed"] == 1 and report["failures"]["samples"] == 6
    assert report["overall"]["n"] == 5 and "failed generations: 1 of 6" in (out / "report.md").read_text()
    # the default share (0.05): the same one failure in six fails the evaluation
    server.script = lambda n: "error500"  # the failed sample is the only one asked again
    assert main(_eval_args(tiny_model_dir, tmp_path, server, out)) == 1


def test_two_evaluations_into_one_folder_do_not_both_run(hostile, tiny_model_dir, tmp_path, capsys):
    """The first, a separate process, holds the folder while its requests wait; the second stops at once."""
    from timealign.eval.runner import main

    server = hostile("held")
    out = tmp_path / "eval"
    args = _eval_args(tiny_model_dir, tmp_path, server, out, "eval.request_timeout=60")
    first = subprocess.Popen(
        [sys.executable, "eval/run.py", *args],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while server.count == 0 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.count > 0, first.communicate()[0] if first.poll() is not None else "no request in 120 s"
        assert main(_eval_args(tiny_model_dir, tmp_path, server, out)) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the data-prep progress bars
        assert err == (
            f"error: another evaluation is writing into {out} (it holds the lock {out / '.eval.lock'}); "
            "wait for it to finish or pass another out="
        )
        server.release.set()
        output, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, output
    assert server.count == 6  # every sample generated once, by the first evaluation only
    assert main(_eval_args(tiny_model_dir, tmp_path, server, out)) == 0  # free again: all from the cache
    assert server.count == 6
