"""DPO with a per-example offset (ODPO, Amini et al. 2024), as used by TicToc (Appendix D.2).

    loss_i = -log sigmoid( beta * (logratio_chosen_i - logratio_rejected_i) - delta_i )
    logratio = log pi_policy(y|x) - log pi_ref(y|x), summed over the completion tokens

with delta_i >= 0 read from a dataset column (default `margin`; TicToc uses delta = |S - 1.5|).

Margin modes (`margin_mode`, recipe `dpo.margin_mode`): how the pair's margin m (the column) enters the loss.
- `offset` (default, the TicToc paper's formula, App. D.2): delta = m, as above.
- `plain`: plain DPO on the same pairs, delta = 0 (the column is still read, validated and logged).
- `log_offset`: delta = log(1 + m), ODPO's log-scaled offset (Amini et al. 2024 use alpha * log of the score
  difference; log1p keeps a tie at offset 0 instead of -inf). alpha is `data.offset_scale`, applied in data prep.
- `weight`: no offset; each pair's loss is weighted by m (the paper's prose reading, "confident pairs get a weight
  of 1.5, near-ties contribute very little"): loss = mean_i m_i * -log sigmoid(beta * (lr_w - lr_l)). Needs the
  shared-prompt layout (TRL's own loss path has no per-pair weight).

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

`loss_type=["sigmoid", "sft"]` (TRL's combined loss, with `loss_weights`) adds TRL's SFT term, the mean negative
log-prob of the chosen tokens, to the offset loss: the SFT term reads the policy alone, so the shift does not touch it
(the shared layouts compute it from the same per-token log-probs).

The identity is exact only for loss_type "sigmoid" (plus "sft") with the reverse-KL score, plain summed log-probs
(no `ld_alpha`), no WPO weighting and no label smoothing; everything else is refused at construction.

The offset must also survive the data path: it is kept as a signature column (so `remove_unused_columns` keeps it),
carried through the collator by a wrapper (`timealign.train.collators`; TRL's `DataCollatorForPreference` drops
unknown keys), left untouched by the reference precompute (which only appends columns), and stripped before every
model forward, including `compute_ref_log_probs`. Caveat: under DeepSpeed, `Trainer._prepare_input` casts floating
batch tensors to the DeepSpeed dtype, so delta is then rounded to bf16 (relative error <= 2**-9), like TRL's
precomputed log-probs.

Layout. By default (`shared_prompt=True`, recipe `dpo.shared_prompt`) each pair is one packed sequence
[prompt | chosen | rejected] with a tree attention mask (`timealign.train.shared_prompt`), so the prompt runs through
the policy and the reference once instead of twice. That path computes the same per-pair log-probs as TRL's rows and
evaluates the ODPO formula and TRL's DPO metrics (`entropy`, `num_tokens`, `logits/*`, `mean_token_accuracy`,
`rewards/*`, `logps/*`) itself, from the same fused LM head outputs; the reference comes from the same three sources
(precomputed column, whose precompute then uses the shared layout too; `ref_model`; PEFT base with adapters
disabled). On devices where TRL's fused head projects every position (CPU), the shared layouts project only the
labelled ones (`timealign.train.compact_head`, TRL's own kernel on `hidden[labelled]`: the same per-token values
and gradients; `compact_lm_head=False` keeps TRL's head). `shared_prompt=False` is TRL's own layout and loss path
as described above. `padding_free=True` packs the micro-batch's pairs into one row. `prompt_cache=True` (recipe
`dpo.prompt_cache`, opt-in) is the other shared layout: each pair's prompt runs once as a plain causal forward and
both completions attend to its key/value cache (`timealign.train.prompt_cache`; no tree mask, so attention stays on
the ordinary causal kernels); same numbers.

TRL internals relied on (re-check on a TRL upgrade): `DPOTrainer._compute_loss` (reads `inputs["ref_chosen_logps"]`
/ `["ref_rejected_logps"]` when `self.precompute_ref_logps`; logs `rewards/*` by appending one value per call to
`self._metrics[mode]`; calls `model(..., fused_lm_head=True)` once for the policy and reads `.log_probs`),
`compute_ref_log_probs`, `_set_signature_columns_if_needed`, `_precompute_ref_logps` (uses `self.data_collator`;
its cache file beside the dataset's files: `timealign.train.precompute_folder`),
the fused LM head (`fused_lm_head=True` returns `log_probs`, `entropy`, `mean_logits`, `is_top1`; where it projects
every position, and the compact head's copy of that rule, `compact_head.trl_compacts`; the kernel it calls,
`trl.kernels.ChunkedLogProbFunction`, with `FusedCausalLMOutput` and `maybe_gather_lm_head_ctx`), `use_adapter`,
`disable_gradient_checkpointing`, and the attributes `beta`, `precompute_ref_logps`, `ref_model`, `loss_types`,
`_metrics`, `_total_train_tokens`, `_tp_size`, `aux_loss_enabled`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset
from trl import DPOConfig, DPOTrainer
from trl.trainer.utils import global_then_local_main_first

from timealign.render import tokens
from timealign.train import compact_head, prompt_cache, shared_prompt
from timealign.train.collators import CarriesColumn, OffsetPreferenceCollator, check_offsets
from timealign.train.fsdp_loading import ReferenceFromRankZero
from timealign.train.hub import HubUploadMixin
from timealign.train.precompute_folder import SharedPrecomputeFolder

__all__ = ["MARGIN_MODES", "OffsetDPOTrainer", "offset_and_weight"]

MARGIN_MODES = ("offset", "plain", "log_offset", "weight")


def offset_and_weight(margins: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-pair offset delta and loss weight (None: unweighted) that margin `mode` makes of the margins."""
    if mode == "offset":
        return margins, None
    if mode == "plain":
        return torch.zeros_like(margins), None
    if mode == "log_offset":
        return torch.log1p(margins), None
    if mode == "weight":
        return torch.zeros_like(margins), margins
    raise ValueError(f"unknown margin mode {mode!r}; one of {', '.join(MARGIN_MODES)}")


