"""The model a recipe trains: the base model and tokenizer as the recipe's `model` section says, and the
LoRA config of its `lora` section. Shared by offset-DPO (`timealign.train.dpo`) and TIMER SFT (`timealign.train.sft`).
"""

from __future__ import annotations

from typing import Any

from timealign.config import RecipeError
from timealign.config.dtypes import torch_dtype


def check_model_available(name_or_path: str, key: str = "model.name_or_path") -> None:
    """With HF_HUB_OFFLINE=1, a hub id must be in the local hub cache: refused before any work (data prep, claiming
    output_dir) instead of transformers' OSError after them. Local folders and the names timealign builds (`tiny`,
    `smol`, ...) pass."""
    from pathlib import Path

    from huggingface_hub import constants, try_to_load_from_cache

    from timealign.models import is_local_model

    if is_local_model(name_or_path) or Path(name_or_path).expanduser().exists():
        return
    if not constants.HF_HUB_OFFLINE:
        return  # transformers downloads it (or says why not)
    try:
        cached = [try_to_load_from_cache(name_or_path, name) for name in ("config.json", "adapter_config.json")]
    except ValueError:  # not a repo id at all: check_model_reference has said so for local-looking paths
        return
    if not any(isinstance(path, str) for path in cached):
        raise RecipeError(
            f"{key}={name_or_path}: not in the local hub cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE=1 allows "
            f"the cache only: download it where the hub is reachable (`hf download {name_or_path} --local-dir DIR`, "
            f"then {key}=DIR), or unset HF_HUB_OFFLINE"
        )


def resolve_base_model(name_or_path: str) -> str:
    """The folder or hub id to load; the local models (`tiny`, `smol`, ...: timealign.models) are built once, by the
    main process, while the others wait."""
    from accelerate import PartialState

    from timealign.models import resolve_model_path

    with PartialState().main_process_first():
        return resolve_model_path(name_or_path)


def load_tokenizer(model_path: str, model):
    """The tokenizer of `model_path`, padding with its EOS token when it has no pad token. `model`: the recipe's
    model section."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=model.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model_path: str, model, master_fp32: bool = False):
    """The causal LM at `model_path` in the recipe's dtype and attention implementation. `model`: the recipe's model
    section. Under FSDP with `fsdp_cpu_ram_efficient_loading: true` only rank 0 reads the weights; the other ranks get
    the same model in unwritten host storage, filled when it is sharded by a broadcast from rank 0
    (`timealign.train.fsdp_loading`). `master_fp32`: every weight is trained under bf16/fp16 mixed precision, so
    accelerate's FSDP2 prepare upcasts a low-precision model to fp32 before sharding; those ranks build it in fp32
    directly (the upcast would write a full fp32 copy into each one's host RAM)."""
    import torch
    from transformers import AutoModelForCausalLM

    from timealign.train import fsdp_loading

    dtype, attn, remote = torch_dtype(model.dtype), model.attn_implementation, model.trust_remote_code
    once = fsdp_loading.efficient_loading() and fsdp_loading.is_model_folder(model_path)
    if once and not fsdp_loading.reads_weights():
        loaded = fsdp_loading.empty_model(model_path, torch.float32 if master_fp32 else dtype, attn, remote)
    else:
        loaded = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=dtype, attn_implementation=attn, trust_remote_code=remote
        )
    if once:
        fsdp_loading.share_non_persistent_buffers(loaded)
    return loaded


def lora_config(lora, **extra: Any):
    """A causal-LM `peft.LoraConfig` from the recipe's lora section; `extra` adds LoraConfig fields (the TIMER
    tokens' trainable rows, for example)."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
        **extra,
    )
