"""The model a recipe trains: the base model and tokenizer as the recipe's `model` section says, and the
LoRA config of its `lora` section. Shared by offset-DPO (`timealign.train.dpo`) and TIMER SFT (`timealign.train.sft`).
"""

from __future__ import annotations

from typing import Any

from timealign.config.dtypes import torch_dtype

def resolve_base_model(name_or_path: str) -> str:
    """The folder or hub id to load; `tiny`/`tiny-agent` are built once, by the main process, while the others wait."""
    from accelerate import PartialState

    from timealign.tiny import resolve_model_path

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


def load_model(model_path: str, model):
    """The causal LM at `model_path` in the recipe's dtype and attention implementation. `model`: the recipe's model
    section."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=torch_dtype(model.dtype),
        attn_implementation=model.attn_implementation,
        trust_remote_code=model.trust_remote_code,
    )


def lora_config(lora, **extra: Any):
    """A causal-LM `peft.LoraConfig` from the recipe's lora section; `extra` adds LoraConfig fields (the TIMER
    tokens' trainable rows, for example)."""
    from peft import LoraConfig

    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules,
                      task_type="CAUSAL_LM", **extra)
