"""`make_backend`: the recipe's `eval.backend` (hf | vllm | openai | chat | clock) for a checkpoint; engines are
imported lazily, so choosing `hf` never imports vLLM and the base module never imports an engine."""

from __future__ import annotations

from timealign.backends.base import BACKENDS, sampling_settings, set_reasoning


def make_backend(eval_cfg, checkpoint: str, *, dtype: str | None = None, trust_remote_code: bool = False):
    """Build the backend named by `eval_cfg.backend` (a recipe's `eval` section) for `checkpoint`.

    `checkpoint`: a model folder, a LoRA adapter folder, a hub id, or a name timealign builds (`tiny`, `smol`, ...:
    timealign.models). For `openai` it names the tokenizer to render with (and the served model unless
    `eval.served_model` is set); for `chat` the API model (unless `eval.served_model` is set), no tokenizer is loaded.
    """
    from timealign.config import RecipeError
    from timealign.models import resolve_model_path

    kind = getattr(eval_cfg, "backend", "hf")
    if kind not in BACKENDS:
        raise RecipeError(f"unknown eval.backend={kind!r}; known: {', '.join(BACKENDS)}")
    if kind == "clock":  # no model, no tokenizer: the elapsed-time rule (timealign/backends/clock.py)
        from timealign.backends.clock import DEFAULT_SECONDS, ClockBackend, check_seconds

        try:
            seconds = check_seconds(getattr(eval_cfg, "clock_seconds", DEFAULT_SECONDS))
        except ValueError as err:
            raise RecipeError(str(err)) from None
        return ClockBackend(seconds)
    sampling = sampling_settings(eval_cfg)
    dtype = dtype or getattr(eval_cfg, "dtype", None) or "auto"
    reasoning = getattr(eval_cfg, "reasoning", None)
    if kind == "hf":
        from timealign.backends.hf import HFBackend

        backend = HFBackend(
            resolve_model_path(checkpoint),
            batch_size=eval_cfg.batch_size,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            sampling=sampling,
        )
    elif kind == "vllm":
        from timealign.backends.vllm import VLLMBackend

        backend = VLLMBackend(
            resolve_model_path(checkpoint),
            dtype=dtype,
            tensor_parallel_size=eval_cfg.tensor_parallel_size,
            max_model_len=eval_cfg.max_model_len,
            enforce_eager=eval_cfg.enforce_eager,
            gpu_memory_utilization=eval_cfg.gpu_memory_utilization,
            max_lora_rank=eval_cfg.max_lora_rank,
            kv_cache_gib=eval_cfg.kv_cache_gib,
            trust_remote_code=trust_remote_code,
            sampling=sampling,
            enable_prefix_caching=getattr(eval_cfg, "prefix_caching", None),
        )
    elif kind == "chat":
        from timealign.backends.chat import ChatBackend

        if not getattr(eval_cfg, "base_url", None):
            raise RecipeError(
                "eval.backend=chat needs eval.base_url (e.g. eval.base_url=https://api.openai.com/v1 or "
                "http://HOST:8000/v1)"
            )
        return ChatBackend(
            eval_cfg.base_url,
            model=eval_cfg.served_model or checkpoint,
            api_key_env=eval_cfg.api_key_env,
            concurrency=eval_cfg.batch_size,
            timeout=eval_cfg.request_timeout,
            max_retries=eval_cfg.max_retries,
            sampling=sampling,
            reasoning=reasoning,
            tool_choice=eval_cfg.tool_choice,
            send_sampling=eval_cfg.chat_sampling,
            allow_insecure_key=eval_cfg.allow_insecure_key,
        )
    else:
        from timealign.backends.openai import OpenAIBackend

        if not getattr(eval_cfg, "base_url", None):
            raise RecipeError("eval.backend=openai needs eval.base_url (e.g. eval.base_url=http://HOST:8000/v1)")
        backend = OpenAIBackend(
            eval_cfg.base_url,
            model=eval_cfg.served_model or checkpoint,
            tokenizer=resolve_model_path(checkpoint),
            api_key_env=eval_cfg.api_key_env,
            concurrency=eval_cfg.batch_size,
            timeout=eval_cfg.request_timeout,
            max_retries=eval_cfg.max_retries,
            trust_remote_code=trust_remote_code,
            sampling=sampling,
            reasoning=reasoning,
            allow_insecure_key=eval_cfg.allow_insecure_key,
        )
    if kind != "openai":  # the openai backend loads its tokenizer lazily and applies this itself
        set_reasoning(backend.tokenizer, reasoning)
    return backend
