"""One bounded POST for the API backends (`openai`, `chat`): a total deadline and a size cap on every response.

A timeout per socket read does not bound a request: a server that trickles one byte a second keeps every read
under any read timeout for as long as it likes (issue 22 measured 24 s against a 2 s limit). Here the whole request
(connect, send, status line, headers, body) runs under one deadline: `anyio.fail_after` around httpx's async client,
which cancels the request wherever it waits. The body is read streamed and the read stops once it passes
`max_bytes` (a declared Content-Length above it is refused before reading), so a 30 MB answer never reaches memory,
let alone the generation cache. Error bodies are read up to `ERROR_BYTES` for the message.

Redirects are not followed (an API does not redirect a POST, and the key would go along to the new address).
Each call runs its own event loop (`anyio.run`), so the backends' worker threads call it as a plain function.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import anyio
import httpx

from timealign.backends.base import BackendError

MAX_RESPONSE_BYTES = 8 << 20  # a completion reply with prompt token ids of a 128k-token prompt is under 1 MiB
ERROR_BYTES = 4096


class RequestError(BackendError):
    """One request failed. `status`: the HTTP status (200 for a reply that is unusable); None when no answer came
    (connection error, deadline), which is worth a retry."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def redact_url(url: str) -> str:
    """`url` for logs, messages and saved files: user info (user:key@) and every query value become ***."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rpartition("@")[2]
        query = "&".join(
            f"{name}=***" if sep else name
            for name, sep, _ in (item.partition("=") for item in parts.query.split("&") if item)
        )
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, "***" if parts.fragment else ""))
    except ValueError:  # not parseable as a URL: hide everything that could hold a secret
        return re.sub(r"[?#].*$", "?***", re.sub(r"//[^/]*@", "//***@", url))


class ReplyTooLarge(Exception):
    """A success reply over the cap: `announced` its declared Content-Length (refused before reading), else None and
    `size` the bytes read when the read stopped."""

    def __init__(self, size: int, announced: int | None = None):
        super().__init__(f"reply over the cap ({announced or size} bytes)")
        self.size, self.announced = size, announced


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed `response`: a success reply whole up to `max_bytes` (ReplyTooLarge past it, or when
    its Content-Length announces more), an error reply's first ERROR_BYTES or so (enough for the message)."""
    ok = response.status_code < 300
    declared = response.headers.get("content-length", "")
    if ok and declared.isdigit() and int(declared) > max_bytes:
        raise ReplyTooLarge(0, int(declared))
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if ok and size > max_bytes:
            raise ReplyTooLarge(size)
        if not ok and size >= ERROR_BYTES:
            break  # enough for the message
    return b"".join(chunks)


async def _post(
    url: str, payload: bytes, headers: dict[str, str], max_bytes: int, where: str
) -> tuple[int, bytes, str]:
    async with httpx.AsyncClient(follow_redirects=False, timeout=None) as client:
        async with client.stream("POST", url, content=payload, headers=headers) as response:
            try:
                data = await read_capped(response, max_bytes)
            except ReplyTooLarge as big:
                if big.announced is not None:
                    raise RequestError(
                        f"{where} announced a {big.announced}-byte reply, more than the {max_bytes} "
                        "bytes a reply may have; not read",
                        status=200,
                    ) from None
                raise RequestError(
                    f"{where} sent more than the {max_bytes} bytes a reply may have (stopped "
                    f"reading at {big.size}); not stored",
                    status=200,
                ) from None
            return response.status_code, data, response.headers.get("location", "")


async def _post_within(deadline: float, *args) -> tuple[int, bytes, str]:
    with anyio.fail_after(deadline):
        return await _post(*args)


def post_json(
    url: str,
    body: dict,
    headers: dict[str, str],
    *,
    timeout: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
    shown: str | None = None,
) -> dict:
    """POST `body` as JSON to `url` and return the JSON reply, all within `timeout` seconds and `max_bytes` bytes.

    Every failure is a `RequestError` naming `shown` (the URL as it may be logged): no answer in time or no
    connection (status None), an HTTP error or a redirect (its status), a reply too large or not JSON (status 200).
    """
    where = shown or url
    payload = json.dumps(body).encode("utf-8")
    try:
        status, data, location = anyio.run(_post_within, timeout, url, payload, headers, max_bytes, where)
    except TimeoutError:
        raise RequestError(
            f"{where} gave no complete answer within {timeout:g} s (eval.request_timeout, the limit "
            "for the whole request)"
        ) from None
    except httpx.HTTPError as err:
        raise RequestError(f"cannot reach {where}: {type(err).__name__}: {err}") from None
    if 300 <= status < 400:
        raise RequestError(
            f"{where} answered HTTP {status}, a redirect to {redact_url(location)}: not followed "
            "(the API key would go along); set the base URL to the final address",
            status=status,
        )
    if status >= 400:
        detail = data[:1000].decode("utf-8", "replace")
        raise RequestError(f"HTTP {status} from {where}: {detail}", status=status)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"{where} did not return JSON: {err} (reply starts {data[:120]!r})", status=200) from None
