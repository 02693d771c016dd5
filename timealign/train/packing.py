"""Packing TIMER rows: several featurized dialogs share one training row, with their time-token mask.

TRL's own packing (`SFTTrainer._prepare_dataset` with `packing=True`) selects `input_ids` and `labels` before
`trl.pack_dataset`, so the per-token `token_types` (0 other, 1 time, 2 response) would be lost. Here the same
`trl.pack_dataset` (best-fit decreasing, `seq_lengths` per packed row) packs all three columns together, so every
token keeps its type, label and id at the same offset.

Two batch layouts, both exact (attention stays inside each dialog, positions restart at 0 per dialog):
- "flat" (flash attention): TRL's padding-free collator flattens the batch's packed rows into one row with
  `position_ids` and the varlen boundaries (`cu_seq_lens_*`); the flash kernels attend per dialog. Flash attention's
  varlen path takes one flattened row only (`modeling_flash_attention_utils._is_packed_sequence`).
- "rows" (sdpa, eager, flex): the packed rows stay rows (right-padded to the batch's longest), with `position_ids`
  restarting per dialog and no `attention_mask`; transformers then builds a block-diagonal causal mask per row from
  the position ids (`masking_utils.find_packed_sequence_indices`; padding tokens have position 0, so each is its
  own one-token block, and their labels are -100). Flattening instead would make the sdpa/eager mask and attention
  quadratic in the whole batch's tokens rather than in one row's.
In both, each dialog's first label is -100 (as TRL's padding-free collator does), so the last token of one dialog is
never trained to predict the first of the next; in an unpacked row that label is never used either (position j
predicts token j + 1).

`PackedTokenTypesCollator` builds the batch around TRL's collator and carries `token_types` into it in the same
layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from timealign.train.collators import TOKEN_TYPES, TokenTypesCollator

__all__ = [
    "LAYOUTS",
    "PACKED_COLUMNS",
    "PACKED_TOKENS",
    "PACKING_STRATEGIES",
    "PackedTokenTypesCollator",
    "check_packing_strategy",
    "pack_timer_rows",
    "packed_layout",
    "padding_stats",
]

PACKED_COLUMNS = ("input_ids", "labels", TOKEN_TYPES)
# bfd: whole dialogs per row (featurize already shortened every row to max_length, so bfd_split never splits one).
# TRL's "wrapped" cuts dialogs at row edges and is refused.
PACKING_STRATEGIES = ("bfd", "bfd_split")


def check_packing_strategy(strategy: str) -> None:
    if strategy not in PACKING_STRATEGIES:
        raise ValueError(
            f"TIMER packing supports packing_strategy {' or '.join(PACKING_STRATEGIES)}, got "
            f"{strategy!r} ('wrapped' cuts dialogs at row edges and mixes their positions)"
        )


def pack_timer_rows(dataset, max_length: int, strategy: str = "bfd", map_kwargs: dict | None = None):
    """Featurized TIMER rows -> packed rows of at most `max_length` tokens with `input_ids`, `labels`,
    `token_types` and `seq_lengths` (the lengths of the dialogs in the row, in order)."""
    from trl.data_utils import pack_dataset

    check_packing_strategy(strategy)
    if max_length is None or max_length < 1:
        raise ValueError(f"packing needs max_length >= 1 (training.max_length), got {max_length}")
    names = dataset.column_names
    if names is None:
        names = list(next(iter(dataset)).keys())
    missing = [c for c in PACKED_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"cannot pack TIMER rows without {missing}; columns: {sorted(names)}")
    return pack_dataset(dataset.select_columns(list(PACKED_COLUMNS)), max_length, strategy, dict(map_kwargs or {}))


PACKED_TOKENS = "packed_tokens"  # "rows" layout: the batch's real (non-padding) tokens, for TRL's num_tokens metric
LAYOUTS = ("flat", "rows")


def packed_layout(model) -> str:
    """ "flat" for flash attention (its varlen path needs one flattened row), "rows" for every other implementation."""
    from transformers.utils.generic import is_flash_attention_requested

    config = getattr(model, "config", None)
    return "flat" if config is not None and is_flash_attention_requested(config) else "rows"


class PackedTokenTypesCollator(TokenTypesCollator):
    """`TokenTypesCollator` for packed rows too: `layout` "flat" when the wrapped (TRL) collator is padding-free,
    "rows" when it pads (then position ids per dialog replace the attention mask). Unpacked rows (no `seq_lengths`)
    are collated as `TokenTypesCollator` does."""

    layout = "flat"

    def __call__(self, examples):
        if self.layout != "rows" or "seq_lengths" not in examples[0]:
            return super().__call__(examples)
        if getattr(self.base, "padding_free", False):
            raise ValueError("the 'rows' packed layout needs a padding (not padding-free) base collator")
        lengths = [list(ex["seq_lengths"]) for ex in examples]
        batch = super().__call__([{k: v for k, v in ex.items() if k != "seq_lengths"} for ex in examples])
        width = batch["input_ids"].shape[1]
        position_ids = torch.zeros((len(examples), width), dtype=torch.long)
        for i, row in enumerate(lengths):
            if sum(row) != len(examples[i]["input_ids"]):
                raise ValueError(
                    f"example {i}: seq_lengths {row} do not add up to {len(examples[i]['input_ids'])} input ids"
                )
            position_ids[i, : sum(row)] = torch.cat([torch.arange(n) for n in row])
        batch["labels"] = batch["labels"].masked_fill(position_ids == 0, -100)  # each dialog's first token
        batch["position_ids"] = position_ids
        # Without a 2D attention mask transformers reads the dialog blocks from position_ids (padding: position 0).
        batch[PACKED_TOKENS] = batch.pop("attention_mask").sum()
        return batch

    def batched(self, values, batch):
        if not getattr(self.base, "padding_free", False):
            return super().batched(values, batch)
        flat = torch.as_tensor([t for row in values for t in row], dtype=torch.long)
        width = batch["input_ids"].shape[1]  # the collator may pad the flattened row (pad_to_multiple_of)
        if flat.numel() > width:
            raise ValueError(f"{flat.numel()} token types for a flattened batch of {width} input ids")
        out = torch.zeros((1, width), dtype=torch.long)
        out[0, : flat.numel()] = flat
        return out


def padding_stats(lengths: Sequence[int], batch_size: int, padding_free: bool = False) -> dict:
    """Tokens and padding of consecutive batches of `batch_size` rows of `lengths` tokens, as the TRL collator builds
    them: right-padded to the batch's longest row, or (padding_free) flattened into one row with no padding."""
    real = padded = 0
    for start in range(0, len(lengths), batch_size):
        chunk = lengths[start : start + batch_size]
        real += sum(chunk)
        padded += sum(chunk) if padding_free else max(chunk) * len(chunk)
    return {
        "rows": len(lengths),
        "batches": -(-len(lengths) // batch_size),
        "tokens": real,
        "slots": padded,
        "padding_share": (padded - real) / padded if padded else 0.0,
    }