class OffsetDPOTrainer(HubUploadMixin, CarriesColumn, ReferenceFromRankZero, SharedPrecomputeFolder, DPOTrainer):
    """`trl.DPOTrainer` with the ODPO per-example offset: loss = -logsigmoid(beta * (lr_w - lr_l) - delta).

    Args: those of `trl.DPOTrainer`, plus
        margin_column: dataset column holding delta (float, >= 0). A train/eval dataset without it raises
            `ValueError` (no silent fallback to delta = 0: a missing offset would silently turn ODPO into plain DPO).
        shared_prompt: one packed [prompt | chosen | rejected] sequence per pair (the prompt's forward shared by both
            completions; `timealign.train.shared_prompt`); False: TRL's [prompt+chosen; prompt+rejected] rows.
            Same loss, gradients and metrics either way.
        padding_free: with shared_prompt, the micro-batch's pairs packed into one row (no padding).
        prompt_cache: with shared_prompt, each prompt runs once with use_cache=True and both completions continue
            from its cache (`timealign.train.prompt_cache`) instead of one tree-masked row per pair.
        margin_mode: how the margin column enters the loss: offset | plain | log_offset | weight (module docstring).
        compact_lm_head: with shared_prompt, project only the labelled positions through the LM head where TRL's
            fused head would project every one (CPU; `timealign.train.compact_head`); same numbers. False: TRL's head
            everywhere (for A/B timing).

    Datasets: TRL's standard preference layout (`prompt`, `chosen`, `rejected` strings, or conversational) plus the
    offset column; other columns are dropped by `remove_unused_columns` or ignored by the collator.
    """

    _tag_names = ["trl", "dpo", "odpo"]

    def __init__(
        self,
        *args: Any,
        margin_column: str = "margin",
        shared_prompt: bool = True,
        padding_free: bool = False,
        margin_mode: str = "offset",
        prompt_cache: bool = False,
        compact_lm_head: bool = True,
        **kwargs: Any,
    ):
        # Set before DPOTrainer.__init__: the collator setter, the dataset precompute and the signature columns
        # all need them during construction.
        self.margin_column = margin_column
        self.shared_prompt = shared_prompt
        self.pack_pairs = padding_free  # not `padding_free`: DPOTrainer.__init__ sets that to TRL's (disabled) option
        self.prompt_cache = prompt_cache
        self.compact_lm_head = compact_lm_head
        if margin_mode not in MARGIN_MODES:
            raise ValueError(f"unknown margin_mode {margin_mode!r}; one of {', '.join(MARGIN_MODES)}")
        if margin_mode == "weight" and not shared_prompt:
            raise ValueError(
                "margin_mode='weight' weights each pair's loss, which TRL's own loss path "
                "(shared_prompt=False) cannot do; set dpo.shared_prompt=true"
            )
        self.margin_mode = margin_mode
        bound = _bind_dpo_args(args, kwargs)
        if bound.get("args") is not None:
            _check_loss_config(bound["args"])
        if shared_prompt:
            if prompt_cache:  # first: its refusals name dpo.prompt_cache
                _check_prompt_cache_setup(bound, padding_free)
            _check_shared_prompt_setup(bound)
        elif padding_free:
            raise ValueError("padding_free packs shared-prompt rows: it needs shared_prompt=True (dpo.shared_prompt)")
        elif prompt_cache:
            raise ValueError(
                "prompt_cache is a layout of the shared prompt: dpo.prompt_cache=true needs dpo.shared_prompt=true"
            )
        if bound.get("train_dataset") is not None:
            _check_margin_column(bound["train_dataset"], margin_column, "train")
        eval_dataset = bound.get("eval_dataset")
        if eval_dataset is not None:
            items = eval_dataset.items() if isinstance(eval_dataset, dict) else [("eval", eval_dataset)]
            for name, dataset in items:
                _check_margin_column(dataset, margin_column, name)
        super().__init__(**bound)  # by name: ReferenceFromRankZero reads ref_model and args
        _check_loss_config(self.args)  # covers args=None (TRL's default config)
        if shared_prompt:
            self._check_shared_prompt_trainer()
        if self.args.train_sampling_strategy == "group_by_length" and self.train_dataset is not None:
            self.train_dataset = _with_lengths(self.train_dataset, self.args.length_column_name, shared_prompt)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """Standard (string) pairs: the prompt and each completion tokenized apart and joined
        (`timealign.render.tokens`), so the prompt ids trained on are the ids inference generates from; TRL tokenizes
        prompt + completion as one string, which merges tokens across the boundary with real BPE tokenizers.
        Conversational and already tokenized datasets go through TRL's own path."""
        first = next(iter(dataset))
        if not all(isinstance(first.get(key), str) for key in ("prompt", "chosen", "rejected")):
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        tokenizer = self._tokenizer
        with global_then_local_main_first():  # as TRL: the main process maps first, the others read its cache
            return self._tokenize_apart(dataset, tokenizer, args, dataset_name)

    @staticmethod
    def _tokenize_apart(dataset, tokenizer, args, dataset_name):
        def options(desc: str) -> dict:  # IterableDataset.map takes neither num_proc nor desc
            return {"num_proc": args.dataset_num_proc, "desc": desc} if isinstance(dataset, Dataset) else {}

        dataset = dataset.map(
            lambda prompt, chosen, rejected: tokens.pair_ids(tokenizer, prompt, chosen, rejected),
            input_columns=["prompt", "chosen", "rejected"],
            **options(f"Tokenizing {dataset_name} dataset (prompt and completions apart)"),
        )
        # TRL's own rule: a prompt that fills max_length leaves no completion token to learn from under keep_start.
        if args.max_length is not None and args.truncation_mode == "keep_start":
            dataset = dataset.filter(
                lambda ids: len(ids) < args.max_length,
                input_columns=["prompt_ids"],
                **options(f"Dropping fully truncated examples from {dataset_name} dataset"),
            )
        return dataset

    def _set_signature_columns_if_needed(self):
        # transformers' LengthGroupedSampler reads the length column after remove_unused_columns: keep it.
        super()._set_signature_columns_if_needed()
        if (
            self.args.train_sampling_strategy == "group_by_length"
            and self.args.length_column_name not in self._signature_columns
        ):
            self._signature_columns = [*self._signature_columns, self.args.length_column_name]

    # The offset column rides through the collator (`OffsetPreferenceCollator`, wrapped at assignment, so the reference
    # precompute inside DPOTrainer.__init__ already sees it) and through `remove_unused_columns` (`CarriesColumn`).
    column_collator = OffsetPreferenceCollator

    @property
    def carried_column(self) -> str:
        return self.margin_column

    def adapt_collator(self, collator):
        # Called for the collator DPOTrainer builds (before the reference precompute, which then uses this layout).
        if self.shared_prompt and self.prompt_cache:
            return prompt_cache.PromptCacheCollator.replacing(collator, padding_free=self.pack_pairs)
        if isinstance(collator, prompt_cache.PromptCacheCollator):
            raise ValueError("a PromptCacheCollator needs dpo.prompt_cache=true (and dpo.shared_prompt=true)")
        if self.shared_prompt:
            return shared_prompt.SharedPromptCollator.replacing(collator, padding_free=self.pack_pairs)
        return collator

    def compute_ref_log_probs(self, model, inputs):
        # TRL forwards every batch key except a fixed set to the model; the offset must not be one of them.
        inputs = {k: v for k, v in inputs.items() if k != self.margin_column}
        if self.shared_prompt:
            return self._shared_ref_log_probs(model, self._pairs(inputs))
        return super().compute_ref_log_probs(model, inputs)

    def _compute_loss(self, model, inputs, return_outputs):
        inputs = dict(inputs)
        if self.margin_column not in inputs:
            raise ValueError(
                f"Batch has no '{self.margin_column}' offsets. A custom data collator or column removal dropped it."
            )
        offsets = inputs.pop(self.margin_column)  # popped: TRL would otherwise pass it to the model's forward
        if self.shared_prompt:
            return self._shared_prompt_loss(model, inputs, offsets, return_outputs)

        # True reference log-probs: precomputed column, or TRL's own reference forward (ref model, or the PEFT base
        # with adapters disabled), which handles the same cases as TRL's inline reference path.
        if self.precompute_ref_logps:
            ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            ref_chosen, ref_rejected = self.compute_ref_log_probs(
                self.ref_model if self.ref_model is not None else self.model, inputs
            )
        ref_chosen, ref_rejected = ref_chosen.float(), ref_rejected.float()
        offsets, _ = offset_and_weight(offsets.to(device=ref_chosen.device, dtype=torch.float32), self.margin_mode)

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
        rewards = self._reward_metrics(chosen_rewards, rejected_rewards, offsets)
        metrics = self._metrics[mode]
        for key in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
            if not metrics.get(key):
                raise RuntimeError(f"TRL did not log '{key}' in _compute_loss (TRL change?).")
            metrics[key][-1] = rewards.pop(key)  # TRL appended exactly one (shifted) value for this batch
        for key, value in rewards.items():  # the offset metrics
            metrics[key].append(value)

    def _reward_metrics(self, chosen_rewards, rejected_rewards, offsets) -> dict[str, float]:
        """TRL's reward metrics (gathered means over the processes) and the two offset metrics."""
        gather = self.accelerator.gather
        margins = chosen_rewards - rejected_rewards
        return {
            "rewards/chosen": gather(chosen_rewards).mean().item(),
            "rewards/rejected": gather(rejected_rewards).mean().item(),
            "rewards/accuracies": gather((chosen_rewards > rejected_rewards).float()).mean().item(),
            "rewards/margins": gather(margins).mean().item(),
            "offset/mean": gather(offsets).mean().item(),
            "rewards/margin_above_offset": gather((margins > offsets).float()).mean().item(),
        }

    # ---------------------------------------------------------------------------------------------- shared prompt

    def _check_shared_prompt_trainer(self) -> None:
        """Refusals that need the built trainer (the model's own checks also run before every forward)."""
        if self.prompt_cache:
            prompt_cache.check_model(self.model.config)
            if self.ref_model is not None:
                prompt_cache.check_model(self.accelerator.unwrap_model(self.ref_model).config)
            fsdp = getattr(self.accelerator.state, "fsdp_plugin", None)
            if self.args.gradient_checkpointing or getattr(fsdp, "activation_checkpointing", False):
                raise ValueError(prompt_cache.CHECKPOINTING_REFUSAL)
        shared_prompt.check_model(self.model.config)
        if self.ref_model is not None:
            shared_prompt.check_model(self.accelerator.unwrap_model(self.ref_model).config)
        if self.aux_loss_enabled:
            raise ValueError("dpo.shared_prompt does not compute the MoE router aux loss; set dpo.shared_prompt=false")
        if self._is_vision_dataset:
            raise ValueError("dpo.shared_prompt supports text pairs only; set dpo.shared_prompt=false")
        parallel = self.accelerator.parallelism_config
        if parallel is not None and (getattr(parallel, "cp_size", 1) > 1 or getattr(parallel, "sp_size", 1) > 1):
            raise ValueError(
                "dpo.shared_prompt cannot shard its tree-masked rows over context/sequence parallel "
                "ranks; set dpo.shared_prompt=false"
            )

    def _pairs(self, inputs):
        """The micro-batch in its shared layout: `shared_prompt.PairTree`, or with prompt_cache
        `prompt_cache.CachedPairs` (the same interface)."""
        return prompt_cache.CachedPairs(inputs) if self.prompt_cache else shared_prompt.PairTree(inputs)

    def _tree_forward(self, model, tree, outputs=compact_head.POLICY_OUTPUTS):
        """Run `model` (a wrapped or plain policy, or the reference) on the micro-batch's shared layout (`_pairs`)
        through TRL's fused LM head, or where that would project every position, through `compact_head` (the labelled
        positions only; `outputs`: the per-token fields it computes)."""
        unwrapped = self.accelerator.unwrap_model(model)
        if isinstance(tree, prompt_cache.CachedPairs):  # two forwards: the prompt's cache, then the completions
            prompt_cache.check_model(unwrapped, training=model.training and torch.is_grad_enabled())
            inputs = tree.completion_inputs(model)
        else:
            shared_prompt.check_model(unwrapped.config, row_length=tree.input_ids.size(1))
            attn = unwrapped.config.get_text_config()._attn_implementation
            inputs = tree.model_inputs(attn, unwrapped.dtype)  # eager: an additive mask in the model's dtype
        if self.compact_lm_head and compact_head.applies(unwrapped):
            return compact_head.forward(model, unwrapped, tree.labels, outputs, **inputs)
        return model(**inputs, labels=tree.labels, use_cache=False, fused_lm_head=True)

    @torch.no_grad()
    def _shared_ref_log_probs(self, model, tree) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-pair reference log-probs on the shared layout, in TRL's reference context (`compute_ref_log_probs`)."""
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import use_adapter

        adapter_context = contextlib.nullcontext()
        if self.ref_model is None and _is_peft_model(self.model):
            unwrapped = self.accelerator.unwrap_model(self.model)
            adapter_context = use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)
        with (
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
            adapter_context,
            self.accelerator.autocast(),
        ):
            outputs = self._tree_forward(model, tree, compact_head.REFERENCE_OUTPUTS)
        return tree.pair_sums(outputs.log_probs)

    def _shared_prompt_loss(self, model, inputs, offsets, return_outputs):
        """ODPO loss and TRL's DPO metrics on a shared-prompt batch."""
        if return_outputs:
            raise ValueError(
                "dpo.shared_prompt computes no logits for compute_metrics / prediction_loss_only=False; "
                "set dpo.shared_prompt=false to get TRL's logits"
            )
        mode = "train" if self.model.training else "eval"
        tree = self._pairs(inputs)
        outputs = self._tree_forward(model, tree)
        chosen_logps, rejected_logps = tree.pair_sums(outputs.log_probs)

        if self.precompute_ref_logps:
            ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            reference = self.ref_model if self.ref_model is not None else self.model
            ref_chosen, ref_rejected = self._shared_ref_log_probs(reference, tree)
        ref_chosen, ref_rejected = ref_chosen.float(), ref_rejected.float()
        offsets, weights = offset_and_weight(
            offsets.to(device=chosen_logps.device, dtype=torch.float32), self.margin_mode
        )

        chosen_logratios = chosen_logps - ref_chosen
        rejected_logratios = rejected_logps - ref_rejected
        per_pair = -F.logsigmoid(self.beta * (chosen_logratios - rejected_logratios) - offsets)
        loss = (per_pair if weights is None else weights * per_pair).mean() * self.loss_weights[0]
        if "sft" in self.loss_types:  # TRL's "sft": the mean negative log-prob of the micro-batch's chosen tokens
            loss = loss - chosen_logps.sum() / tree.target_chosen.sum().clamp(min=1) * self.loss_weights[1]
        if weights is not None:
            self._metrics[mode]["weight/mean"].append(self.accelerator.gather(weights).mean().item())

        chosen_rewards = self.beta * chosen_logratios.detach()
        rejected_rewards = self.beta * rejected_logratios.detach()
        self._log_shared_metrics(
            mode,
            tree,
            outputs,
            chosen_logps.detach(),
            rejected_logps.detach(),
            chosen_rewards,
            rejected_rewards,
            offsets,
        )
        return loss

    @torch.no_grad()
    def _log_shared_metrics(
        self, mode, tree, outputs, chosen_logps, rejected_logps, chosen_rewards, rejected_rewards, offsets
    ) -> None:
        """The metrics TRL's `_compute_loss` logs, each from the same per-token values, plus the offset metrics."""
        metrics = self._metrics[mode]
        width = tree.target_pair.size(1)
        scored = tree.target_chosen | tree.target_rejected

        def gather_sum(value) -> float:  # summed over the processes, as TRL weights its token means
            return self.accelerator.gather_for_metrics(value).sum().item()

        def total(per_token, where) -> float:
            return gather_sum(per_token[:, -width:][where].float().sum())

        tokens = gather_sum(scored.sum())
        metrics["entropy"].append(total(outputs.entropy, scored) / tokens if tokens > 0 else 0.0)
        if mode == "train":
            self._total_train_tokens += int(gather_sum(tree.unshared_token_count())) // self._tp_size
        metrics["num_tokens"] = [self._total_train_tokens]
        chosen_tokens, rejected_tokens = gather_sum(tree.target_chosen.sum()), gather_sum(tree.target_rejected.sum())
        chosen_logits = total(outputs.mean_logits, tree.target_chosen)
        rejected_logits = total(outputs.mean_logits, tree.target_rejected)
        metrics["logits/chosen"].append(chosen_logits / chosen_tokens if chosen_tokens > 0 else 0.0)
        metrics["logits/rejected"].append(rejected_logits / rejected_tokens if rejected_tokens > 0 else 0.0)
        correct = total(outputs.is_top1, tree.target_chosen)
        metrics["mean_token_accuracy"].append(correct / chosen_tokens if chosen_tokens > 0 else 0.0)
        for key, value in self._reward_metrics(chosen_rewards, rejected_rewards, offsets).items():
            metrics[key].append(value)
        metrics["logps/chosen"].append(self.accelerator.gather(chosen_logps).mean().item())
        metrics["logps/rejected"].append(self.accelerator.gather(rejected_logps).mean().item())


