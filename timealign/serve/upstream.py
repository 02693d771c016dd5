"""The gateway's requests to the upstream OpenAI-compatible server (`vllm serve`, a hosted API), bounded.

One `httpx.AsyncClient` for the server's life (connections reused). Every request runs under one deadline for the
whole exchange (`anyio.fail_after`, as `timealign.backends.http` does for the evaluator: a server trickling bytes
cannot hold a request open past it), and a reply is read streamed up to `max_bytes` (a larger one is refused).
Redirects are not followed (the key would go along). Failures are `UpstreamError`s with the status the gateway
answers: 504 for the deadline, 502 for no connection or an unusable reply, the upstream's own 4xx (its error message
passed on) for a request it refused.

The key: a client's own `Authorization` header is passed through as it came; without one, the key in the environment
variable `api_key_env` names is sent. Neither is ever logged or put in an error message; a key is not sent over plain
http to a host that is not a loopback address unless `allow_insecure_key` (as the evaluator's openai backend).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import AsyncIterator

import anyio
import httpx

from timealign.backends.http import ReplyTooLarge, read_capped, redact_url
from timealign.backends.openai import plain_http_off_host

logger = logging.getLogger("timealign.serve")


class UpstreamError(Exception):
    """The upstream did not give a usable answer; `status` is what the gateway answers its client."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class Upstream:
    def __init__(self, base_url: str, *, timeout: float, max_bytes: int):
        self.base_url = base_url.rstrip("/")
        self.shown = redact_url(self.base_url)
        self.plain_http_off_host = plain_http_off_host(urllib.parse.urlsplit(self.base_url))  # a key would leak
        self.timeout, self.max_bytes = timeout, max_bytes
        self.client = httpx.AsyncClient(follow_redirects=False, timeout=None)

    async def close(self) -> None:
        await self.client.aclose()

    def _refused(self, status: int, data: bytes, path: str) -> UpstreamError:
        try:
            detail = json.loads(data.decode("utf-8"))
            detail = (detail.get("error") or {}).get("message") if isinstance(detail, dict) else None
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            detail = None
        detail = detail or data[:300].decode("utf-8", "replace")
        if 300 <= status < 400:
            return UpstreamError(f"upstream {self.shown}{path} answered a redirect (HTTP {status}): not followed")
        # the upstream's 4xx is the client's problem (a bad model name, a prompt too long): pass it on
        return UpstreamError(f"upstream {self.shown}{path}: HTTP {status}: {detail}", status if status < 500 else 502)

    async def _read(self, response: httpx.Response, path: str) -> bytes:
        try:
            return await read_capped(response, self.max_bytes)
        except ReplyTooLarge as big:
            if big.announced is not None:
                raise UpstreamError(
                    f"upstream {self.shown}{path} announced a reply over {self.max_bytes} bytes"
                ) from None
            raise UpstreamError(f"upstream {self.shown}{path} sent more than {self.max_bytes} bytes") from None

    async def _exchange(self, method: str, path: str, body: dict | None, headers: dict) -> dict:
        async with self.client.stream(method, self.base_url + path, json=body, headers=headers) as response:
            data = await self._read(response, path)
            if response.status_code >= 300:
                raise self._refused(response.status_code, data, path)
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UpstreamError(f"upstream {self.shown}{path} did not return JSON (starts {data[:80]!r})") from None

    async def request(self, method: str, path: str, body: dict | None, headers: dict) -> dict:
        """One JSON request, within the deadline and the size cap."""
        try:
            with anyio.fail_after(self.timeout):
                return await self._exchange(method, path, body, headers)
        except TimeoutError:
            raise UpstreamError(f"upstream {self.shown}{path} gave no answer within {self.timeout:g} s", 504) from None
        except httpx.HTTPError as err:
            raise UpstreamError(f"cannot reach upstream {self.shown}{path}: {type(err).__name__}") from None

    async def stream(self, path: str, body: dict, headers: dict) -> AsyncIterator[dict]:
        """The `data:` events of a streamed reply, parsed; the deadline and the size cap bound the whole stream.

        Each wait runs under the time left (no cancel scope spans a `yield`: the consumer's time is not ours)."""
        deadline = anyio.current_time() + self.timeout

        def left() -> float:
            return max(0.0, deadline - anyio.current_time())

        try:
            with anyio.fail_after(left()):
                request = self.client.build_request("POST", self.base_url + path, json=body, headers=headers)
                response = await self.client.send(request, stream=True)
            try:
                if response.status_code >= 300:
                    with anyio.fail_after(left()):
                        data = await self._read(response, path)
                    raise self._refused(response.status_code, data, path)
                lines, size = response.aiter_lines(), 0
                while True:
                    with anyio.fail_after(left()):
                        line = await anext(lines, None)
                    if line is None:
                        return
                    size += len(line) + 1
                    if size > self.max_bytes:
                        raise UpstreamError(f"upstream {self.shown}{path} sent more than {self.max_bytes} bytes")
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError:
                        raise UpstreamError(f"upstream {self.shown}{path} sent an event that is not JSON") from None
                    yield event
            finally:
                await response.aclose()
        except TimeoutError:
            raise UpstreamError(f"upstream {self.shown}{path} did not finish within {self.timeout:g} s", 504) from None
        except httpx.HTTPError as err:
            raise UpstreamError(f"cannot reach upstream {self.shown}{path}: {type(err).__name__}") from None
