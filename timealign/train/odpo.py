"""DPO with a per-example offset (ODPO, Amini et al. 2024), as used by TicToc (Appendix D.2).

    loss_i = -log sigmoid( beta * (logratio_chosen_i - logratio_rejected_i) - delta_i )
    logratio = log pi_policy(y|x) - log pi_ref(y|x), summed over the completion tokens

with delta_i >= 0 read from a dataset column (default `margin`; TicToc uses delta = |S - 1.5|).

Route. TRL 1.16 computes the DPO loss inline in `DPOTrainer._compute_loss` and has no per-example offset. Rather than
copy that ~300-line method, we use the identity

    beta * (lr_w - lr_l) - delta == beta * ((lr_w - delta / beta) - lr_l),

i.e. the offset is exactly a shift of the chosen *reference* log-prob by +delta/beta. `_compute_loss` below obtains
the true reference log-probs (precomputed column, or TRL's own `compute_ref_log_probs` on the fly), shifts the chosen
ones, and hands them to TRL's `_compute_loss` through its precomputed-reference branch. The loss, backward, MoE aux
loss and every metric TRL logs therefore stay TRL's own. The shift would corrupt the logged rewards, so the
per-example policy log-probs are read off the policy's forward output (a forward hook: the same tensor TRL sums) and
`rewards/chosen|rejected|margins|accuracies` are rewritten with the true, un-shifted values. Two metrics are added:
`offset/mean` and `rewards/margin_above_offset` (fraction of pairs with beta * (lr_w - lr_l) > delta).

The identity is exact only for loss_type "sigmoid" with the reverse-KL score, plain summed log-probs (no `ld_alpha`),
no WPO weighting and no label smoothing; everything else is refused at construction.

The offset must also survive the data path: it is kept as a signature column (so `remove_unused_columns` keeps it),
carried through the collator by a wrapper (`timealign.train.collators`; TRL's `DataCollatorForPreference` drops
unknown keys), left untouched by the reference precompute (which only appends columns), and stripped before every
model forward, including `compute_ref_log_probs`. Caveat: under DeepSpeed, `Trainer._prepare_input` casts floating
batch tensors to the DeepSpeed dtype, so delta is then rounded to bf16 (relative error <= 2**-9), like TRL's
precomputed log-probs.

TRL internals relied on (re-check on a TRL upgrade): `DPOTrainer._compute_loss` (reads `inputs["ref_chosen_logps"]`
/ `["ref_rejected_logps"]` when `self.precompute_ref_logps`; logs `rewards/*` by appending one value per call to
`self._metrics[mode]`; calls `model(..., fused_lm_head=True)` once for the policy and reads `.log_probs`),
`compute_ref_log_probs`, `_set_signature_columns_if_needed`, `_precompute_ref_logps` (uses `self.data_collator`),
and the attributes `beta`, `precompute_ref_logps`, `ref_model`, `loss_types`, `_metrics`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from trl import DPOConfig, DPOTrainer

from timealign.train.collators import CarriesColumn, OffsetPreferenceCollator, check_offsets

__all__ = ["OffsetDPOTrainer"]


class OffsetDPOTrainer(CarriesColumn, DPOTrainer):
    """`trl.DPOTrainer` with the ODPO per-example offset: loss = -logsigmoid(beta * (lr_w - lr_l) - delta).

    Args: those of `trl.DPOTrainer`, plus
        margin_column: dataset column holding delta (float, >= 0). A train/eval dataset without it raises
            `ValueError` (no silent fallback to delta = 0: a missing offset would silently turn ODPO into plain DPO).

    Datasets: TRL's standard preference layout (`prompt`, `chosen`, `rejected` strings, or conversational) plus the
    offset column; other columns are dropped by `remove_unused_columns` or ignored by the collator.
    """

    _tag_names = ["trl", "dpo", "odpo"]

    def __init__(self, *args: Any, margin_column: str = "margin", **kwargs: Any):
        # Set before DPOTrainer.__init__: the collator setter, the dataset precompute and the signature columns
        # all need it during construction.
        self.margin_column = margin_column
        bound = _bind_dpo_args(args, kwargs)
        if bound.get("args") is not None:
            _check_loss_config(bound["args"])
        if bound.get("train_dataset") is not None:
            _check_margin_column(bound["train_dataset"], margin_column, "train")
        eval_dataset = bound.get("eval_dataset")
        if eval_dataset is not None:
            items = eval_dataset.items() if isinstance(eval_dataset, dict) else [("eval", eval_dataset)]
            for name, dataset in items:
                _check_margin_column(dataset, margin_column, name)
        super().__init__(*args, **kwargs)
        _check_loss_config(self.args)  # covers args=None (TRL's default config)

    # The offset column rides through the collator (`OffsetPreferenceCollator`, wrapped at assignment, so the reference
    # precompute inside DPOTrainer.__init__ already sees it) and through `remove_unused_columns` (`CarriesColumn`).
    column_collator = OffsetPreferenceCollator

    @property
    def carried_column(self) -> str:
        return self.margin_column

    def compute_ref_log_probs(self, model, inputs):
        # TRL forwards every batch key except a fixed set to the model; the offset must not be one of them.
        inputs = {k: v for k, v in inputs.items() if k != self.margin_column}
        return super().compute_ref_log_probs(model, inputs)

    def _compute_loss(self, model, inputs, return_outputs):
        inputs = dict(inputs)
        if self.margin_column not in inputs:
            raise ValueError(
                f"Batch has no '{self.margin_column}' offsets. A custom data collator or column removal dropped it."
            )
        offsets = inputs.pop(self.margin_column)  # popped: TRL would otherwise pass it to the model's forward

        # True reference log-probs: precomputed column, or TRL's own reference forward (ref model, or the PEFT base
        # with adapters disabled), which handles the same cases as TRL's inline reference path.
        if self.precompute_ref_logps:
            ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            ref_chosen, ref_rejected = self.compute_ref_log_probs(
                self.ref_model if self.ref_model is not None else self.model, inputs
            )
        ref_chosen, ref_rejected = ref_chosen.float(), ref_rejected.float()
        offsets = offsets.to(device=ref_chosen.device, dtype=torch.float32)

        # beta*(lr_w - lr_l) - delta == beta*((policy_w - (ref_w + delta/beta)) - lr_l): shift the chosen reference.
        # float32 so a large |log-prob| does not swallow the shift.
        inputs["ref_chosen_logps"] = ref_chosen + offsets / self.beta
        inputs["ref_rejected_logps"] = ref_rejected

        captured: list[Any] = []
        handle = model.register_forward_hook(lambda _m, _a, out: captured.append(out) if not captured else None)
        use_batch_refs = self.precompute_ref_logps
        self.precompute_ref_logps = True  # route TRL to the reference log-probs we just put in the batch
        try:
            result = super()._compute_loss(model, inputs, return_outputs)
        finally:
            self.precompute_ref_logps = use_batch_refs
            handle.remove()

        self._log_true_rewards(captured, inputs["completion_mask"], ref_chosen, ref_rejected, offsets)
        return result

    @torch.no_grad()
    def _log_true_rewards(self, captured, completion_mask, ref_chosen, ref_rejected, offsets) -> None:
        """Overwrite the reward metrics TRL just logged (computed on the shifted reference) with the true ones."""
        mode = "train" if self.model.training else "eval"
        log_probs = getattr(captured[0], "log_probs", None) if captured else None
        if log_probs is None:
            raise RuntimeError("OffsetDPOTrainer could not read the policy's per-token log-probs (TRL change?).")
        seq_len = completion_mask.size(1) - 1
        # Same reduction as TRL's `_compute_loss` for ld_alpha=None: masked positions are already 0 in `log_probs`.
        logps = log_probs[:, -seq_len:].detach().float().sum(dim=1)
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)
        chosen_rewards = self.beta * (chosen_logps - ref_chosen)
        rejected_rewards = self.beta * (rejected_logps - ref_rejected)
        margins = chosen_rewards - rejected_rewards

        gather = self.accelerator.gather
        metrics = self._metrics[mode]
        true_values = {
            "rewards/chosen": gather(chosen_rewards).mean().item(),
            "rewards/rejected": gather(rejected_rewards).mean().item(),
            "rewards/accuracies": gather((chosen_rewards > rejected_rewards).float()).mean().item(),
            "rewards/margins": gather(margins).mean().item(),
        }
        for key, value in true_values.items():
            if not metrics.get(key):
                raise RuntimeError(f"TRL did not log '{key}' in _compute_loss (TRL change?).")
            metrics[key][-1] = value  # TRL appended exactly one (shifted) value for this batch
        metrics["offset/mean"].append(gather(offsets).mean().item())
        metrics["rewards/margin_above_offset"].append(gather((margins > offsets).float()).mean().item())


def _bind_dpo_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Map DPOTrainer's positional/keyword arguments to names, to validate them before the (costly) parent init."""
    import inspect

    params = list(inspect.signature(DPOTrainer.__init__).parameters)[1:]  # drop `self`
    bound = dict(zip(params, args))
    bound.update(kwargs)
    return bound