def _is_peft_model(model) -> bool:
    from accelerate.utils import is_peft_model

    return is_peft_model(model)


def _check_shared_prompt_setup(bound: dict[str, Any]) -> None:
    """Refusals that need only the constructor's arguments (before tokenization and the reference precompute)."""
    from transformers import PreTrainedModel

    if bound.get("compute_metrics") is not None:
        raise ValueError("dpo.shared_prompt computes no logits for compute_metrics; set dpo.shared_prompt=false")
    model, ref_model = bound.get("model"), bound.get("ref_model")
    for candidate in (model, ref_model):
        if isinstance(candidate, PreTrainedModel) or hasattr(candidate, "peft_config"):
            shared_prompt.check_model(candidate.config)
    peft_config = bound.get("peft_config")
    if getattr(peft_config, "is_prompt_learning", False) or getattr(
        getattr(model, "active_peft_config", None), "is_prompt_learning", False
    ):
        raise ValueError(
            "dpo.shared_prompt does not support prompt-learning PEFT (virtual tokens would sit outside "
            "the tree mask); set dpo.shared_prompt=false"
        )


def _check_prompt_cache_setup(bound: dict[str, Any], padding_free: bool) -> None:
    """Refusals of dpo.prompt_cache that need only the constructor's arguments (before the reference precompute)."""
    from transformers import PreTrainedModel

    if padding_free:
        raise ValueError(prompt_cache.PADDING_FREE_REFUSAL)
    if getattr(bound.get("args"), "gradient_checkpointing", False):
        raise ValueError(prompt_cache.CHECKPOINTING_REFUSAL)
    for candidate in (bound.get("model"), bound.get("ref_model")):
        if isinstance(candidate, PreTrainedModel) or hasattr(candidate, "peft_config"):
            prompt_cache.check_model(candidate.config)


