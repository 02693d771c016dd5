"""Carrying one extra dataset column through a TRL trainer's collator into every batch.

TRL's collators build each batch from the keys they know, so any other column is lost there. Both trainers here need
one more: `OffsetDPOTrainer` the per-pair ODPO offset (`margin`), `TimerSFTTrainer` the per-token `token_types`.

- `ColumnCollator` wraps the trainer's collator: it checks that every example has the column, collates the examples
  without it (the wrapped collator never sees the column, so one that pads every key cannot mangle it) and puts the
  column into the batch as a tensor. Subclasses say how the column is read and batched.
- `CarriesColumn` is the trainer mixin: it wraps whatever collator `Trainer.__init__` assigns (TRL's default or the
  user's), so the reference precompute that runs inside DPOTrainer's init already gets the column, and it keeps the
  column through `remove_unused_columns`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "TOKEN_TYPES",
    "CarriesColumn",
    "ColumnCollator",
    "OffsetPreferenceCollator",
    "TokenTypesCollator",
    "check_offsets",
]

TOKEN_TYPES = "token_types"  # the column of TIMER rows: 0 other, 1 time, 2 response token

Collator = Callable[[list[dict[str, Any]]], dict[str, Any]]


class ColumnCollator:
    """Wrap a collator so the column `column` reaches the batch; subclasses define `read` and `batched`."""

    label = "column"  # how error messages name the column's role

    def __init__(self, base: Collator, column: str):
        self.base = base
        self.column = column

    def read(self, examples: list[dict[str, Any]]) -> Any:
        """The column's values of this batch, checked (raise ValueError on bad values)."""
        raise NotImplementedError

    def batched(self, values: Any, batch: dict[str, Any]) -> torch.Tensor:
        """The values as one tensor for the collated `batch`."""
        raise NotImplementedError

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        missing = [i for i, ex in enumerate(examples) if self.column not in ex]
        if missing:
            raise ValueError(f"{self.label} '{self.column}' is missing from {len(missing)} example(s) of the batch")
        values = self.read(examples)
        batch = self.base([{k: v for k, v in ex.items() if k != self.column} for ex in examples])
        batch[self.column] = self.batched(values, batch)
        return batch

    def __getattr__(self, name: str) -> Any:
        # Delegate attribute reads (e.g. `pad_token_id`) to the wrapped collator. `__dict__` lookup keeps this safe
        # while unpickling in DataLoader workers, before `base` exists.
        base = self.__dict__.get("base")
        if base is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(base, name)


def check_offsets(values: torch.Tensor, column: str) -> None:
    """ODPO offsets must be finite and >= 0."""
    if torch.isnan(values).any() or torch.isinf(values).any():
        raise ValueError(f"Column '{column}' (ODPO offset) contains NaN/inf values.")
    if (values < 0).any():
        raise ValueError(
            f"Column '{column}' (ODPO offset) must be >= 0; got min {values.min().item():.6g}. "
            "A negative offset would reward the policy for preferring the rejected response."
        )


class OffsetPreferenceCollator(ColumnCollator):
    """The per-example ODPO offset as a float32 tensor `[B]` beside a preference collator's batch."""

    label = "ODPO offset column"

    def __init__(self, base: Collator, column: str = "margin"):
        super().__init__(base, column)

    def read(self, examples):
        try:
            offsets = torch.tensor([float(ex[self.column]) for ex in examples], dtype=torch.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(f"Column '{self.column}' (ODPO offset) must hold numbers: {err}") from err
        check_offsets(offsets, self.column)
        return offsets

    def batched(self, values, batch):
        return values


class TokenTypesCollator(ColumnCollator):
    """TIMER token types as a long tensor `[B, L]` beside a language-modeling batch, right-padded with 0 like
    labels."""

    label = "TIMER column"

    def __init__(self, base: Collator, column: str = TOKEN_TYPES):
        super().__init__(base, column)

    def read(self, examples):
        types = [list(ex[self.column]) for ex in examples]
        for i, (ex, t) in enumerate(zip(examples, types)):
            if len(t) != len(ex["input_ids"]):
                raise ValueError(f"example {i}: {len(t)} token types for {len(ex['input_ids'])} input ids")
        return types

    def batched(self, values, batch):
        padded = torch.zeros((len(values), batch["input_ids"].shape[1]), dtype=torch.long)
        for i, t in enumerate(values):
            padded[i, : len(t)] = torch.as_tensor(t, dtype=torch.long)
        return padded


class CarriesColumn:
    """Trainer mixin (listed before the TRL trainer class): every assigned collator is wrapped in `column_collator`,
    and `carried_column` survives `remove_unused_columns`. `carried_column` must be readable before the TRL
    trainer's `__init__` runs, since that is where the collator is assigned."""

    column_collator: type[ColumnCollator]
    carried_column: str

    @property
    def data_collator(self):
        return self.__dict__.get("_column_data_collator")

    @data_collator.setter
    def data_collator(self, collator):
        if collator is not None and not isinstance(collator, self.column_collator):
            collator = self.column_collator(self.adapt_collator(collator), self.carried_column)
        self.__dict__["_column_data_collator"] = collator

    def adapt_collator(self, collator: Collator) -> Collator:
        """The collator to wrap in place of `collator` (OffsetDPOTrainer: the shared-prompt layout's)."""
        return collator

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if self.carried_column not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, self.carried_column]
