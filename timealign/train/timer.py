"""TIMER multi-task SFT (TimelyChat paper, Sec. 5.2, Eqs. 4-5): a TRL `SFTTrainer` with a time loss and a
response loss over token-type masks.

    L = L_response + lambda * L_time

Each training row is a pre-tokenized TIMER sequence (`timealign.render.timer.TimerRenderer.batch_features`):
`input_ids`, `labels` (-100 outside trained spans) and `token_types` (0 other, 1 time, 2 response), so the loss
knows which label is an interval token and which an utterance token.

Normalization (`loss_normalization`):
- "tokens" (default, the paper's Eqs. 4-5): both terms are sums of token negative log-likelihoods over their spans
  (log p(tau_t | ...) and log p(u_t | ...) are sequence log-probs, summed over turns), divided by ONE shared
  normalizer, the number of trained (time + response) tokens in the optimizer step:
      loss = (sum_resp NLL + lambda * sum_time NLL) / (N_resp + N_time)
  The paper divides by the number of dialogs N instead; a per-token normalizer is TRL's (and keeps the gradient
  scale independent of dialog length), and with lambda = 1 this is exactly TRL's standard SFT loss on the same
  labels. The relative weight of time and response tokens is the paper's: time tokens are few (a handful per turn),
  so they are not blown up to half the loss.
- "per_type": two token means, loss = mean_resp NLL + lambda * mean_time NLL (time tokens weighted far more).

Counts are taken over the whole optimizer step (all gradient-accumulation micro-batches, and all processes when
`average_tokens_across_devices`, TRL's default), the way transformers computes `num_items_in_batch`, so the loss does
not depend on how a step is split into micro-batches. lambda = 0 is the paper's "w/o time loss" ablation: time
tokens stay in the labels (their CE is still logged) but get no gradient.

Logged (train and eval): `loss_time` and `loss_response`, the mean token CE over each span type in the logging
window (sums and counts gathered from all processes, so these are exact token means, not means of per-batch means),
and `time_tokens_frac`; TRL's own `entropy`, `mean_token_accuracy`, `num_tokens` are unchanged. The logged `loss` is
the optimised objective above (so with "tokens" it is the token-weighted mix, not loss_response + lambda *
loss_time).

New tokens. `add_timer_tokens_to_model` adds `<SPK>/<TIME>/<UTT>` to the tokenizer, grows the embeddings only if
needed (Qwen-style checkpoints already have spare rows) and initialises the new input and output rows to the mean of
the existing rows. With LoRA, `timer_lora_config` makes them trainable: "trainable_tokens" (PEFT
`trainable_token_indices` on the new rows of the input embedding and, when untied, the output layer) or
"modules_to_save" (both layers trained in full). TRL's fused LM head reads `lm_head.weight` and `lm_head.bias`
directly; PEFT 0.21's `TrainableTokensWrapper` has the merged `weight` but no `bias` attribute, so the trainer gives
the wrapper the base layer's bias (usually None); the merged weight carries the trainable rows, so the new tokens'
output rows are trained through the fused head too.

TRL internals relied on (re-check on a TRL upgrade): `SFTTrainer.compute_loss` calls the model once with
`fused_lm_head=True`, whose output has per-token `log_probs` (B, L-1) aligned with `labels[:, 1:]` and `label_mask`;
TRL builds the default collator inside `__init__` (wrapped when it is assigned: `timealign.train.collators`);
`_prepare_dataset` keeps extra columns of a tokenized dataset (it only truncates input_ids/labels, so token_types are
truncated here first); `_set_signature_columns_if_needed`; `_metrics`; and transformers'
`get_batch_samples`/`loss_is_scaled_for_ga`.
Packing (`packing=True`, set by the recipe's `timer.packing`): TRL's own packing keeps only input_ids/labels, so
`_prepare_dataset` packs the rendered rows itself with `timealign.train.packing` (TRL's best-fit decreasing over
input_ids, labels and token_types together). Batches: with flash attention TRL's padding-free collator flattens
them into one row (varlen) and `PackedTokenTypesCollator` flattens token_types the same way; with sdpa/eager the
packed rows stay rows, with position ids restarting per dialog in place of the attention mask. Either way attention
stays inside each dialog and the loss is the unpacked one (the same token sums over the same normalizer).
Padding-free without packing is refused (TRL then enforces no max_length).
"""

