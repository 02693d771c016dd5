"""The LM head on the labelled positions only, for the shared layouts' forwards where TRL's fused head scores them all.

TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`, `model(..., fused_lm_head=True)`) projects only the
positions whose next-token label is not -100 on Triton devices (CUDA, XPU). Elsewhere, CPU included, it projects
every position and masks the results to 0 afterwards (fixed tile shapes keep compilers such as Neuron's from
recompiling). A shared-prompt row is mostly prompt: a TicToc v1 pair on smol (49,152 x 576 head) has ~460 prompt
tokens and ~80 completion tokens, so on CPU ~85% of the head's projection, log-softmax and backward is spent on
positions that are thrown away.

`forward` scores those rows the way TRL's compact (Triton-device) path does, on any device:

1. the model runs through its own forward and whatever wraps it (DDP, DeepSpeed, PEFT adapters) with an empty
   `logits_to_keep`, so its head projects nothing; a forward hook on the backbone TRL's head reads (`base_model` of the
   causal LM) keeps the final hidden states;
2. TRL's own kernel (`trl.kernels.ChunkedLogProbFunction`, the one its fused head calls) scores `hidden[labelled]`
   with the head's weight, and the per-token outputs are scattered back to `[rows, L-1]` with 0 elsewhere.

The result is TRL's `FusedCausalLMOutput`: the same per-token log-probs, entropy, mean logit and top-1 flags (to
float rounding: the projection's matrix shapes differ), the same gradients. `applies` says where this is used:
not where TRL already compacts (its path stays), and not for heads TRL transforms (softcapping, logit scaling),
which no model type of the shared layouts has.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["POLICY_OUTPUTS", "REFERENCE_OUTPUTS", "applies", "forward", "trl_compacts"]

# What DPOTrainer asks of the policy's fused head (its metrics read all four) and what the reference needs.
POLICY_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")
REFERENCE_OUTPUTS = ("log_probs",)
# TRL's fused head: vocabulary columns per projection tile (trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE)
VOCAB_CHUNK = 32768
# Config fields with which TRL's head scales or softcaps the logits (add_fused_lm_head); none is set on the shared
# layouts' model types, and a head that has one keeps TRL's path rather than a copy of TRL's rule.
HEAD_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


def trl_compacts(device: torch.device) -> bool:
    """Whether TRL's fused head itself projects only the labelled positions on `device`
    (trl.kernels.chunked_logprob._use_triton)."""
    from transformers.utils import is_triton_available

    return is_triton_available() and device.type in ("cuda", "xpu")


def causal_lm(unwrapped) -> Any:
    """The causal LM whose head TRL patched: under PEFT the base model inside the adapters."""
    from accelerate.utils import is_peft_model

    return unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped


def applies(unwrapped) -> bool:
    """Whether `forward` should score this (DDP/DeepSpeed-unwrapped) model's labelled positions: TRL's head would
    project every position on its device and applies no logit transform."""
    lm = causal_lm(unwrapped)
    config = lm.config.get_text_config()
    if any(getattr(config, name, None) is not None for name in HEAD_TRANSFORMS):
        return False
    return not trl_compacts(lm.get_output_embeddings().weight.device)


def forward(model, unwrapped, labels: torch.Tensor, outputs: tuple[str, ...], **inputs: Any):
    """`model(**inputs, labels=labels, fused_lm_head=True)` with only the labelled positions projected.

    `model` is what the trainer calls (possibly DDP/DeepSpeed-wrapped, possibly PEFT), `unwrapped` the same model
    without the distributed wrapper; `outputs`: the per-token fields to compute (`POLICY_OUTPUTS`,
    `REFERENCE_OUTPUTS`). Returns TRL's `FusedCausalLMOutput` (fields not asked for are None)."""
    from torch.distributed.tensor import DTensor
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import FusedCausalLMOutput, maybe_gather_lm_head_ctx

    lm = causal_lm(unwrapped)
    hidden = []
    # The backbone's output is the hidden state TRL's fused head projects (`backbone_outputs.last_hidden_state`).
    handle = lm.base_model.register_forward_hook(lambda _module, _args, out: hidden.append(out.last_hidden_state))
    try:
        # Through the wrapper: DDP's and DeepSpeed's forward bookkeeping and PEFT's adapters run as usual. No
        # position is projected by the model's own head (an empty index list), none is discarded.
        nothing = torch.empty(0, dtype=torch.long, device=labels.device)
        model(**inputs, use_cache=False, logits_to_keep=nothing)
    finally:
        handle.remove()
    if len(hidden) != 1:
        raise RuntimeError(f"the model's backbone ran {len(hidden)} times in one forward; expected once")

    head = lm.get_output_embeddings()
    weight, bias = head.weight, head.bias  # as TRL: the head's (base) weight, the LM head is read, not called
    hidden_states = hidden[0][:, :-1].to(weight.device)  # position t scores token t + 1
    labels = labels[:, 1:].to(weight.device)
    mask = labels != -100
    if isinstance(weight, DTensor):  # FSDP2: the full head, as TRL gathers it
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    with maybe_gather_lm_head_ctx(weight, bias):  # DeepSpeed ZeRO-3: the head's partitions, gathered
        per_token = ChunkedLogProbFunction.apply(
            hidden_states[mask], weight, bias, labels[mask], 1.0, VOCAB_CHUNK, None, 1.0, outputs
        )
    # As TRL's compact path: `masked_scatter` keeps an all-unlabelled batch connected to the model (a zero gradient).
    log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1 = (
        None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x) for x in per_token
    )
    return FusedCausalLMOutput(
        loss=-log_probs.sum() / mask.sum().clamp(min=1),
        log_probs=log_probs,
        entropy=entropy,
        log_sum_sq_probs=log_sum_sq_probs,
        mean_logits=mean_logits,
        is_top1=is_top1,
        label_mask=mask,
    )
