"""The gateway's HTTP surface: an ASGI app (Starlette) with OpenAI's `/v1/chat/completions` and `/v1/models`.

A request's messages get their times (`timealign.serve.clock`), are rendered the way the model was trained
(`Gateway.renderer`: the TicToc evaluator's own `PromptRenderer.for_data` call for a checkpoint, its
`ChatRequestRenderer` for an API model), go to the upstream (`timealign.serve.upstream`), and the reply comes back as
an OpenAI chat completion (`timealign.serve.replies`). Every failure is an OpenAI error body
(`{"error": {"message", "type", "param", "code"}}`) with a 4xx/5xx status, never a traceback.

Streaming (`stream: true`): without `tools` (and with upstream_api=completions) the upstream's tokens are passed on
as they come; with tools the reply is only known to be a call or an answer once complete, so its chunks come at the
end (one content or tool_calls chunk, then the finish chunk and `[DONE]`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from timealign.serve.clock import ClockError, ClockStore
from timealign.serve.replies import message_from_text, strip_special
from timealign.serve.upstream import Upstream, UpstreamError

logger = logging.getLogger("timealign.serve")

ROLES = ("system", "user", "assistant", "tool")
CONVERSATION_HEADER = "x-conversation-id"


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


def error_response(message: str, status: int, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else ("timeout_error" if status == 504 else "upstream_error")
    if status == 500:
        kind = "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status
    )


@dataclass
class Gateway:
    """What the app serves with: the renderer, the upstream, the clock and the limits."""

    renderer: Any  # PromptRenderer | PaperRenderer (completions) or ChatRequestRenderer (chat)
    upstream: Upstream
    clock: ClockStore
    options: Any  # ServeOptions
    upstream_model: str
    served_model: str
    family: str  # tool-call syntax of the model (api for upstream_api=chat)
    tokenizer: Any = None
    env_key: str | None = None

    # -- the request --------------------------------------------------------------------------------------------
    def headers(self, request: Request) -> dict[str, str]:
        """The upstream's headers: the client's Authorization passed through, else the configured key."""
        given = request.headers.get("authorization")
        key_header = given or (f"Bearer {self.env_key}" if self.env_key else None)
        if not key_header:
            return {}
        if self.upstream.plain_http_off_host and not self.options.allow_insecure_key:
            raise BadRequest(
                f"refusing to pass an API key over plain http to {self.upstream.shown}: not a loopback address "
                "(start the gateway with an https upstream, or allow_insecure_key=true)",
                status=400,
            )
        return {"Authorization": key_header}

    def messages(self, body: dict) -> list[dict]:
        """The client's messages, checked, as the renderer reads them (a `time` key is set later)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("`messages` must be a non-empty list of chat messages", param="messages")
        if len(messages) > self.options.max_messages:
            raise BadRequest(
                f"{len(messages)} messages, more than the {self.options.max_messages} allowed (max_messages)",
                param="messages",
            )
        out = []
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, dict):
                raise BadRequest(f"{where} must be an object", param=where)
            role = message.get("role")
            if role == "developer":
                role = "system"
            if role not in ROLES:
                raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", param=where)
            content = message.get("content")
            if isinstance(content, list):  # content parts: text only
                texts = []
                for part in content:
                    if (
                        not isinstance(part, dict)
                        or part.get("type") != "text"
                        or not isinstance(part.get("text"), str)
                    ):
                        raise BadRequest(f"{where}.content: only text parts are supported", param=where)
                    texts.append(part["text"])
                content = "".join(texts)
            if content is not None and not isinstance(content, str):
                raise BadRequest(f"{where}.content must be a string, a list of text parts or null", param=where)
            clean: dict[str, Any] = {"role": role, "content": content}
            calls = message.get("tool_calls")
            if calls:
                if role != "assistant" or not isinstance(calls, list):
                    raise BadRequest(f"{where}.tool_calls must be a list on an assistant message", param=where)
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                        raise BadRequest(f"{where}.tool_calls: each needs function.name", param=where)
                clean["tool_calls"] = calls
            for key in ("tool_call_id", "name"):
                if isinstance(message.get(key), str):
                    clean[key] = message[key]
            if message.get("timestamp") is not None:
                clean["timestamp"] = message["timestamp"]
            out.append(clean)
        return out

    def sampling(self, body: dict) -> dict:
        limit = self.options.max_tokens_limit
        tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if tokens is None:
            tokens = self.options.max_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= limit:
            raise BadRequest(f"max_tokens must be an integer from 1 to {limit} (max_tokens_limit)", param="max_tokens")
        if body.get("n", 1) != 1:
            raise BadRequest("only n=1 is supported", param="n")
        out = {"max_tokens": tokens}
        for key, kinds in (("temperature", (int, float)), ("top_p", (int, float)), ("seed", (int,))):
            value = body.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, kinds):
                    raise BadRequest(f"{key} must be a number", param=key)
                out[key] = value
        stop = body.get("stop")
        if stop is not None:
            if isinstance(stop, str):
                stop = [stop]
            if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 8:
                raise BadRequest("stop must be a string or a list of at most 8 strings", param="stop")
            out["stop"] = stop
        return out

    def tools(self, body: dict) -> list | None:
        tools = body.get("tools")
        if tools is None:
            return None
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools
        ):
            raise BadRequest("tools must be a list of {type: function, function: {name, ...}}", param="tools")
        return tools or None

    # -- rendering: the one path training and evaluation use --------------------------------------------------
    def timed(self, conversation: str, messages: list[dict]) -> list[dict]:
        try:
            times = self.clock.stamp(conversation, messages)
        except ClockError as err:
            raise BadRequest(str(err), param="messages") from None
        out = []
        for message, when in zip(messages, times):
            message = {k: v for k, v in message.items() if k != "timestamp"}
            if when is not None:
                message["time"] = when
            out.append(message)
        return out

    def render(self, messages: list[dict], tools: list | None) -> str | list[dict]:
        """The upstream's input: the prompt string (completions) or the stamped messages (chat)."""
        try:
            if self.options.upstream_api == "chat":
                return self.renderer.messages(messages)
            return self.renderer.prompt(messages, tools)
        except ValueError as err:  # the renderer's own refusal of a conversation (e.g. unparseable arguments)
            raise BadRequest(f"cannot render this conversation: {err}", param="messages") from None

    # -- upstream calls -----------------------------------------------------------------------------------------
    def completions_body(self, prompt: str, sampling: dict, stream: bool) -> dict:
        body = {"model": self.upstream_model, "prompt": prompt, "n": 1, **sampling}
        if self.options.vllm_extras:
            body.update(skip_special_tokens=False, spaces_between_special_tokens=False)
            if not stream:
                body["return_token_ids"] = True
        if stream:
            body["stream"] = True
        return body

    async def complete(self, request: Request, rendered, tools, sampling) -> tuple[dict, str, dict | None]:
        """(assistant message, finish reason, usage) for one request, non-streamed."""
        headers = self.headers(request)
        if self.options.upstream_api == "chat":
            body = {"model": self.upstream_model, "messages": rendered, **sampling}
            if tools:
                body.update(tools=tools, tool_choice="auto")
            reply = await self.upstream.request("POST", "/chat/completions", body, headers)
            try:
                choice = reply["choices"][0]
                message = choice["message"]
                out = {"role": "assistant", "content": message.get("content")}
                if message.get("tool_calls"):
                    out["tool_calls"] = message["tool_calls"]
            except (KeyError, IndexError, TypeError):
                raise UpstreamError(f"upstream {self.upstream.shown}: unexpected chat reply") from None
            return out, choice.get("finish_reason") or "stop", reply.get("usage")
        reply = await self.upstream.request(
            "POST", "/completions", self.completions_body(rendered, sampling, False), headers
        )
        try:
            choice = reply["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise UpstreamError(f"upstream {self.upstream.shown}: unexpected completions reply") from None
        ids = choice.get("token_ids")
        if isinstance(ids, list) and self.tokenizer is not None:  # as the evaluator's openai backend reads it
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        message, called = message_from_text(text, self.family)
        finish = "tool_calls" if called else (choice.get("finish_reason") or "stop")
        return message, finish, reply.get("usage")


# -- the app ---------------------------------------------------------------------------------------------------
async def read_body(request: Request, limit: int) -> dict:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"request body of {declared} bytes, more than {limit} (max_request_bytes)", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"request body over {limit} bytes (max_request_bytes)", status=413)
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadRequest(f"the request body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def chunk_maker(cid: str, created: int, model: str):
    """`chunk(delta, finish_reason=None)`: one `chat.completion.chunk` event of this completion."""

    def chunk(delta: dict, finish_reason: str | None = None) -> str:
        return sse(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    return chunk


def build_app(gateway: Gateway) -> Starlette:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": gateway.served_model, "object": "model", "created": 0, "owned_by": "timealign"}],
            }
        )

    async def chat_completions(request: Request):
        body = await read_body(request, gateway.options.max_request_bytes)
        model = body.get("model")
        if model != gateway.served_model:
            raise BadRequest(
                f"the model {model!r} does not exist here; this gateway serves {gateway.served_model!r}",
                status=404,
                param="model",
                code="model_not_found",
            )
        conversation = request.headers.get(CONVERSATION_HEADER, "")
        if len(conversation) > 256:
            raise BadRequest("X-Conversation-Id is longer than 256 characters")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be true or false", param="stream")
        messages, tools, sampling = gateway.messages(body), gateway.tools(body), gateway.sampling(body)
        timed = gateway.timed(conversation, messages)
        reply_time = timed[-1].get("time")
        if reply_time is None and gateway.renderer.timestamps:
            raise BadRequest("the conversation must end with a user, assistant or tool message", param="messages")
        rendered = gateway.render(timed, tools)
        created, cid = int(time.time()), completion_id()

        def remember(message: dict) -> None:
            if reply_time is not None:
                gateway.clock.record_reply(conversation, messages, message, reply_time)

        if stream and not tools and gateway.options.upstream_api == "completions":
            return await live_stream(request, rendered, sampling, cid, created, remember)
        message, finish, usage = await gateway.complete(request, rendered, tools, sampling)
        remember(message)
        if not stream:
            return JSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": gateway.served_model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                }
            )

        chunk = chunk_maker(cid, created, gateway.served_model)

        async def whole():
            yield chunk({"role": "assistant", "content": ""})
            if message.get("content"):
                yield chunk({"content": message["content"]})
            if message.get("tool_calls"):
                yield chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]})
            yield chunk({}, finish)
            yield sse("[DONE]")

        return StreamingResponse(whole(), media_type="text/event-stream")

    async def live_stream(request, prompt, sampling, cid, created, remember):
        events = gateway.upstream.stream(
            "/completions", gateway.completions_body(prompt, sampling, True), gateway.headers(request)
        )
        first = await anext(events, None)  # an upstream refusal is still an HTTP error, not a broken stream

        chunk = chunk_maker(cid, created, gateway.served_model)

        async def relay():
            texts, finish = [], None
            yield chunk({"role": "assistant", "content": ""})
            try:
                event = first
                while event is not None:
                    choice = (event.get("choices") or [{}])[0]
                    text = choice.get("text") or ""
                    if text:
                        texts.append(text)
                        shown = strip_special(text, gateway.family)
                        if shown:
                            yield chunk({"content": shown})
                    finish = choice.get("finish_reason") or finish
                    event = await anext(events, None)
            except UpstreamError as err:  # the status line is gone: the error travels as an event, as OpenAI's does
                yield sse({"error": {"message": str(err), "type": "upstream_error", "param": None, "code": None}})
                return
            remember({"role": "assistant", "content": strip_special("".join(texts), gateway.family)})
            yield chunk({}, finish or "stop")
            yield sse("[DONE]")

        return StreamingResponse(relay(), media_type="text/event-stream")

    async def bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return error_response(str(exc), exc.status, exc.param, exc.code)

    async def upstream_error(request: Request, exc: UpstreamError) -> JSONResponse:
        logger.warning("%s", exc)
        return error_response(str(exc), exc.status)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        messages = {404: f"no route {request.url.path}; this gateway serves /v1/chat/completions and /v1/models"}
        return error_response(messages.get(exc.status_code, str(exc.detail)), exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
        return error_response("internal error in the gateway (its log names it)", 500)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ],
        exception_handlers={
            BadRequest: bad_request,
            UpstreamError: upstream_error,
            HTTPException: http_error,
            Exception: internal_error,
        },
    )
