"""`timealign serve`'s options and command line (`timealign.config.cli`: key=value, --help from the help texts)."""

from __future__ import annotations

from dataclasses import dataclass

from timealign.config.cli import Command
from timealign.config.schema import opt
from timealign.eval.data_identity import recipe_from_checkpoint

DEFAULT_STORE = "~/.local/state/timealign/serve-clock.sqlite"
UPSTREAM_APIS = ("completions", "chat")

SUMMARY = """An OpenAI-compatible gateway (/v1/chat/completions, streaming or not, and /v1/models) in front of an
OpenAI-compatible upstream (`vllm serve` of a trained checkpoint, or a hosted API), which gives the model the
timestamps it was trained with. Each message's time is the client's (the message's `timestamp` field: ISO 8601 or
Unix seconds) or its arrival at the gateway, kept per conversation (X-Conversation-Id header, or the history) in a
SQLite file, so a restart loses no clock. upstream_api=completions (a checkpoint): the conversation is rendered with
the checkpoint's own renderer and settings (its saved timealign_recipe.yaml: protocol, timestamps, elapsed badge;
the same call the TicToc evaluator makes), sent to the upstream's /completions, and the reply's tool calls are read
with the evaluator's detector into OpenAI tool_calls. upstream_api=chat (an API model): stamped chat messages as
the evaluator's chat backend sends them (data.protocol, prompt_mode: reminder | rules). Binds 127.0.0.1 unless
host= says otherwise. Docs: docs/serving.md."""

EXAMPLES = """    timealign serve checkpoint=outputs/tiny-export upstream=http://127.0.0.1:8000/v1
    timealign serve recipe=llama8b upstream_api=chat upstream=https://api.openai.com/v1 upstream_model=gpt-4.1 \\
        data.protocol=paper prompt_mode=reminder"""


@dataclass
class ServeOptions:
    checkpoint: str | None = opt(
        None,
        "the trained model folder the upstream serves (an exported one: `timealign export`); its "
        "timealign_recipe.yaml gives the render settings and its tokenizer renders the prompts. Needed with "
        "upstream_api=completions",
    )
    upstream: str = opt(
        "http://127.0.0.1:8000/v1", "base URL of the OpenAI-compatible upstream (ending in /v1), e.g. vllm serve's"
    )
    upstream_api: str = opt(
        "completions",
        "completions: render prompts here and send them to the upstream's /completions (a timealign checkpoint); "
        "chat: send stamped messages to its /chat/completions (an API model)",
        choices=UPSTREAM_APIS,
    )
    upstream_model: str | None = opt(None, "the model name at the upstream (default: the one model its /models lists)")
    served_model: str | None = opt(None, "the model name clients use and /v1/models lists (default: upstream_model)")
    host: str = opt("127.0.0.1", "address to bind; 0.0.0.0 exposes the gateway to the network")
    port: int = opt(8100, "port to bind")
    store: str = opt(
        DEFAULT_STORE, "SQLite file of the message times (created if missing); :memory: keeps them in memory only"
    )
    timestamps: bool | None = opt(None, "stamp messages (default: the recipe's data.timestamps, as trained)")
    prompt_mode: str = opt(
        "none",
        "none | reminder | rules: the TicToc paper's system-prompt additions (Sec. 3.4, Fig. 12), for API models",
        choices=("none", "reminder", "rules"),
    )
    family: str | None = opt(
        None, "tool-call syntax of the model: tiny | qwen | llama3 | mistral | deepseek_r1 (default: detected)"
    )
    api_key_env: str = opt(
        "OPENAI_API_KEY",
        "environment variable holding the upstream's key, sent when a client sends no Authorization header of its "
        "own (a client's header is passed through); never logged",
    )
    allow_insecure_key: bool = opt(False, "send a key over plain http to an upstream that is not a loopback address")
    vllm_extras: bool = opt(
        True, "send vLLM's skip_special_tokens=false and return_token_ids (as the evaluator's openai backend)"
    )
    max_tokens: int = opt(512, "completion tokens when a request names none")
    max_tokens_limit: int = opt(4096, "the most completion tokens a request may ask for (more: HTTP 400)")
    max_request_bytes: int = opt(4 << 20, "the largest request body accepted (more: HTTP 413)")
    max_response_bytes: int = opt(8 << 20, "the largest upstream reply read (more: HTTP 502)")
    max_messages: int = opt(1000, "the most messages a request may carry (more: HTTP 400)")
    request_timeout: float = opt(300.0, "seconds an upstream request may take, whole (more: HTTP 504)")
    log_level: str = opt("info", "the server's log level", choices=("debug", "info", "warning", "error"))


def check_options(options: ServeOptions) -> None:
    """Numbers in range, before anything starts (RecipeError: one line, exit 2)."""
    from timealign.config.options import RecipeError

    if not 1 <= options.port <= 65535:
        raise RecipeError(f"port={options.port}: give a port from 1 to 65535")
    for key in ("max_tokens", "max_tokens_limit", "max_request_bytes", "max_response_bytes", "max_messages"):
        if getattr(options, key) < 1:
            raise RecipeError(f"{key}={getattr(options, key)} must be at least 1")
    if options.max_tokens > options.max_tokens_limit:
        raise RecipeError(f"max_tokens={options.max_tokens} is above max_tokens_limit={options.max_tokens_limit}")
    if not options.request_timeout > 0:
        raise RecipeError(f"request_timeout={options.request_timeout} must be a positive number of seconds")


COMMAND = Command(
    prog="python -m timealign.serve",
    summary=SUMMARY,
    options=ServeOptions,
    recipe="optional",
    recipe_from=recipe_from_checkpoint,
    examples=EXAMPLES,
)
