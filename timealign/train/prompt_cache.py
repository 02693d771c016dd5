"""Prompt-cache layout for offset-DPO (`dpo.prompt_cache`): each pair's prompt runs once as a plain causal forward, and
both completions continue from its key/value cache. No tree mask: every attention call is an ordinary causal one.

The tree layout (`timealign.train.shared_prompt`) shares the prompt through a custom [L x L] mask, which takes sdpa
off its fused kernels on a GPU. Here a micro-batch of N pairs is two forwards:

    forward 1 (prompt)       N rows    p_0 .. p_{P-2}                positions 0 .. P-2          left-padded
    forward 2 (completions)  2N rows   p_{P-1} c_0 .. c_{C-1}        positions P-1 .. P-1+C      right-padded
                                       p_{P-1} r_0 .. r_{R-1}        positions P-1 .. P-1+R

- Forward 1 returns the model's `DynamicCache` (use_cache=True, `logits_to_keep=1`: no prompt logits beyond one
  position). Its keys and values are repeated for the two branches (`batch_repeat_interleave(2)`: rows 2i and 2i+1
  are pair i's chosen and rejected) and forward 2 attends to them. Nothing is detached: the completions' gradients
  flow through the cached keys and values into forward 1, summed over both branches, as in TRL's two rows.
- The first completion token is predicted from the prompt's last position. Rather than reading that prediction off
  forward 1's logits, the last prompt token starts each completion row (as the tree's BRIDGE does): it sees exactly
  the keys it has in the prompt (p_0 .. p_{P-2} from the cache, and itself), at its own position, so its next-token
  prediction is the one TRL makes for c_0 and r_0. All scored tokens then go through TRL's fused LM head in one call
  (`fused_lm_head=True`: `log_probs`, `entropy`, `mean_logits`, `is_top1` for TRL's metrics), at the cost of one
  extra token per completion row. Where TRL's head would project every position (CPU), the trainer scores only the
  labelled ones (`timealign.train.compact_head`: here that skips the completion rows' padding and leading token).
- Prompts of different lengths: forward 1's rows are left-padded, so every prompt ends at the same index and each
  completion row's keys are [pad .. prompt | completion]. The 2D attention masks (prompt padding, completion padding)
  go to transformers, which builds the causal masks with the cache offset; positions come from `position_ids`
  (rotary), so padding never shifts them, and a sliding window (index distance) is the position distance too. A
  micro-batch whose prompts all have the same length has no padding mask in forward 1, which then takes sdpa's plain
  causal path (flash kernel on a GPU); forward 2 always carries a mask (the queries start after the cache). The
  padding costs compute in proportion to the spread of prompt lengths in a micro-batch (group_by_length shrinks it).
- Labels: the completion tokens, -100 on the leading prompt token and on padding.

Verified (tests/test_prompt_cache.py) for the shared layout's model types with sdpa and eager attention: per-pair
log-probs, loss, every gradient and every metric equal TRL's unshared rows and the tree layout. Refused
(`check_model`): other attention implementations (flex_attention: torch's CPU inductor fails on a cached forward, so
it is untested; flash attention: no CPU to verify it on) and gradient checkpointing, under which transformers drops
the cache (`GradientCheckpointingLayer`: forward 2 would silently not see the prompt), as well as FSDP's activation
checkpointing (a layer recomputed in the backward would append its keys to the cache a second time).

transformers internals relied on (re-check on an upgrade): a decoder called with use_cache=True returns its
`DynamicCache`; `Cache.batch_repeat_interleave`; a cache passed with use_cache=False (TRL's fused head forces that) is
still read and appended to by every attention layer, and `create_causal_mask` offsets the causal mask by its length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from timealign.render.families import shared_prompt_model_types
from timealign.train.shared_prompt import PairTargets, SharedPromptCollator

__all__ = [
    "CACHE_KEYS",
    "CHECKPOINTING_REFUSAL",
    "PADDING_FREE_REFUSAL",
    "CachedPairs",
    "PromptCacheCollator",
    "check_model",
]

SUPPORTED_ATTENTION = ("sdpa", "eager")
CACHE_KEYS = (
    "prompt_input_ids",
    "prompt_attention_mask",
    "prompt_position_ids",
    "completion_input_ids",
    "completion_attention_mask",
    "completion_position_ids",
)
PADDING_FREE_REFUSAL = (
    "dpo.prompt_cache and dpo.padding_free are two layouts of the shared prompt: set dpo.padding_free=false "
    "(or dpo.prompt_cache=false)"
)
CHECKPOINTING_REFUSAL = (
    "dpo.prompt_cache: transformers drops the prompt's key/value cache under gradient checkpointing (and a "
    "recomputed layer would append to it again); set training.gradient_checkpointing=false (and "
    "fsdp_activation_checkpointing: false in the accelerate config), or dpo.prompt_cache=false"
)


@dataclass
class PromptCacheCollator(SharedPromptCollator):
    """Preference examples -> the two forwards' inputs (`CACHE_KEYS`, module docstring), plus `ref_chosen_logps` /
    `ref_rejected_logps` `[pairs]` when given. Truncation as `SharedPromptCollator` (TRL's, refused where the two
    rows would not share their prompt)."""

    def __post_init__(self):
        if self.padding_free:
            raise ValueError(PADDING_FREE_REFUSAL)

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        pairs = []
        for i, example in enumerate(examples):
            prompt, chosen, rejected = self.truncate(
                i, list(example["prompt_ids"]), list(example["chosen_ids"]), list(example["rejected_ids"])
            )
            if not prompt:
                raise ValueError(
                    f"pair {i} of the batch has an empty prompt: the shared-prompt layout needs at least "
                    "one prompt token (set dpo.shared_prompt=false for such data)"
                )
            pairs.append((prompt, chosen, rejected))

        def width(n: int) -> int:
            multiple = self.pad_to_multiple_of
            return -(-n // multiple) * multiple if multiple and n else n

        prompt_width = width(max(len(p) - 1 for p, _, _ in pairs))
        prompt = torch.full((len(pairs), prompt_width), self.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros_like(prompt)
        prompt_positions = torch.zeros_like(prompt)
        rows = []  # (tokens, positions): chosen and rejected row of each pair, in turn
        for i, (p, chosen, rejected) in enumerate(pairs):
            n = len(p) - 1  # every prompt token but the last, which starts both completion rows
            if n:
                prompt[i, prompt_width - n :] = torch.tensor(p[:-1])
                prompt_mask[i, prompt_width - n :] = 1
                prompt_positions[i, prompt_width - n :] = torch.arange(n)
            for completion in (chosen, rejected):
                rows.append(([p[-1], *completion], list(range(n, n + 1 + len(completion)))))
        completion_width = width(max(len(tokens) for tokens, _ in rows))
        completion = torch.full((len(rows), completion_width), self.pad_token_id, dtype=torch.long)
        completion_mask = torch.zeros_like(completion)
        completion_positions = torch.zeros_like(completion)
        for r, (tokens, positions) in enumerate(rows):
            completion[r, : len(tokens)] = torch.tensor(tokens)
            completion_mask[r, : len(tokens)] = 1
            completion_positions[r, : len(tokens)] = torch.tensor(positions)
        out = dict(
            zip(
                CACHE_KEYS,
                (prompt, prompt_mask, prompt_positions, completion, completion_mask, completion_positions),
            )
        )
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                out[key] = torch.tensor([ex[key] for ex in examples])
        return out


class CachedPairs(PairTargets):
    """One prompt-cache batch on its device: the two forwards, and per-pair sums of per-token values
    (`shared_prompt.PairTargets`, as `PairTree`); with `unshared_token_count` the interface of `PairTree`, so the
    trainer's loss and metrics read either layout the same way."""

    def __init__(self, batch: dict[str, Any]):
        missing = [k for k in CACHE_KEYS if k not in batch]
        if missing:
            raise ValueError(
                f"not a prompt-cache batch (missing {missing}): the data collator must be "
                "PromptCacheCollator when dpo.prompt_cache is on"
            )
        (
            self.prompt_ids,
            self.prompt_mask,
            self.prompt_positions,
            self.input_ids,
            self.completion_mask,
            self.position_ids,
        ) = (batch[k] for k in CACHE_KEYS)
        self.num_pairs = self.prompt_ids.size(0)
        labels = self.input_ids.masked_fill(self.completion_mask == 0, -100)
        labels[:, 0] = -100  # the last prompt token: it predicts the first completion token, it is not scored
        self.labels = labels
        # Per-token model outputs are for the next token: position t scores token t + 1.
        scored = labels[:, 1:] != -100
        row = torch.arange(labels.size(0), device=labels.device)[:, None]
        self.target_pair = torch.where(scored, row // 2, -1)
        self.target_chosen = scored & (row % 2 == 0)
        self.target_rejected = scored & (row % 2 == 1)

    @property
    def row_length(self) -> int:
        """Keys the completion forward attends over: the (padded) cached prompt and the completion rows."""
        return self.prompt_ids.size(1) + self.input_ids.size(1)

    def forward(self, model, **kwargs) -> Any:
        """Prompt forward (cache), then the completion rows from the cache through TRL's fused LM head."""
        # The fused head runs the backbone with use_cache=False; a cache passed in is still read (and appended to).
        return model(**self.completion_inputs(model), labels=self.labels, fused_lm_head=True, **kwargs)

    def completion_inputs(self, model) -> dict[str, Any]:
        """Run the prompt forward; the completion forward's inputs (`past_key_values`: the prompt's cache, repeated
        for both branches), to be scored with `labels` by an LM head (TRL's fused one, or `compact_head`)."""
        cache = None
        if self.prompt_ids.size(1) > 0:  # every pair's prompt is one token long: nothing to cache
            prompt = model(
                input_ids=self.prompt_ids,
                attention_mask=self.prompt_mask,
                position_ids=self.prompt_positions,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = prompt.past_key_values
            if cache is None or cache.get_seq_length() != self.prompt_ids.size(1):
                raise RuntimeError(
                    "dpo.prompt_cache: the model returned no key/value cache of the prompt (gradient "
                    "checkpointing on?); set dpo.prompt_cache=false"
                )
            cache.batch_repeat_interleave(2)  # rows 2i, 2i+1: pair i's chosen and rejected branch
        mask = torch.cat([self.prompt_mask.repeat_interleave(2, dim=0), self.completion_mask], dim=1)
        return {
            "input_ids": self.input_ids,
            "attention_mask": mask,
            "position_ids": self.position_ids,
            "past_key_values": cache,
        }

    def unshared_token_count(self) -> torch.Tensor:
        """Tokens of TRL's unshared rows (prompt twice, each completion once): `num_tokens` stays comparable. The
        last prompt token is in both completion rows, the rest of the prompt in forward 1."""
        return 2 * self.prompt_mask.sum() + self.completion_mask.sum()


def check_model(model_or_config, training: bool = False) -> None:
    """Refuse a model on which the cached layout would not give TRL's numbers. `model_or_config`: a (plain, unwrapped)
    model, whose gradient checkpointing is then checked too when `training`, or its config."""
    config = getattr(model_or_config, "config", model_or_config)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    attn = getattr(config, "_attn_implementation", None)
    if attn not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"dpo.prompt_cache is verified with model.attn_implementation {' or '.join(SUPPORTED_ATTENTION)}, not "
            f"{attn!r}; set model.attn_implementation=sdpa, or dpo.prompt_cache=false (the tree-mask layout)"
        )
    supported = shared_prompt_model_types()
    if config.model_type not in supported:
        raise ValueError(
            f"dpo.prompt_cache is verified for model types {', '.join(supported)}; this model is "
            f"{config.model_type!r}. Set dpo.prompt_cache=false."
        )
    if training and getattr(model_or_config, "is_gradient_checkpointing", False):
        raise ValueError(CHECKPOINTING_REFUSAL)