def _check_loss_config(args: DPOConfig) -> None:
    """Refuse settings under which the shifted-reference identity is not the ODPO formula."""
    if list(args.loss_type) != ["sigmoid"]:
        raise ValueError(f"OffsetDPOTrainer implements loss_type='sigmoid' only; got {args.loss_type}.")
    if args.loss_weights is not None and [float(w) for w in args.loss_weights] != [1.0]:
        raise ValueError(f"OffsetDPOTrainer needs loss_weights None or [1.0]; got {args.loss_weights}.")
    if args.label_smoothing != 0.0:
        raise ValueError(f"OffsetDPOTrainer needs label_smoothing=0 (got {args.label_smoothing}).")
    if args.f_divergence_type != "reverse_kl":
        raise ValueError(
            f"OffsetDPOTrainer needs f_divergence_type='reverse_kl' (got {args.f_divergence_type!r}): the offset "
            "equals a reference shift only when the score is the plain log-ratio."
        )
    if args.ld_alpha is not None:
        raise ValueError("OffsetDPOTrainer needs ld_alpha=None (log-probs summed over the whole completion).")
    if args.use_weighting:
        raise ValueError("OffsetDPOTrainer does not support use_weighting (WPO weights would rescale the loss).")
    if not (args.beta > 0 and math.isfinite(args.beta)):
        raise ValueError(f"OffsetDPOTrainer needs beta > 0 (got {args.beta}).")


def _check_margin_column(dataset, column: str, split: str) -> None:
    """Fail early (before tokenization or the reference precompute) on a missing or negative offset column."""
    import numpy as np
    from datasets import Dataset

    names = dataset.column_names
    if names is None:  # IterableDataset with unknown features: look at the first example
        names = list(next(iter(dataset)).keys())
    if column not in names:
        raise ValueError(
            f"The {split} dataset has no '{column}' column (the ODPO offset delta); columns: {sorted(names)}. "
            "Add it, or pass margin_column=<name> to OffsetDPOTrainer."
        )
    if isinstance(dataset, Dataset):  # an IterableDataset is checked batch by batch in the collator
        values = np.asarray(dataset.with_format("numpy", columns=[column])[column], dtype=np.float64)
        if values.size:
            check_offsets(torch.from_numpy(values), column)
