"""An OpenAI-compatible server as a backend (e.g. `vllm serve` on the cluster), over `timealign.backends.http`.

Generation uses the *completions* endpoint with the prompt string rendered by our `PromptRenderer`, so the chat
template, tools and timestamps stay ours (the server's chat endpoint would apply its own template). A vLLM server
tokenizes a completions prompt with `add_special_tokens=True`, so a BOS-adding tokenizer adds BOS once, as in the
hf and vllm backends. vLLM's extra request fields are sent: `skip_special_tokens=false` (tool-call markers such as
Mistral's [TOOL_CALLS] are special tokens), `spaces_between_special_tokens=false`, and `top_k` / `min_p` when set.

`chat(messages)` calls the chat endpoint (the server's template) for judge models.

    python eval/run.py recipe=qwen3-8b checkpoint=Qwen/Qwen3-8B eval.backend=openai \
        eval.base_url=http://node17:8000/v1 [eval.served_model=NAME] [eval.api_key_env=OPENAI_API_KEY]

The API key (the environment variable `api_key_env` names) is sent as `Authorization: Bearer` only over https or to
a loopback address (127.0.0.0/8, ::1, localhost) unless `allow_insecure_key` (eval.allow_insecure_key) says
otherwise: over plain http anyone on the network path reads it, so such a backend is refused when it is built,
before any request. A key written into the URL (user:key@host, ?api_key=...) is refused too, since the URL is
logged and saved (reports, cache metadata); `redact_url` hides such parts wherever a URL is shown. Redirects are not
followed (the key would go along to the new address).

One request per prompt, `concurrency` at a time; connection errors, timeouts and HTTP 408/409/429/5xx are retried
with exponential backoff and jitter (`max_retries`); a request that still fails is reported for its prompt only
(`GenerationError`), the others finish. Bounds against a broken or hostile server: `timeout`
(eval.request_timeout) limits each whole request, not each socket read; a reply over `max_response_bytes` is not
read on (`timealign.backends.http`); a completion longer than 2 x max_new_tokens + 16 tokens is a failed sample
(`timealign.backends.limits`), its text not stored. Malformed replies and overlong completions are not retried.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tqdm.auto import tqdm

from timealign.backends.base import BackendError, BaseBackend, GenerationError, set_reasoning
from timealign.backends.http import MAX_RESPONSE_BYTES, RequestError, post_json, redact_url
from timealign.backends.limits import check_output_length

__all__ = ["OpenAIBackend", "RequestError", "check_base_url", "is_loopback", "redact_url"]

logger = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


# -- secrets in URLs ---------------------------------------------------------------------------------------------
def is_loopback(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (also as ::ffff:127.x.y.z), written out: names are not resolved, so the answer
    cannot change with DNS."""
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def plain_http_off_host(parts: urllib.parse.SplitResult) -> bool:
    """Whether a key sent to this URL would cross the network unencrypted: plain http to a host that is not a
    loopback address (the evaluator's API backends and the serve gateway refuse that unless allow_insecure_key)."""
    return parts.scheme != "https" and not is_loopback(parts.hostname)