def _with_lengths(dataset, column: str, shared: bool):
    """`training.train_sampling_strategy=group_by_length`: the tokens each pair costs (shared prompt: prompt + both
    completions; TRL's layout: its longer row) as transformers' length column, so batches hold pairs of similar
    length and padding shrinks. A length column already in the data is kept."""
    from datasets import Dataset

    if not isinstance(dataset, Dataset) or column in dataset.column_names:
        return dataset

    def length(prompt, chosen, rejected):
        return {
            column: len(prompt) + len(chosen) + len(rejected)
            if shared
            else len(prompt) + max(len(chosen), len(rejected))
        }

    return dataset.map(length, input_columns=["prompt_ids", "chosen_ids", "rejected_ids"], desc="Pair lengths")


def _bind_dpo_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Map DPOTrainer's positional/keyword arguments to names, to validate them before the (costly) parent init."""
    import inspect

    params = list(inspect.signature(DPOTrainer.__init__).parameters)[1:]  # drop `self`
    bound = dict(zip(params, args))
    bound.update(kwargs)
    return bound


def _check_loss_config(args: DPOConfig) -> None:
    """Refuse settings under which the shifted-reference identity is not the ODPO formula."""
    if list(args.loss_type) not in (["sigmoid"], ["sigmoid", "sft"]):
        raise ValueError(
            f"OffsetDPOTrainer implements loss_type 'sigmoid', or ['sigmoid', 'sft'] (the offset loss plus TRL's SFT "
            f"term on the chosen replies); got {args.loss_type}."
        )
    weights = args.loss_weights
    if weights is not None and not all(math.isfinite(float(w)) and float(w) >= 0 for w in weights):
        raise ValueError(f"OffsetDPOTrainer needs finite loss_weights >= 0; got {weights}.")
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
