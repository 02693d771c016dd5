"""Weights read once per job under FSDP2: `fsdp_cpu_ram_efficient_loading: true` in the accelerate config.

Without it every process reads the policy and TRL's reference model into host RAM at start (8B in bf16: 2 x 16 GB per
GPU process, 256 GB on an 8-GPU node). With it:

- rank 0 loads the checkpoint; every other rank builds the same model with storage that is allocated but never written
  (`to_empty`: no host RAM is touched; in fp32 when bf16/fp16 mixed precision trains every weight, since accelerate
  upcasts those to fp32 before sharding and the upcast would write a full copy), and takes rank 0's non-persistent
  buffers (the rotary `inv_freq`, which no checkpoint holds) by a broadcast of those few tensors. accelerate's FSDP2
  `prepare` then moves the policy to the meta device, shards it and broadcasts rank 0's weights into every shard
  (`fsdp2_load_full_state_dict`).
- TRL's reference model would not get that broadcast: `trl.models.prepare_fsdp` only calls `fully_shard`, so ranks > 0
  would hold empty weights (transformers' own efficient loading gives them zeros). `ReferenceFromRankZero` keeps rank
  0's full reference tensors until TRL has sharded the reference, then broadcasts them into the shards with the same
  accelerate function, before the reference precompute or the first step.

transformers' own branch for this setting (`is_fsdp_enabled()`: ranks > 0 get `zeros_like` copies) writes a full model
of zeros per process, so it saves reading the checkpoint but not host RAM; `load_model` does not take it. FSDP1 (whose
`sync_module_states` broadcasts at wrapping, with matching dtypes) keeps that branch.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from timealign.config import RecipeError

logger = logging.getLogger("timealign.train.fsdp_loading")


def efficient_loading() -> bool:
    """accelerate launched this process for FSDP2 with `fsdp_cpu_ram_efficient_loading: true`, in a process group of
    more than one process (the environment accelerate's launcher sets from the config file)."""
    import torch.distributed as dist

    def flag(name: str) -> bool:
        return os.environ.get(name, "false").strip().lower() in ("1", "true", "yes")

    return (
        flag("ACCELERATE_USE_FSDP")
        and flag("FSDP_CPU_RAM_EFFICIENT_LOADING")
        and os.environ.get("FSDP_VERSION", "1").strip() == "2"
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size() > 1
    )


def reads_weights() -> bool:
    """Whether this process reads the checkpoint: always, except ranks > 0 under efficient loading (accelerate's FSDP2
    broadcast sends from global rank 0)."""
    import torch.distributed as dist

    return not efficient_loading() or dist.get_rank() == 0


class ReferenceSourceError(RecipeError):
    """Every rank raises it; rank 0 prints it (`timealign.config.cli.run_command`)."""

    rank_zero_only = True


def check_reference_source(precompute_ref_log_probs: bool, lora: bool) -> None:
    """With LoRA, TRL precomputes the reference log-probs on the policy before it is sharded, so ranks > 0 would score
    with weights they never read: refused before data prep and loading (`timealign.train.preflight`)."""
    if precompute_ref_log_probs and lora and efficient_loading():
        raise ReferenceSourceError(
            "training.precompute_ref_log_probs=true with lora.enabled=true under FSDP with "
            "fsdp_cpu_ram_efficient_loading: true: TRL precomputes the reference on the unsharded policy, whose "
            "weights only rank 0 has read; set training.precompute_ref_log_probs=false (the adapter-disabled policy "
            "is the reference on the fly) or fsdp_cpu_ram_efficient_loading: false in the accelerate config"
        )


def empty_model(model_path: str, dtype, attn_implementation: str | None, trust_remote_code: bool):
    """The model at `model_path` built from its config with storage that is allocated but never written (no host RAM
    is touched until the broadcast writes its shards); tied embeddings tied again. Not the meta device: accelerate's
    FSDP2 prepare maps the optimizer's parameters to the sharded ones by storage address, which meta tensors lack.
    Its non-persistent buffers get rank 0's values from `share_non_persistent_buffers` (every rank calls it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    if dtype == "auto":
        dtype = getattr(config, "dtype", None) or torch.float32
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attn_implementation, trust_remote_code=trust_remote_code
        )
    model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives each module its own tensor; tied embeddings share one again
    model.config._name_or_path = model_path  # what TRL and the model card read, as from_pretrained sets it
    # Its generation_config stays transformers' default: ranks > 0 neither save the model nor generate with it.
    return model


def is_model_folder(model_path: str) -> bool:
    """A folder (or hub id) with a model config: an adapter-only folder has none, and is read on every rank."""
    path = Path(model_path)
    return not (path.is_dir() and (path / "adapter_config.json").exists() and not (path / "config.json").exists())


def share_non_persistent_buffers(model) -> None:
    """Rank 0's non-persistent buffers (not in any checkpoint, so not in accelerate's broadcast) copied into every
    rank's model. Every rank calls it, after building its model."""
    import torch.distributed as dist

    names = non_persistent_buffers(model)
    payload = [{name: model.get_buffer(name).detach().cpu() for name in names} if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(payload, src=0)
    if dist.get_rank() != 0:
        if sorted(payload[0]) != names:
            theirs = sorted(payload[0])
            raise RuntimeError(f"rank 0's model has other non-persistent buffers than this one: {theirs} vs {names}")
        for name, value in payload[0].items():
            model.get_buffer(name).copy_(value)


def non_persistent_buffers(model) -> list[str]:
    """Names of the buffers no checkpoint holds (the rotary `inv_freq`)."""
    names = []
    for name, _ in model.named_buffers():
        module_name, _, local = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        if local in module._non_persistent_buffers_set:
            names.append(name)
    return sorted(names)


class ReferenceFromRankZero:
    """Mixin for TRL's DPOTrainer: a reference model passed as `ref_model`, read by rank 0 only (`load_model` under
    efficient loading), gets rank 0's weights in every FSDP2 shard after TRL's `prepare_fsdp`, before the reference
    precompute or the first step. A no-op without FSDP2 efficient loading or without a reference.

    A reference kept for training (no precompute) is also sharded one unit per decoder layer, as accelerate shards the
    policy, before TRL's `prepare_fsdp` shards what is left at its root: TRL alone makes the whole model one unit, so
    every reference forward gathers all of it on each GPU (8B bf16: 16 GB). With a precompute TRL hashes the unsharded
    reference first and drops it after one pass, before the policy reaches the GPUs, so it stays one unit there."""

    def __init__(self, **kwargs):
        import torch.distributed as dist

        # DPOTrainer's arguments by name (OffsetDPOTrainer binds them to its signature first)
        ref_model, training_args = kwargs.get("ref_model"), kwargs.get("args")
        # References, not copies: rank 0's full tensors outlive TRL's sharding only until the broadcast.
        self._reference_full_state = None
        self._reference_to_split = None
        if ref_model is not None and efficient_loading():
            self._reference_full_state = ref_model.state_dict() if dist.get_rank() == 0 else {}
            if training_args is not None and not training_args.precompute_ref_log_probs:
                self._reference_to_split = ref_model
        super().__init__(**kwargs)
        self._sync_reference()
        if self.args.precompute_ref_log_probs and self.is_fsdp_enabled:
            self.ref_model = None  # as TRL does with the reference it builds itself: the log-probs are in the data

    def create_accelerator_and_postprocess(self) -> None:
        # transformers' Trainer.__init__ makes the Accelerator here, before DPOTrainer shards the reference.
        super().create_accelerator_and_postprocess()
        reference, self._reference_to_split = self._reference_to_split, None
        if reference is not None and getattr(self.accelerator, "is_fsdp2", False):
            units = shard_per_layer(reference, self.accelerator)
            logger.info("reference model: sharded one FSDP unit per decoder layer (%d units + the root)", units)

    def _precompute_ref_logps(self, *args, **kwargs):
        self._sync_reference()  # the precompute inside DPOTrainer.__init__ runs before __init__ returns
        return super()._precompute_ref_logps(*args, **kwargs)

    def _sync_reference(self) -> None:
        full_state, self._reference_full_state = self._reference_full_state, None
        if full_state is None or self.ref_model is None or not getattr(self.accelerator, "is_fsdp2", False):
            return
        from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict
        from torch.distributed.fsdp import CPUOffloadPolicy

        offload = isinstance(self.accelerator.state.fsdp_plugin.cpu_offload, CPUOffloadPolicy)
        fsdp2_load_full_state_dict(self.accelerator, self.ref_model, full_state, cpu_offload=offload)
        if hasattr(self.ref_model, "tie_weights"):
            self.ref_model.tie_weights()  # load_state_dict(assign=True) replaced the tied tensor on one side only
        self.ref_model.eval()
        logger.info("reference model: rank 0's weights broadcast into every FSDP shard (cpu_ram_efficient_loading)")


def shard_per_layer(model, accelerator) -> int:
    """`fully_shard` each module the accelerate config's auto-wrap policy picks (the decoder layers), with the
    settings TRL's `prepare_fsdp` gives the root; returns how many units it made."""
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
    from accelerate.utils.other import get_module_children_bottom_up
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    plugin = accelerator.state.fsdp_plugin
    plugin.set_auto_wrap_policy(model)
    wraps = fsdp2_prepare_auto_wrap_policy(plugin, model)
    if wraps is None:
        return 0
    mesh = getattr(accelerator, "torch_device_mesh", None)
    settings = {
        "reshard_after_forward": plugin.reshard_after_forward,
        "offload_policy": plugin.cpu_offload,
        "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy(),
        "mesh": mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)] if mesh is not None else None,
    }
    units = 0
    for module in get_module_children_bottom_up(model)[:-1]:  # the root is TRL's
        if wraps(module) and not isinstance(module, FSDPModule):
            fully_shard(module, **settings)
            units += 1
    return units
