"""API models through a chat-completions endpoint (`eval.backend=chat`): the server applies the model's template.

The other backends continue prompt strings that our renderer produced. An API model (gpt-4.1, o3, deepseek-chat, a
`vllm serve` model with a tool parser) takes messages and tool schemas instead and answers with a message whose tool
calls come back *structured* (`tool_calls`), as in the TicToc authors' API runs (`inference/api/openai.py`). To keep
the suites' string-in/string-out flow (and the resume cache keyed by prompt strings), both ends are canonical JSON
(`timealign.render.chat_api`):

- a *request* string `{"messages": [...], "tools": [...]}` (`request_string`; the TicToc suite renders it with
  `timealign.suites.tictoc.requests.ChatRequestRenderer`), posted to `<base_url>/chat/completions` with `tools`,
  `tool_choice` (default "auto", the authors' choice) and `max_completion_tokens`;
- a *reply* string `{"content": ..., "tool_calls": [...], "finish_reason": ...}` (`reply_string`), the message as the
  server returned it: tool calls as `{"id", "type", "function": {"name", "arguments"}}` with the arguments string
  as sent, plus `reasoning` where the server returned one. `parse_reply` reads it back; tool-call detection (the
  `api` family of `timealign.render.tool_calls`) decides on it.

    # the authors' API runs: their prompts (data.protocol=paper), no token limit, the server's sampling defaults
    python eval/run.py recipe=llama8b checkpoint=gpt-4.1-2025-04-14 eval.backend=chat \
        eval.base_url=https://api.openai.com/v1 eval.max_new_tokens=0 eval.chat_sampling=false out=results/gpt-4.1

Sampling: the recipe's settings (greedy by default, the paper's "Temperature=0 where applicable") are sent as
temperature (plus top_p and seed when sampling); `eval.chat_sampling=false` sends none, as the authors' API code did
(the server's defaults; OpenAI's o-series accept only their default temperature). Token budget: `max_new_tokens` is
sent as `max_completion_tokens`, which a reasoning model's hidden reasoning counts against, so API runs want a
larger `eval.max_new_tokens` than the local-model default; 0 sends no limit (the authors'). Replies that hit the
limit with nothing to show are counted in a warning.

HTTP, retries, per-request failures and the bounds on a reply (a deadline per request, a size cap, a completion
longer than 2 x max_new_tokens + 16 tokens counted as failed, at most 16 bytes a token) are `OpenAIBackend`'s: a
request that still fails is reported for its sample only (`GenerationError`), as the authors' handler wrote
`[ERROR]: ...` for it.

`eval.reasoning` (when set) is sent as vLLM's `chat_template_kwargs={"enable_thinking": ...}` (Qwen3 thinking
on/off); leave it unset for servers that do not take it. There is no tokenizer: the server renders. Suites that
render prompt strings themselves need `eval.backend=openai`.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tqdm.auto import tqdm

from timealign.backends.base import BackendError, GenerationError
from timealign.backends.limits import check_output_length
from timealign.backends.openai import OpenAIBackend, RequestError
from timealign.render.chat_api import ChatReply, reply_string, reply_text

logger = logging.getLogger(__name__)


# -- the canonical strings (timealign.render.chat_api), read and made ----------------------------------------------
def parse_request(text: str) -> tuple[list[dict], list]:
    """(messages, tools) of a request string; a string that is not one is a clear error."""
    try:
        request = json.loads(text)
        messages, tools = request["messages"], request["tools"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise BackendError(
            'eval.backend=chat sends chat requests ({"messages": [...], "tools": [...]}, rendered by '
            "timealign.suites.tictoc.requests.ChatRequestRenderer), not rendered prompt strings; got "
            f"{text[:80]!r}. Suites that render prompt strings need eval.backend=openai (or hf, vllm)"
        ) from None
    if not isinstance(messages, list) or not messages or not isinstance(tools, list):
        raise BackendError(f"a chat request needs a non-empty messages list and a tools list; got {text[:200]!r}")
    return messages, tools


def _call(call: Any, where: str) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise RequestError(f"{where}: a tool call without a function: {str(call)[:300]}", status=200)
    fn = call["function"]
    arguments = fn.get("arguments")
    if not isinstance(arguments, str) and arguments is not None:  # some servers send an object
        arguments = json.dumps(arguments, ensure_ascii=False)
    out = {"type": call.get("type") or "function", "function": {"name": fn.get("name"), "arguments": arguments}}
    if call.get("id") is not None:
        out = {"id": call["id"], **out}
    return out


def reply_from_response(response: dict, where: str = "chat reply") -> ChatReply:
    """The first choice of a chat-completions response; a response without one is a RequestError."""
    try:
        choice = response["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise RequestError(f"unexpected {where}: {str(response)[:500]}", status=200) from None
    if not isinstance(message, dict) or not isinstance(message.get("content"), (str, type(None))):
        raise RequestError(
            f"unexpected {where}: the message content is not a string: {str(message)[:300]}", status=200
        )
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise RequestError(f"unexpected {where}: tool_calls is not a list: {str(calls)[:300]}", status=200)
    reasoning = message.get("reasoning") or message.get("reasoning_content")  # vLLM / DeepSeek field names
    return ChatReply(
        content=message.get("content"),
        tool_calls=[_call(c, where) for c in calls],
        finish_reason=choice.get("finish_reason"),
        reasoning=reasoning or None,
    )


# -- the backend -------------------------------------------------------------------------------------------------
TOOL_CHOICES = ("auto", "required", "none")


def tool_choice_field(choice: str) -> str | dict:
    """auto | required | none as is; any other value names one tool (OpenAI's named tool choice)."""
    if not choice:
        raise BackendError("eval.tool_choice is empty; use auto (the TicToc authors'), required, none or a tool name")
    return choice if choice in TOOL_CHOICES else {"type": "function", "function": {"name": choice}}


class ChatBackend(OpenAIBackend):
    """`generate(requests) -> replies` over `/chat/completions` (see the module docstring)."""

    name = "chat"

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        tool_choice: str = "auto",
        send_sampling: bool = True,
        reasoning: bool | None = None,
        **kwargs,
    ):
        super().__init__(base_url, model=model, tokenizer=None, reasoning=reasoning, **kwargs)
        self.tool_choice = tool_choice_field(tool_choice)
        self.send_sampling, self.reasoning = send_sampling, reasoning
        # the cache key's engine identity: everything sent besides the request and the sampling settings
        self.model_id = (
            f"{self.url}|{model}|tool_choice={json.dumps(self.tool_choice, sort_keys=True)}"
            f"|sampling={'recipe' if send_sampling else 'server'}|enable_thinking={reasoning}"
        )

    def resolve_sampling(self, **given) -> dict:
        """The settings sent; with `send_sampling` off none is sent (None: the server's default)."""
        if self.send_sampling:
            return super().resolve_sampling(**given)
        chosen = {k: v for k, v in given.items() if v is not None}
        if chosen:
            raise BackendError(f"eval.chat_sampling=false sends no sampling settings, but {chosen} was asked for")
        return {key: None for key in (*self.sampling,)}

    def request_body(self, messages: list[dict], tools: list, *, max_new_tokens: int, **sampling) -> dict:
        body = {"model": self.model, "messages": messages}
        if tools:  # a tool_choice without tools is an error for OpenAI
            body.update(tools=tools, tool_choice=self.tool_choice)
        if max_new_tokens and max_new_tokens > 0:
            body["max_completion_tokens"] = int(max_new_tokens)
        if self.reasoning is not None:  # vLLM's switch for templates such as Qwen3's (OpenAI rejects it)
            body["chat_template_kwargs"] = {"enable_thinking": bool(self.reasoning)}
        if self.send_sampling:
            s = self.resolve_sampling(**sampling)
            body["temperature"] = s["temperature"]
            if s["temperature"] > 0:
                body.update(top_p=s["top_p"], seed=s["seed"])
                # vLLM's extensions, sent only when set (OpenAI rejects them)
                body.update({k: s[k] for k in ("top_k", "min_p") if s.get(k)})
        return body

    def ask(self, request: str, *, max_new_tokens: int = 0, **sampling) -> ChatReply:
        """One chat request (a request string) -> the reply."""
        messages, tools = parse_request(request)
        body = self.request_body(messages, tools, max_new_tokens=max_new_tokens, **sampling)
        reply = reply_from_response(self.post("/chat/completions", body), f"reply of {self.url}/chat/completions")
        check_output_length(reply_text(reply), max_new_tokens, where=f"{self.url}/chat/completions")
        return reply

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int = 64,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        desc: str | None = "Generating",
    ) -> list[str]:
        """Each prompt is a request string; each output the reply string. Failed requests: `GenerationError`."""
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p}
        if not self.send_sampling:
            sampling = {}  # cached_generate passes the resolved (None) settings back in
        outputs: list[str | None] = [None] * len(prompts)
        errors: dict[int, str] = {}
        cut: list[int] = []

        def one(i: int) -> None:
            try:
                reply = self.ask(prompts[i], max_new_tokens=max_new_tokens, **sampling)
            except Exception as err:  # noqa: BLE001 - reported per prompt
                errors[i] = f"{type(err).__name__}: {err}"
                return
            if reply.empty and reply.finish_reason == "length":
                cut.append(i)
            outputs[i] = reply_string(reply)

        with (
            ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(prompts)))) as pool,
            tqdm(total=len(prompts), desc=desc, unit="sample", disable=desc is None) as bar,
        ):
            for _ in pool.map(one, range(len(prompts))):
                bar.update(1)
        if cut:
            logger.warning(
                "%d of %d replies reached max_completion_tokens=%s before any content or tool call "
                "(reasoning models spend it on hidden reasoning): raise eval.max_new_tokens (0: no "
                "limit)",
                len(cut),
                len(prompts),
                max_new_tokens,
            )
        if errors:
            raise GenerationError(outputs, errors)
        return outputs  # type: ignore[return-value]