from __future__ import annotations

from typing import Any

import torch
from datasets import Dataset
from trl import SFTTrainer

from timealign.render.timer import TOKEN_RESPONSE, TOKEN_TIME, add_timer_tokens
from timealign.train.collators import TOKEN_TYPES, CarriesColumn
from timealign.train.hub import HubUploadMixin
from timealign.train.models import lora_config
from timealign.train.packing import (
    LAYOUTS,
    PACKED_TOKENS,
    PackedTokenTypesCollator,
    check_packing_strategy,
    pack_timer_rows,
    packed_layout,
)

__all__ = ["LOSS_NORMALIZATIONS", "TimerSFTTrainer", "add_timer_tokens_to_model", "timer_lora_config"]

LOSS_NORMALIZATIONS = ("tokens", "per_type")


class TimerSFTTrainer(HubUploadMixin, CarriesColumn, SFTTrainer):
    """`trl.SFTTrainer` with TIMER's loss: L_response + lambda_time * L_time over the `token_types` masks.

    Args: those of `trl.SFTTrainer`, plus
        lambda_time: weight of the time loss (paper: 1.0; 0 = the "w/o time loss" ablation).
        loss_normalization: "tokens" (one shared normalizer, Eqs. 4-5) or "per_type" (two token means).
        packing_layout: with `packing=True`, "flat" (one flattened row per batch) or "rows" (packed rows kept,
            per-dialog
            position ids); None: "flat" for flash attention, "rows" otherwise (`timealign.train.packing`).

    Datasets: pre-tokenized rows with `input_ids`, `labels`, `token_types` (see the module docstring).
    """

    _tag_names = ["trl", "sft", "timer"]
    loss_is_scaled_for_ga = True  # compute_loss normalizes by the optimizer step's token counts

    def __init__(
        self,
        *args: Any,
        lambda_time: float = 1.0,
        loss_normalization: str = "tokens",
        packing_layout: str | None = None,
        **kwargs: Any,
    ):
        import inspect
        import math

        if not (math.isfinite(lambda_time) and lambda_time >= 0):
            raise ValueError(f"lambda_time must be a finite number >= 0, got {lambda_time}")
        if loss_normalization not in LOSS_NORMALIZATIONS:
            raise ValueError(f"loss_normalization must be one of {LOSS_NORMALIZATIONS}, got {loss_normalization!r}")
        if packing_layout is not None and packing_layout not in LAYOUTS:
            raise ValueError(f"packing_layout must be one of {LAYOUTS} or None, got {packing_layout!r}")
        self.lambda_time = float(lambda_time)
        self.loss_normalization = loss_normalization
        self._step_counts: torch.Tensor | None = None  # [N_time, N_resp] of the current optimizer step
        self._timer_sums = {"train": None, "eval": None}  # [sum NLL time, N time, sum NLL resp, N resp]

        params = list(inspect.signature(SFTTrainer.__init__).parameters)[1:]
        bound = dict(zip(params, args))
        bound.update(kwargs)
        cfg = bound.get("args")
        if cfg is not None:
            _check_config(cfg)
        if bound.get("compute_loss_func") is not None:
            raise ValueError("TimerSFTTrainer computes its own loss; do not pass compute_loss_func")
        if bound.get("formatting_func") is not None:
            raise ValueError("TimerSFTTrainer takes pre-tokenized TIMER rows; do not pass formatting_func")
        for name in ("train_dataset", "eval_dataset"):
            dataset = bound.get(name)
            items = dataset.items() if isinstance(dataset, dict) else [(name, dataset)]
            for split, ds in items:
                if ds is not None:
                    _check_columns(ds, split)
        super().__init__(*args, **kwargs)
        _check_config(self.args)
        _give_wrapper_a_bias(self.model)
        if self.args.packing and self.padding_free and isinstance(self.data_collator, PackedTokenTypesCollator):
            # TRL flattens packed batches (flash attention's varlen layout); other attention implementations keep
            # the packed rows as rows, so their mask and attention stay quadratic in one row only.
            layout = packing_layout or packed_layout(self.model)
            if layout == "rows":
                self.data_collator.base.padding_free = False
            self.data_collator.layout = layout

    # -- data path ---------------------------------------------------------------------------------------------
    # `token_types` rides through the collator and `remove_unused_columns` (timealign.train.collators); the
    # packing-aware collator also flattens it for a padding-free batch (timealign.train.packing).
    column_collator = PackedTokenTypesCollator
    carried_column = TOKEN_TYPES

    def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):
        # TRL truncates input_ids and labels only; truncate token_types with them first (then TRL's is a no-op).
        if args.max_length is not None and TOKEN_TYPES in (dataset.column_names or []):
            length = args.max_length
            keep_end = args.truncation_mode == "keep_end"

            def truncate(example):
                sl = slice(-length, None) if keep_end else slice(None, length)
                return {k: example[k][sl] for k in ("input_ids", "labels", TOKEN_TYPES)}

            if _max_row_length(dataset) > length:
                dataset = dataset.map(
                    truncate,
                    **({"desc": f"Truncating {dataset_name} TIMER rows"} if isinstance(dataset, Dataset) else {}),
                )
        if not packing:
            return super()._prepare_dataset(dataset, processing_class, args, packing, formatting_func, dataset_name)
        # TRL's packing would keep input_ids/labels only: prepare unpacked, then pack with token_types.
        dataset = super()._prepare_dataset(dataset, processing_class, args, False, formatting_func, dataset_name)
        from trl.trainer.utils import global_then_local_main_first

        map_kwargs = {}
        if isinstance(dataset, Dataset):
            map_kwargs = {"num_proc": args.dataset_num_proc, "desc": f"Packing {dataset_name} TIMER rows"}
        with global_then_local_main_first():
            dataset = pack_timer_rows(dataset, args.max_length, args.packing_strategy, map_kwargs)
        if args.shuffle_dataset:  # as TRL does after packing
            dataset = dataset.shuffle(seed=args.seed)
        return dataset

    # -- loss --------------------------------------------------------------------------------------------------
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Also count the time and response tokens of the whole optimizer step (all micro-batches, all ranks)."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        counts = torch.zeros(2, dtype=torch.float64)
        for batch in batch_samples:
            time_m, resp_m = _masks(batch[TOKEN_TYPES][:, 1:], batch["labels"][:, 1:] != -100)
            counts += torch.stack([time_m.sum(), resp_m.sum()]).double().cpu()
        counts = counts.to(device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            counts = self.accelerator.gather(counts.unsqueeze(0)).sum(0)
        self._step_counts = counts
        return batch_samples, num_items_in_batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        inputs = dict(inputs)
        if TOKEN_TYPES not in inputs:
            raise ValueError(f"batch has no '{TOKEN_TYPES}': a custom collator or column removal dropped it")
        token_types = inputs.pop(TOKEN_TYPES)
        packed_tokens = inputs.pop(PACKED_TOKENS, None)  # packed "rows" layout: real tokens (no attention mask)

        captured: list[Any] = []
        handle = model.register_forward_hook(lambda _m, _a, out: captured.append(out) if not captured else None)
        # Under transformers < 5.19 TRL marks "this loss is already scaled for gradient accumulation" by setting
        # compute_loss_func to a string, which transformers' training_step reads and SFTTrainer.compute_loss would
        # call: hide it for that one call (TimerSFTTrainer takes no compute_loss_func of its own).
        scaled_marker, self.compute_loss_func = self.compute_loss_func, None
        try:
            result = super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        finally:
            self.compute_loss_func = scaled_marker
            handle.remove()
        if packed_tokens is not None and mode == "train":
            # TRL counts position_ids.size(1) tokens when there is no attention mask: one row's width, not the batch's
            delta = packed_tokens.reshape(1).to(inputs["input_ids"].device) - inputs["position_ids"].size(1)
            self._total_train_tokens += int(self.accelerator.gather_for_metrics(delta).sum().item()) // self._tp_size
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        log_probs = getattr(captured[0], "log_probs", None) if captured else None
        label_mask = getattr(captured[0], "label_mask", None) if captured else None
        if log_probs is None or label_mask is None:
            raise RuntimeError(
                "TimerSFTTrainer could not read per-token log-probs from TRL's fused LM head "
                "(TRL change, or a loss path that bypasses it)"
            )

        types = token_types[:, 1:].to(log_probs.device)
        time_m, resp_m = _masks(types, label_mask)
        nll = -log_probs.float()
        time_sum, resp_sum = (nll * time_m).sum(), (nll * resp_m).sum()
        n_time_mb, n_resp_mb = time_m.sum(), resp_m.sum()

        use_step = mode == "train" and self._step_counts is not None
        if use_step:
            n_time, n_resp = self._step_counts[0].to(nll), self._step_counts[1].to(nll)
        else:
            n_time, n_resp = n_time_mb.to(nll), n_resp_mb.to(nll)
        if self.loss_normalization == "tokens":
            loss = (resp_sum + self.lambda_time * time_sum) / (n_time + n_resp).clamp(min=1)
        else:
            loss = resp_sum / n_resp.clamp(min=1) + self.lambda_time * time_sum / n_time.clamp(min=1)
        if use_step and self.args.average_tokens_across_devices and self.args.world_size > 1:
            loss = loss * self.accelerator.num_processes  # DDP averages gradients over ranks
        if getattr(self, "aux_loss_enabled", False) and getattr(captured[0], "aux_loss", None) is not None:
            steps = self.current_gradient_accumulation_steps if use_step else 1
            loss = loss + self.router_aux_loss_coef * captured[0].aux_loss / steps

        stats = torch.stack([time_sum.detach(), n_time_mb.to(nll), resp_sum.detach(), n_resp_mb.to(nll)]).double()
        stats = self.accelerator.gather(stats.unsqueeze(0)).sum(0)
        running = self._timer_sums[mode]
        self._timer_sums[mode] = stats if running is None else running + stats

        if return_outputs:
            return loss, result[1]
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        sums = self._timer_sums.get(mode)
        if sums is not None:
            time_sum, n_time, resp_sum, n_resp = sums.tolist()
            prefix = "eval_" if mode == "eval" else ""
            logs[f"{prefix}loss_time"] = time_sum / n_time if n_time else float("nan")
            logs[f"{prefix}loss_response"] = resp_sum / n_resp if n_resp else float("nan")
            logs[f"{prefix}time_tokens_frac"] = n_time / (n_time + n_resp) if n_time + n_resp else 0.0
            self._timer_sums[mode] = None
        super().log(logs, start_time)


def _max_row_length(dataset) -> int:
    """Longest input_ids row (Arrow-side for a Dataset; an IterableDataset is assumed to need truncation)."""
    if not isinstance(dataset, Dataset):
        return 1 << 62
    import pyarrow.compute as pc

    lengths = pc.list_value_length(dataset.data.column("input_ids"))
    return int(pc.max(lengths).as_py() or 0)


def _masks(types: torch.Tensor, label_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    label_mask = label_mask.to(types.device).bool()
    return (types == TOKEN_TIME) & label_mask, (types == TOKEN_RESPONSE) & label_mask


def _check_config(args) -> None:
    packing = getattr(args, "packing", False)
    if getattr(args, "eval_packing", None) and not packing:
        # the collator is padding-free only with packing: packed eval rows would attend across their dialogs
        raise ValueError("TimerSFTTrainer supports eval_packing=True only with packing=True")
    if packing:
        check_packing_strategy(getattr(args, "packing_strategy", "bfd"))
        if getattr(args, "max_length", None) is None:
            raise ValueError("TimerSFTTrainer packing needs max_length (the length of a packed row)")
    if getattr(args, "padding_free", False) and not getattr(args, "packing", False):
        raise ValueError(
            "TimerSFTTrainer supports padding_free only with packing=True (timer.packing=true): "
            "without packing TRL enforces no max_length"
        )
    if getattr(args, "loss_type", "nll") != "nll":
        raise ValueError(f"TimerSFTTrainer implements loss_type='nll' only; got {args.loss_type!r}")
    if getattr(args, "label_smoothing_factor", 0.0):
        raise ValueError("TimerSFTTrainer needs label_smoothing_factor=0 (it bypasses the fused LM head)")
    if getattr(args, "use_liger_kernel", False):
        raise ValueError("TimerSFTTrainer does not support use_liger_kernel")


def _check_columns(dataset, split: str) -> None:
    names = dataset.column_names
    if names is None:
        names = list(next(iter(dataset)).keys())
    missing = [c for c in ("input_ids", "labels", TOKEN_TYPES) if c not in names]
    if missing:
        raise ValueError(
            f"the {split} dataset lacks {missing}: TimerSFTTrainer takes pre-tokenized TIMER rows "
            f"(timealign.render.timer.TimerRenderer.batch_features); columns: {sorted(names)}"
        )


def _give_wrapper_a_bias(model) -> None:
    """TRL's fused head reads `get_output_embeddings().bias`; PEFT's TrainableTokensWrapper has no such attribute."""
    try:
        from peft.utils.other import TrainableTokensWrapper
    except ImportError:  # pragma: no cover - peft is a dependency
        return
    head = model.get_output_embeddings()
    if isinstance(head, TrainableTokensWrapper) and "bias" not in head.__dict__:
        base = head.token_adapter.base_layer
        object.__setattr__(head, "bias", getattr(base, "bias", None))


# ---------------------------------------------------------------------------------------------- model and LoRA


def add_timer_tokens_to_model(model, tokenizer) -> list[int]:
    """Add the TIMER tokens to the tokenizer; grow the embeddings if needed; set new rows to the mean of the old.

    Returns the ids of `<SPK>`, `<TIME>`, `<UTT>`. Rows are initialised only for tokens this call added.
    """
    before = len(tokenizer)
    ids = add_timer_tokens(tokenizer)
    new_ids = [i for i in ids if i >= before]
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    if new_ids:
        with torch.no_grad():
            layers = [model.get_input_embeddings()]
            out = model.get_output_embeddings()
            if out is not None and out.weight.data_ptr() != layers[0].weight.data_ptr():
                layers.append(out)
            for layer in layers:
                weight = layer.weight
                weight[new_ids] = weight[:before].float().mean(dim=0).to(weight.dtype)
                bias = getattr(layer, "bias", None)
                if bias is not None and bias.shape[0] == weight.shape[0]:
                    bias[new_ids] = bias[:before].float().mean().to(bias.dtype)
    return ids


def _module_name(model, module) -> str:
    for name, mod in model.named_modules():
        if mod is module:
            return name.split(".")[-1]
    raise ValueError("module not found in model")


def timer_lora_config(lora, model, token_ids: list[int] | None, new_tokens: str = "trainable_tokens"):
    """A `peft.LoraConfig` from the recipe's LoRA section that also trains the TIMER tokens' rows.

    new_tokens: "trainable_tokens" (only the new rows of the input embedding, and of the output layer when it is not
    tied) or "modules_to_save" (the whole input embedding and output layer). `token_ids=None`: no new tokens (the
    no-special-tokens ablation), plain LoRA.
    """
    kwargs: dict[str, Any] = {}
    if token_ids:
        embed = _module_name(model, model.get_input_embeddings())
        head_module = model.get_output_embeddings()
        head = _module_name(model, head_module) if head_module is not None else None
        tied = (
            head_module is not None and head_module.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
        )
        if new_tokens == "trainable_tokens":
            indices = {embed: list(token_ids)}
            if head and not tied:
                indices[head] = list(token_ids)
            kwargs["trainable_token_indices"] = indices
        elif new_tokens == "modules_to_save":
            kwargs["modules_to_save"] = [embed] + ([head] if head else [])
            if tied:
                kwargs["ensure_weight_tying"] = True  # one trained copy for the tied input/output matrix
        else:
            raise ValueError(f"timer.lora_new_tokens must be trainable_tokens or modules_to_save, got {new_tokens!r}")
    return lora_config(lora, **kwargs)
