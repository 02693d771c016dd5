"""FSDP2 on CPU processes, for tests: accelerate builds FSDP only on GPUs (under use_cpu it silently gives DDP, see
../shared/NOTES.md), so each process's state is made with the gloo backend and marked MULTI_GPU, which accelerate then
turns into FSDP from the launcher's environment (ACCELERATE_USE_FSDP, FSDP_*). Nothing else is changed: the product's
loading, TRL's `prepare_fsdp`, accelerate's `fsdp2_prepare_model` and torch's `fully_shard` run as on GPUs. CPU offload
cannot run here (FSDP2 pins its host memory, which needs CUDA).

    accelerate launch --config_file recipes/accelerate/fsdp.yaml --num_processes 2 tests/fsdp_on_cpu.py \
        train recipe=tiny launch.accelerate_config=fsdp ...       # train/dpo.py's main (sft: train/sft.py's)
    accelerate launch ... tests/fsdp_on_cpu.py load MODEL_DIR OUT_DIR   # host RAM of `load_model` per rank
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from accelerate.state import PartialState
from accelerate.utils import DistributedType

_partial_state_init = PartialState.__init__


def _gloo_state_marked_gpu(self, cpu: bool = False, **kwargs):
    _partial_state_init(self, cpu=True, **{**kwargs, "backend": "gloo"})
    if self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.MULTI_GPU


PartialState.__init__ = _gloo_state_marked_gpu


def load(model_dir: str, out_dir: str) -> int:
    """Each rank's resident host memory (RSS) before `timealign.train.models.load_model`, after it, and after reading
    every weight it returned (safetensors are memory-mapped: a weight read from the checkpoint takes RAM only when
    touched), its rotary buffer and its weight sum, written to OUT_DIR/rank-N.json."""
    from types import SimpleNamespace

    import psutil
    import torch
    import transformers.models.llama.modeling_llama  # noqa: F401  imported before the first RSS reading
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401

    from timealign.train import fsdp_loading  # noqa: F401
    from timealign.train.models import load_model

    state = PartialState()
    section = SimpleNamespace(dtype="float32", attn_implementation="sdpa", trust_remote_code=False)
    process = psutil.Process()
    before = process.memory_info().rss
    model = load_model(model_dir, section)
    loaded = process.memory_info().rss
    weight_sum = float(sum(p.double().sum() for p in model.parameters()))
    touched = process.memory_info().rss
    report = {
        "rank": state.process_index,
        "rss_before": before,
        "rss_loaded": loaded,
        "rss_touched": touched,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "inv_freq": model.model.rotary_emb.inv_freq.tolist(),
        "tied": model.lm_head.weight is model.model.embed_tokens.weight,
        "weight_sum": weight_sum,
        "name_or_path": model.config._name_or_path,
    }
    Path(out_dir, f"rank-{state.process_index}.json").write_text(json.dumps(report))
    torch.distributed.barrier()
    return 0


def main(argv: list[str]) -> int:
    mode, rest = argv[0], argv[1:]
    if mode == "train":
        from timealign.train.dpo import main as dpo_main

        return dpo_main(rest)
    if mode == "sft":
        from timealign.train.sft import main as sft_main

        return sft_main(rest)
    if mode == "load":
        return load(*rest)
    raise SystemExit(f"fsdp_on_cpu.py: mode must be train, sft or load, got {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
