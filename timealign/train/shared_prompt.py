"""Shared-prompt layout for offset-DPO: each pair's prompt goes through the model once for both completions.

TRL's `DataCollatorForPreference` builds the batch [prompt+chosen rows; prompt+rejected rows], so the prompt (a TicToc
trajectory, several times longer than the completions) runs through the policy twice and the reference twice. Here
each pair is ONE packed sequence, a two-branch tree:

    index      0 .. P-1        P .. P+C-1      P+C         P+C+1 .. P+C+R
    token      p_0 .. p_{P-1}  c_0 .. c_{C-1}  p_{P-1}     r_0 .. r_{R-1}
    position   0 .. P-1        P .. P+C-1      P-1         P .. P+R-1
    branch     PROMPT          CHOSEN          BRIDGE      REJECTED
    sees       prompt          prompt, chosen  prompt      prompt, rejected      (causally, never another pair)

- The BRIDGE is a copy of the last prompt token at the same position. It sees exactly the keys the original p_{P-1}
  sees (the prompt, not itself: attending to itself too would give p_{P-1}'s key twice), so at every layer its hidden
  state equals the original's and its next-token prediction is the one TRL makes for r_0. The rejected tokens see the
  prompt and their own branch (not the bridge, for the same reason). With these masks and positions every scored
  token sees exactly the keys, values and rotary positions it has in TRL's unshared row: the log-probs are the same
  numbers, computed from one prompt forward instead of two.
- Labels are the model's ordinary next-token labels: the input ids on CHOSEN and REJECTED tokens, -100 elsewhere. The
  label -100 on the bridge masks the one meaningless prediction (c_{C-1} -> bridge). TRL's fused LM head
  (`trl.trainer.utils.add_fused_lm_head`, `fused_lm_head=True`) scores the labelled positions: with Triton (CUDA,
  XPU) it projects only those through the LM head, so no prompt logits are computed. On CPU it would project every
  position (as it does for TRL's rows); there the trainer projects only the labelled ones itself
  (`timealign.train.compact_head`, the same numbers), so the prompt costs no LM head work on any device.
- A micro-batch is one row per pair, right-padded (pad tokens form their own causal block so no attention row is
  empty), or with `padding_free` one row holding every pair back to back (block-diagonal: pairs never see each other).

The model gets a 4D attention mask `[rows, 1, L, L]` built from two per-token id tensors (`pair_ids`, `branch_ids`)
right before each forward, on the model's device: boolean for sdpa, additive float for eager, and for
`model.attn_implementation=flex_attention` a block-sparse FlexAttention `BlockMask` from the same rule (`mask_mod`):
128 x 128 blocks that no query may see (the rejected branch against the chosen block, one pair against another,
padding) are skipped, not computed and masked, and the rest run without a dense L x L mask in memory (the layout of
Wang & Hegde 2024's prefix-sharing DPO). On a GPU that keeps attention on a fused kernel, where a dense mask takes
sdpa off its flash kernel. torch has no flex backward on CPU, so flex trains on GPUs only (a CPU forward is exact:
tests/test_shared_prompt.py). transformers 5 passes a 4D mask or BlockMask through untouched
(`masking_utils._preprocess_mask_arguments` returns it as is) for llama, mistral, ministral, qwen2 and qwen3
(`SUPPORTED_MODEL_TYPES`, each checked against unshared rows in tests/test_shared_prompt.py). Other attention
implementations (flash attention has no arbitrary mask), other architectures and sliding-window layers shorter than
the packed row are refused (`check_model`).

Packed on the block-sparse kernel (`padding_free` with flex_attention): the micro-batch's trees are one row and one
`BlockMask` (pairs never see each other, so most blocks are skipped), built once per batch (`PairTree._masks`) and
passed as the same object to every layer of the policy's forward and of the reference's; the same numbers as the
unpacked rows and TRL's (tests/test_shared_prompt.py, CPU forward in fp32). transformers compiles `flex_attention`
once per process (`integrations.flex_attention.WrappedFlexAttention`: `torch.compile(flex_attention)`, dynamic=None,
i.e. automatic dynamic shapes, re-wrapped when the module's training flag flips but read from the same compile cache).
Measured on CPU (torch 2.13, tiny model, forward, packed rows of 171, 246, 351, 471, 486, 621 tokens, the training
flag flipped three times among them): a graph for each of the first three lengths (static, then with the length
dynamic, then once more, by the look of it for the block count crossing 2), none after, for new lengths or either
flag; so no padding to buckets here. gpu-check records the graphs each
run compiles on a GPU (`compiled_graphs`).

TRL's per-row truncation (`max_length`, `truncation_mode`) is reproduced exactly where the two rows share their
prompt (always for keep_start; for keep_end only while neither row needs cutting) and refused otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from transformers.data.data_collator import DataCollatorMixin

from timealign.render.families import shared_prompt_model_types

__all__ = [
    "BRANCH",
    "PairTargets",
    "PairTree",
    "SharedPromptCollator",
    "check_model",
    "tree_attention_mask",
    "tree_block_mask",
]

PAD, PROMPT, CHOSEN, BRIDGE, REJECTED = -1, 0, 1, 2, 3
BRANCH = {"pad": PAD, "prompt": PROMPT, "chosen": CHOSEN, "bridge": BRIDGE, "rejected": REJECTED}

# Architectures whose decoder takes positions only from `position_ids` (rotary) and its mask only through
# `create_causal_mask` / `create_sliding_window_causal_mask` (a 4D mask passes untouched): checked in
# tests/test_shared_prompt.py against TRL's unshared rows.
# The model types of the registered families (timealign/render/families.py: each entry's `model_types`).
SUPPORTED_MODEL_TYPES = shared_prompt_model_types()
SUPPORTED_ATTENTION = ("sdpa", "eager", "flex_attention")
TREE_KEYS = ("pair_ids", "branch_ids", "position_ids")


@dataclass
class SharedPromptCollator(DataCollatorMixin):
    """Preference examples (`prompt_ids`, `chosen_ids`, `rejected_ids`, optional `ref_*_logps`) -> shared-prompt batch.

    Returns `input_ids`, `position_ids`, `pair_ids` (the pair's index in the micro-batch, -1 on padding) and
    `branch_ids` (`BRANCH`), all `[rows, L]`, plus `ref_chosen_logps` / `ref_rejected_logps` `[pairs]` when given.
    The fields mirror TRL's `DataCollatorForPreference`, whose truncation this reproduces.
    """

    pad_token_id: int
    max_length: int | None = None
    truncation_mode: str = "keep_start"
    pad_to_multiple_of: int | None = None
    padding_free: bool = False
    return_tensors: str = "pt"

    @classmethod
    def replacing(cls, collator: Any, padding_free: bool = False) -> SharedPromptCollator:
        """The shared-prompt collator with the settings of TRL's default collator `collator`."""
        from trl.trainer.dpo_trainer import DataCollatorForPreference

        if isinstance(collator, cls):
            if collator.padding_free != padding_free:
                raise ValueError(f"data_collator has padding_free={collator.padding_free}, the trainer {padding_free}")
            return collator
        if type(collator) is not DataCollatorForPreference:
            raise ValueError(
                f"dpo.shared_prompt replaces TRL's DataCollatorForPreference with the shared-prompt layout; got a "
                f"custom data_collator ({type(collator).__name__}). Pass data_collator=None, a SharedPromptCollator, "
                "or set dpo.shared_prompt=false (OffsetDPOTrainer(shared_prompt=False)) to keep TRL's layout."
            )
        return cls(
            pad_token_id=collator.pad_token_id,
            max_length=collator.max_length,
            truncation_mode=collator.truncation_mode,
            pad_to_multiple_of=collator.pad_to_multiple_of,
            padding_free=padding_free,
        )

    def truncate(self, index: int, prompt: list, chosen: list, rejected: list) -> tuple[list, list, list]:
        """TRL truncates prompt+chosen and prompt+rejected to max_length separately; the same cut, on shared
        prompts."""
        limit = self.max_length
        if limit is None:
            return prompt, chosen, rejected
        if self.truncation_mode == "keep_start":  # seq[:limit]: the prompt is cut the same way in both rows
            room = max(0, limit - len(prompt))
            return prompt[:limit], chosen[:room], rejected[:room]
        if self.truncation_mode == "keep_end":  # seq[-limit:]: each row loses its own number of prompt tokens
            if len(prompt) + max(len(chosen), len(rejected)) <= limit:
                return prompt, chosen, rejected
            raise ValueError(
                f"pair {index} of the batch: prompt {len(prompt)} + chosen {len(chosen)} / rejected {len(rejected)} "
                f"tokens exceed max_length {limit} with truncation_mode='keep_end', which cuts each row's prompt "
                "differently, so the two completions no longer share one prompt. Fit the pairs to max_length "
                "(data.overlength), use truncation_mode='keep_start', or set dpo.shared_prompt=false."
            )
        raise ValueError(f"Unsupported truncation mode: {self.truncation_mode}, expected 'keep_start' or 'keep_end'")

    def pair(self, index: int, example: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
        """(tokens, positions, branches) of one pair's tree."""
        prompt, chosen, rejected = self.truncate(
            index, list(example["prompt_ids"]), list(example["chosen_ids"]), list(example["rejected_ids"])
        )
        n = len(prompt)
        if n == 0:
            raise ValueError(
                f"pair {index} of the batch has an empty prompt: the shared-prompt layout needs at least "
                "one prompt token (set dpo.shared_prompt=false for such data)"
            )
        tokens = prompt + chosen + [prompt[-1]] + rejected
        positions = [*range(n + len(chosen)), n - 1, *range(n, n + len(rejected))]
        branches = [PROMPT] * n + [CHOSEN] * len(chosen) + [BRIDGE] + [REJECTED] * len(rejected)
        return tokens, positions, branches

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        trees = [self.pair(i, ex) for i, ex in enumerate(examples)]
        rows = []  # (tokens, positions, branches, pair ids) per row
        for i, (tokens, positions, branches) in enumerate(trees):
            rows.append((tokens, positions, branches, [i] * len(tokens)))
        if self.padding_free:
            rows = [tuple(list(itertools.chain.from_iterable(row[k] for row in rows)) for k in range(4))]
        length = max(len(row[0]) for row in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of

        def padded(k: int, value: int) -> torch.Tensor:
            return torch.tensor([row[k] + [value] * (length - len(row[k])) for row in rows], dtype=torch.long)

        out = {
            "input_ids": padded(0, self.pad_token_id),
            "position_ids": padded(1, 0),
            "branch_ids": padded(2, PAD),
            "pair_ids": padded(3, -1),
        }
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                out[key] = torch.tensor([ex[key] for ex in examples])
        return out


def tree_visible(q_pair, k_pair, q_branch, k_branch, q_index, k_index):
    """The tree rule, elementwise: may a query token attend to a key token (see the module docstring)?

    Padding (pair -1, branch PAD) forms one causal block of its own. Shared by the dense mask and flex's mask_mod."""
    visible = (k_branch == PROMPT) | ((k_branch == q_branch) & (k_branch != BRIDGE))
    return (q_pair == k_pair) & (q_index >= k_index) & visible


def tree_attention_mask(pair_ids: torch.Tensor, branch_ids: torch.Tensor) -> torch.Tensor:
    """`[rows, 1, L, L]` boolean, True where query token q may attend to key token k (see the module docstring)."""
    idx = torch.arange(pair_ids.size(1), device=pair_ids.device)
    return tree_visible(
        pair_ids[:, :, None],
        pair_ids[:, None, :],
        branch_ids[:, :, None],
        branch_ids[:, None, :],
        idx[:, None],
        idx[None, :],
    )[:, None]


def tree_block_mask(pair_ids: torch.Tensor, branch_ids: torch.Tensor):
    """The same rule as a FlexAttention `BlockMask` `[rows, 1, L, L]` (block-sparse; `model.attn_implementation=
    flex_attention`)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):
        return tree_visible(pair_ids[b, q], pair_ids[b, k], branch_ids[b, q], branch_ids[b, k], q, k)

    rows, length = pair_ids.shape
    return create_block_mask(mask_mod, B=rows, H=None, Q_LEN=length, KV_LEN=length, device=pair_ids.device)


class PairTargets:
    """Per-pair sums over the scored positions of a shared layout's batch: a subclass sets `num_pairs` and, per
    per-token output position (which scores the next token), `target_pair` (its pair, or -1), `target_chosen` and
    `target_rejected` (booleans)."""

    num_pairs: int
    target_pair: torch.Tensor
    target_chosen: torch.Tensor
    target_rejected: torch.Tensor

    def pair_sums(self, per_token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum a `[rows, L-1]` per-token value over each pair's chosen and over its rejected tokens ->
        two `[pairs]`."""
        per_token = per_token[:, -self.target_pair.size(1) :]

        def total(which: torch.Tensor) -> torch.Tensor:
            out = per_token.new_zeros(self.num_pairs)
            return out.index_add(0, self.target_pair[which], per_token[which])

        return total(self.target_chosen), total(self.target_rejected)


class PairTree(PairTargets):
    """One shared-prompt batch on its device: the model's inputs and labels, and per-pair sums of per-token values."""

    def __init__(self, batch: dict[str, Any]):
        missing = [k for k in ("input_ids", *TREE_KEYS) if k not in batch]
        if missing:
            raise ValueError(
                f"not a shared-prompt batch (missing {missing}): the data collator must be "
                "SharedPromptCollator when shared_prompt is on"
            )
        self.input_ids = batch["input_ids"]
        self.position_ids = batch["position_ids"]
        self.pair_ids = batch["pair_ids"]
        self.branch_ids = batch["branch_ids"]
        self.num_pairs = int(self.pair_ids.max().item()) + 1
        self.completion = (self.branch_ids == CHOSEN) | (self.branch_ids == REJECTED)
        # Per-token model outputs are for the next token: position t scores token t + 1.
        self.target_pair = self.pair_ids[:, 1:]
        self.target_chosen = self.branch_ids[:, 1:] == CHOSEN
        self.target_rejected = self.branch_ids[:, 1:] == REJECTED
        self._masks: dict[tuple[str, torch.dtype], Any] = {}  # (attention implementation, dtype) -> its mask

    @property
    def labels(self) -> torch.Tensor:
        return self.input_ids.masked_fill(~self.completion, -100)

    def model_inputs(self, attn_implementation: str, dtype: torch.dtype) -> dict[str, Any]:
        """The model's inputs. The mask is built once per batch: the policy's forward and the reference's (and every
        layer of each) share it."""
        if attn_implementation == "flex_attention" and self.input_ids.device.type == "cpu" and torch.is_grad_enabled():
            raise ValueError(
                "model.attn_implementation=flex_attention: torch has no FlexAttention backward on "
                "CPU; train with sdpa on CPU (flex is for GPUs)"
            )
        key = (attn_implementation, dtype)
        if key not in self._masks:
            self._masks[key] = self._mask(attn_implementation, dtype)
        return {"input_ids": self.input_ids, "attention_mask": self._masks[key], "position_ids": self.position_ids}

    def _mask(self, attn_implementation: str, dtype: torch.dtype):
        if attn_implementation == "flex_attention":
            return tree_block_mask(self.pair_ids, self.branch_ids)
        mask = tree_attention_mask(self.pair_ids, self.branch_ids)
        if attn_implementation == "eager":  # eager adds the mask to the scores; sdpa takes booleans
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        return mask

    def unshared_token_count(self) -> torch.Tensor:
        """Tokens of TRL's unshared rows (prompt twice, each completion once): `num_tokens` stays comparable."""
        return 2 * (self.branch_ids == PROMPT).sum() + self.completion.sum()


def _uses_sliding_window(config) -> bool:
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return any(t != "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def check_model(config, row_length: int | None = None) -> None:
    """Refuse a model on which the 4D tree mask would not give TRL's numbers (`row_length`: per batch, for windows)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    attn = getattr(config, "_attn_implementation", None)
    if attn not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"dpo.shared_prompt needs a custom 4D attention mask, which model.attn_implementation={attn!r} does not "
            f"take; set model.attn_implementation to one of {', '.join(SUPPORTED_ATTENTION)}, or "
            "dpo.shared_prompt=false (TRL's unshared layout, any attention implementation)."
        )
    supported = shared_prompt_model_types()  # read at each check: a family registered later counts
    if config.model_type not in supported:
        raise ValueError(
            f"dpo.shared_prompt is verified for model types {', '.join(supported)}; this model is "
            f"{config.model_type!r}. Set dpo.shared_prompt=false (TRL's unshared layout)."
        )
    if row_length is not None and _uses_sliding_window(config) and row_length > config.sliding_window:
        raise ValueError(
            f"dpo.shared_prompt: a packed row of {row_length} tokens is longer than the model's sliding window "
            f"({config.sliding_window}), which the 4D mask does not apply. Use shorter micro-batches (padding_free "
            "packs the whole micro-batch into one row) or dpo.shared_prompt=false."
        )
