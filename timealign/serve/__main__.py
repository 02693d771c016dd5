"""`timealign serve` / `python -m timealign.serve`: start the gateway (`timealign.serve.app`) with uvicorn.

Everything that can be wrong with the command line is found before the server binds: the recipe (the checkpoint's
saved one, or recipe=), the upstream URL and key transport, the tokenizer and tool-call family, and the upstream's
model name (asked from its /models when upstream_model is not given). Each is one line and exit 2.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from timealign.backends.base import BackendError
from timealign.backends.openai import check_base_url, plain_http_off_host
from timealign.config.cli import Invocation, run_command
from timealign.config.options import RecipeError
from timealign.serve.options import COMMAND, check_options

logger = logging.getLogger("timealign.serve")


def gateway_renderer(recipe, options, tokenizer, family: str):
    """The renderer of the served model: for a checkpoint, the TicToc evaluator's own call
    (`timealign.suites.tictoc.suite.run_tictoc_suite`: `PromptRenderer.for_data` on the recipe's data section with
    the same overrides), for an API model the evaluator's `ChatRequestRenderer`."""
    from timealign.render.chat import PromptRenderer
    from timealign.suites.tictoc.requests import ChatRequestRenderer

    try:
        if options.upstream_api == "chat":
            return ChatRequestRenderer.for_data(
                recipe.data, timestamps=options.timestamps, prompt_mode=options.prompt_mode
            )
        return PromptRenderer.for_data(
            tokenizer,
            recipe.data,
            timestamps=options.timestamps,
            prompt_mode=options.prompt_mode,
            family=family,
            reasoning=recipe.eval.reasoning,
        )
    except ValueError as err:
        raise RecipeError(f"cannot render for this model: {err}") from None


def render_differences(recipe, options) -> list[str]:
    """The render settings (data.timestamps, elapsed, protocol; prompt_mode) that differ from the checkpoint's
    training: the prompts then differ from what it was trained on, which the operator must have meant."""
    from timealign.eval.data_identity import RENDER_KEYS, trained_recipe

    trained = trained_recipe(options.checkpoint) if options.checkpoint else None
    if trained is None:
        return []
    lines = []
    for key in RENDER_KEYS:
        old, new = getattr(trained.data, key), getattr(recipe.data, key)
        if key == "timestamps" and options.timestamps is not None:
            new = options.timestamps
        if old != new:
            lines.append(f"data.{key}: {old} (trained) -> {new} (served)")
    if options.prompt_mode != "none" and options.upstream_api == "completions":
        lines.append(f"prompt_mode: none (trained) -> {options.prompt_mode} (served)")
    return lines


def upstream_model_name(options, key: str | None) -> str:
    """`upstream_model`, or the one model the upstream's /models lists."""
    if options.upstream_model:
        return options.upstream_model
    import httpx

    from timealign.backends.http import redact_url

    shown = redact_url(options.upstream)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        reply = httpx.get(
            options.upstream.rstrip("/") + "/models", headers=headers, timeout=30, follow_redirects=False
        )
        reply.raise_for_status()
        names = [m["id"] for m in reply.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        raise RecipeError(
            f"cannot list the models of upstream={shown} ({type(err).__name__}); is it running? Or name the model "
            "with upstream_model=NAME"
        ) from None
    if len(names) != 1:
        raise RecipeError(
            f"upstream={shown} serves {len(names)} models ({', '.join(names)}): pick one with upstream_model=NAME"
        )
    return names[0]


def serve(invocation: Invocation) -> int:
    import uvicorn

    from timealign.serve.app import Gateway, build_app
    from timealign.serve.clock import MEMORY, ClockStore
    from timealign.serve.upstream import Upstream

    options, recipe = invocation.options, invocation.recipe
    check_options(options)
    if recipe is None:
        raise RecipeError(
            "timealign serve needs the settings the model was trained with: checkpoint=DIR (a folder holding its "
            "timealign_recipe.yaml) or recipe=NAME / --config PATH"
        )
    parts = check_base_url(options.upstream)
    key = os.environ.get(options.api_key_env) if options.api_key_env else None
    if key and plain_http_off_host(parts) and not options.allow_insecure_key:
        raise RecipeError(
            f"refusing to send the key from ${options.api_key_env} over plain http to a non-loopback upstream: use "
            "https, a loopback address, unset the variable, or allow_insecure_key=true"
        )
    tokenizer, family = None, "api"
    if options.upstream_api == "completions":
        if not options.checkpoint:
            raise RecipeError(
                "upstream_api=completions renders prompts with the checkpoint's tokenizer: give checkpoint=DIR (the "
                "folder the upstream serves), or upstream_api=chat for an API model"
            )
        if not Path(options.checkpoint).is_dir():
            raise RecipeError(
                f"checkpoint={options.checkpoint}: no such folder (the model folder the upstream serves)"
            )
        from transformers import AutoTokenizer

        from timealign.render.families import detect_family, get_family

        tokenizer = AutoTokenizer.from_pretrained(options.checkpoint, trust_remote_code=recipe.model.trust_remote_code)
        family = get_family(options.family).name if options.family else detect_family(tokenizer.chat_template)
    renderer = gateway_renderer(recipe, options, tokenizer, family)
    for line in render_differences(recipe, options):
        logger.warning("serving with prompts other than the checkpoint was trained on: %s", line)
    upstream_model = upstream_model_name(options, key)
    store = options.store if options.store == MEMORY else str(Path(options.store).expanduser())
    gateway = Gateway(
        renderer=renderer,
        upstream=Upstream(options.upstream, timeout=options.request_timeout, max_bytes=options.max_response_bytes),
        clock=ClockStore(store),  # a store= that cannot hold the clock: one line (StoreError)
        options=options,
        upstream_model=upstream_model,
        served_model=options.served_model or upstream_model,
        family=family,
        tokenizer=tokenizer,
        env_key=key,
    )
    logger.info(
        "serving %s at http://%s:%d/v1 (upstream %s, %s; renders %s, timestamps=%s, elapsed=%s, prompt_mode=%s; "
        "clock %s)",
        gateway.served_model,
        options.host,
        options.port,
        gateway.upstream.shown,
        options.upstream_api,
        renderer.protocol,
        renderer.timestamps,
        renderer.elapsed,
        renderer.prompt_mode,
        store,
    )
    uvicorn.run(
        build_app(gateway),
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        timeout_keep_alive=30,
        limit_concurrency=256,
    )
    gateway.clock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(COMMAND, argv, serve, errors={BackendError: 2})


if __name__ == "__main__":
    sys.exit(main())