def check_base_url(base_url: str) -> urllib.parse.SplitResult:
    """The URL's parts; a URL that is not http(s), or that carries a key (user info, a query), is a BackendError."""
    shown = redact_url(base_url)
    try:
        parts = urllib.parse.urlsplit(base_url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as err:
        raise BackendError(f"base_url {shown!r} is not a URL ({err}); e.g. http://127.0.0.1:8000/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendError(
            f"base_url {shown!r} must be an http:// or https:// URL with a host, e.g. "
            "https://api.openai.com/v1 or http://127.0.0.1:8000/v1"
        )
    if "@" in parts.netloc:
        raise BackendError(
            f"base_url {shown} carries user info (user:key@host): a key in the URL ends up in logs "
            "and saved reports. Remove it and put the key in the environment variable that "
            "eval.api_key_env names (sent as Authorization: Bearer)"
        )
    if parts.query or parts.fragment:
        raise BackendError(
            f"base_url {shown} carries a query string or fragment: requests go to "
            "<base_url>/completions, and a key in the URL ends up in logs and saved reports. Remove "
            "it; an API key goes in the environment variable that eval.api_key_env names"
        )
    return parts


class OpenAIBackend(BaseBackend):
    name = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        tokenizer: Any = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 16,
        timeout: float = 600.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        trust_remote_code: bool = False,
        sampling: dict | None = None,
        reasoning: bool | None = None,
        vllm_extras: bool = True,
        allow_insecure_key: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        """tokenizer: a tokenizer object, or a path/hub id loaded on first use (None: chat() only).
        allow_insecure_key: send the API key over plain http to a non-loopback host (module docstring).
        timeout: seconds for a whole request; max_response_bytes: the largest reply
        read (`timealign.backends.http`)."""
        super().__init__(sampling)
        self.base_url = base_url.rstrip("/")
        self._url_parts = check_base_url(self.base_url)
        self.url = redact_url(self.base_url)  # what messages, logs and saved files show
        self.model = model
        self.model_id = f"{self.url}|{model}"
        self.api_key_env = api_key_env
        self.allow_insecure_key = allow_insecure_key
        self._api_key()  # refuse an unsafe key transport now, before any work or request
        self.concurrency = max(1, int(concurrency))
        self.timeout, self.max_retries = timeout, max_retries
        self.max_response_bytes = int(max_response_bytes)
        self.backoff, self.max_backoff = backoff, max_backoff
        self.vllm_extras = vllm_extras
        self.cache_chunk = max(64, 4 * self.concurrency)
        self._tokenizer_source, self._tokenizer = (
            (None, tokenizer) if not isinstance(tokenizer, str) else (tokenizer, None)
        )
        self._trust_remote_code, self._reasoning = trust_remote_code, reasoning
        self._warned_bos = False
        if self._tokenizer is not None:
            set_reasoning(self._tokenizer, reasoning)

    # -- tokenizer (only needed to render prompts) ------------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None and self._tokenizer_source is not None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(
                self._tokenizer_source, trust_remote_code=self._trust_remote_code
            )
            set_reasoning(self._tokenizer, self._reasoning)
        return self._tokenizer

    # -- HTTP ---------------------------------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        """The key to send, if any; one that would cross the network unencrypted is a BackendError."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key and plain_http_off_host(self._url_parts) and not self.allow_insecure_key:
            raise BackendError(
                f"refusing to send the API key from ${self.api_key_env} over plain http to {self.url}: it is not "
                "a loopback address (127.0.0.0/8, ::1, localhost), so anyone on the network path could read the "
                "key. Use https://, reach the server through a loopback address (e.g. an ssh tunnel to "
                f"127.0.0.1), send no key (unset ${self.api_key_env} or set eval.api_key_env= empty), or set "
                "eval.allow_insecure_key=true to send it anyway"
            )
        return key

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post_once(self, path: str, body: dict) -> dict:
        return post_json(
            f"{self.base_url}{path}",
            body,
            self._headers(),
            timeout=self.timeout,
            max_bytes=self.max_response_bytes,
            shown=f"{self.url}{path}",
        )

    def post(self, path: str, body: dict) -> dict:
        """POST with retries: connection errors, timeouts and 408/409/429/5xx back off exponentially."""
        for attempt in range(self.max_retries + 1):
            try:
                return self._post_once(path, body)
            except RequestError as err:
                retriable = err.status is None or err.status in RETRY_STATUS
                if not retriable or attempt == self.max_retries:
                    raise
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)
                logger.warning(
                    "%s (attempt %d of %d); retrying in %.1f s", err, attempt + 1, self.max_retries + 1, delay
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _sampling_body(self, max_new_tokens: int, s: dict) -> dict:
        body = {"model": self.model, "max_tokens": max_new_tokens, "temperature": s["temperature"], "n": 1}
        if s["temperature"] > 0:
            body["top_p"] = s["top_p"]
            body["seed"] = s["seed"]
            if self.vllm_extras:
                if s["top_k"]:
                    body["top_k"] = s["top_k"]
                if s["min_p"]:
                    body["min_p"] = s["min_p"]
        if self.vllm_extras:
            body.update(skip_special_tokens=False, spaces_between_special_tokens=False, return_token_ids=True)
        return body

    # -- the backend interface ------------------------------------------------------------------------------------
    def complete(self, prompt: str, *, max_new_tokens: int = 64, **sampling) -> str:
        """One completions request for one rendered prompt."""
        body = {**self._sampling_body(max_new_tokens, self.resolve_sampling(**sampling)), "prompt": prompt}
        reply = self.post("/completions", body)
        try:
            choice = reply["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            raise RequestError(f"unexpected completions reply: {str(reply)[:500]}", status=200) from None
        # A vLLM server returns the ids (return_token_ids): decode them with the same call as the hf and vllm
        # backends (special tokens kept, EOS included), so every backend's outputs read alike.
        ids, tokenizer = choice.get("token_ids"), self._tokenizer
        if not isinstance(text, str):
            raise RequestError(f"unexpected completions reply: the text is {type(text).__name__}", status=200)
        check_output_length(
            text,
            max_new_tokens,
            tokenizer=tokenizer,
            where=f"{self.url}/completions",
            token_ids=ids if isinstance(ids, list) else None,
        )
        if ids is not None and tokenizer is not None:
            self._check_bos(choice.get("prompt_token_ids") or reply.get("prompt_token_ids"))
            return tokenizer.decode(list(ids), skip_special_tokens=False)
        return text

    def _check_bos(self, prompt_ids) -> None:
        bos = getattr(self._tokenizer, "bos_token_id", None)
        if bos is not None and prompt_ids and list(prompt_ids[:2]) == [bos, bos] and not self._warned_bos:
            self._warned_bos = True
            logger.warning(
                "the server's prompt ids start with two BOS tokens: the prompt string carried a BOS "
                "and the server added another (render prompts with the shared PromptRenderer)"
            )

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
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p}
        _ = self.tokenizer  # load it (if it is to be loaded) before the worker threads decode with it
        outputs: list[str | None] = [None] * len(prompts)
        errors: dict[int, str] = {}

        def one(i: int) -> None:
            try:
                outputs[i] = self.complete(prompts[i], max_new_tokens=max_new_tokens, **sampling)
            except Exception as err:  # noqa: BLE001 - reported per prompt
                errors[i] = f"{type(err).__name__}: {err}"

        with (
            ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(prompts)))) as pool,
            tqdm(total=len(prompts), desc=desc, unit="sample", disable=desc is None) as bar,
        ):
            for _ in pool.map(one, range(len(prompts))):
                bar.update(1)
        if errors:
            raise GenerationError(outputs, errors)
        return outputs  # type: ignore[return-value]

    def chat(
        self,
        messages: list[dict],
        *,
        max_new_tokens: int = 512,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        **extra,
    ) -> str:
        """The chat endpoint (the server applies its own template), e.g. for an LLM judge; returns the reply text."""
        s = self.resolve_sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        body = {**self._sampling_body(max_new_tokens, s), "messages": messages, **extra}
        for key in ("spaces_between_special_tokens", "skip_special_tokens", "return_token_ids"):
            body.pop(key, None)
        reply = self.post("/chat/completions", body)
        try:
            content = reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise RequestError(f"unexpected chat reply: {str(reply)[:500]}") from None
        if not isinstance(content, str):
            raise RequestError(f"unexpected chat reply: the content is {type(content).__name__}", status=200)
        check_output_length(content, max_new_tokens, where=f"{self.url}/chat/completions")
        return content
