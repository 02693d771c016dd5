"""Weights read once under FSDP (`fsdp_cpu_ram_efficient_loading: true`, timealign.train.fsdp_loading), with 2 CPU
processes running real FSDP2 (tests/fsdp_on_cpu.py: the gloo state marked as GPUs, nothing else changed).

- Only rank 0 takes the model into host RAM; rank 1's model holds unwritten storage and rank 0's rotary buffers.
- Training with it equals training where every rank reads the weights, step by step: offset-DPO with the reference on
  the fly and precomputed, in fp32 and bf16 (before the fix, TRL's reference held zeros on rank 1: step 1's margins
  were not 0), and TIMER SFT in bf16 (its tokens grow the embeddings before sharding).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT, free_port, launcher_env, run_checked

HARNESS = str(REPO_ROOT / "tests" / "fsdp_on_cpu.py")
SHIPPED = ("fsdp", "fsdp_offload")


def _launch(config: Path, *args: str, env=None, check=True):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2"]
    cmd += ["--main_process_port", str(free_port()), HARNESS, *args]
    return run_checked(cmd, env or launcher_env(), check=check, timeout=900)


def test_shipped_fsdp_configs_load_weights_once():
    for name in SHIPPED:
        config = yaml.safe_load((REPO_ROOT / "recipes" / "accelerate" / f"{name}.yaml").read_text())
        assert config["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] is True, name


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random Llama of 75M parameters in fp32 (300 MB): large against the RSS noise of a process."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
        tie_word_embeddings=True,
        rope_theta=500000.0,
    )
    folder = tmp_path_factory.mktemp("model") / "llama-75m"
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_only_rank_zero_reads_the_weights_into_host_ram(model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    _launch(REPO_ROOT / "recipes/accelerate/fsdp.yaml", "load", str(model_dir), str(tmp_path))
    rank0, rank1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    size = rank0["param_bytes"]
    assert size == rank1["param_bytes"] > 250e6
    # rank 0 holds the weights it read (counted once touched: the checkpoint is memory-mapped)
    assert rank0["rss_touched"] - rank0["rss_before"] > 0.9 * size, rank0
    # rank 1: allocated, never written, so not resident (accelerate's broadcast fills its shards); summing its garbage
    # afterwards would count the sum's own temporaries, so the reading is taken right after loading
    assert rank1["rss_loaded"] - rank1["rss_before"] < 0.1 * size, rank1
    assert rank1["inv_freq"] == rank0["inv_freq"]  # the non-persistent rotary buffer, from rank 0
    assert rank0["tied"] and rank1["tied"]
    assert rank1["name_or_path"] == str(model_dir)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    read = float(sum(p.double().sum() for p in reference.parameters()))
    assert rank0["weight_sum"] == pytest.approx(read) and read != 0.0
    assert rank0["inv_freq"] == reference.model.rotary_emb.inv_freq.tolist()


TRAIN = [
    "train",
    "recipe=tiny",
    "launch.accelerate_config=fsdp",
    "training.max_steps=3",
    "data.synthetic_trajectories=8",
    "training.per_device_train_batch_size=2",
    "training.logging_steps=1",
    "training.save_strategy=no",
    "training.report_to=[none]",
]


def _log(out: Path, keys=("loss", "rewards/margins", "rewards/chosen", "grad_norm")) -> dict[int, dict]:
    log = json.loads((out / "train_log.json").read_text())
    return {e["step"]: {k: e[k] for k in keys} for e in log if "loss" in e}


TRAIN_SFT = [
    "sft",
    "recipe=tiny-timer",
    "launch.accelerate_config=fsdp",
    "training.max_steps=3",
    "training.logging_steps=1",
    "training.save_strategy=no",
    "training.report_to=[none]",
]
SFT_KEYS = ("loss", "grad_norm")
PRECISIONS = {"fp32": [], "bf16": ["model.dtype=bfloat16", "training.bf16=true"]}


@pytest.fixture(scope="module")
def every_rank_reads(tmp_path_factory):
    """precision -> the same training with the weights read by every rank (the shipped config, efficient loading
    off)."""
    root = tmp_path_factory.mktemp("every-rank")
    config = yaml.safe_load((REPO_ROOT / "recipes/accelerate/fsdp.yaml").read_text())
    config["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] = False
    path = root / "fsdp-every-rank.yaml"
    path.write_text(yaml.safe_dump(config))
    logs = {}

    def run(precision: str, task: str = "dpo") -> dict[int, dict]:
        if (task, precision) not in logs:
            out = root / f"{task}-{precision}"
            args = TRAIN if task == "dpo" else TRAIN_SFT
            _launch(path, *args, *PRECISIONS[precision], f"output_dir={out}")
            logs[task, precision] = _log(out) if task == "dpo" else _log(out, SFT_KEYS)
        return logs[task, precision]

    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "precision, precompute",
    [("fp32", False), ("fp32", True), ("bf16", False)],
    ids=["reference-on-the-fly", "precomputed-reference", "bf16-mixed-precision"],
)
def test_training_with_weights_read_once_equals_every_rank_reading(every_rank_reads, precision, precompute, tmp_path):
    """bf16: accelerate upcasts the trained weights to fp32 before sharding; ranks without weights build them in
    fp32 (`load_model(master_fp32=True)`) and must end up identical."""
    out = tmp_path / "run"
    proc = _launch(
        REPO_ROOT / "recipes/accelerate/fsdp.yaml",
        *TRAIN,
        *PRECISIONS[precision],
        f"training.precompute_ref_log_probs={str(precompute).lower()}",
        f"output_dir={out}",
    )
    info = json.loads((out / "run_info.json").read_text())
    assert info["distributed_type"] == "DistributedType.FSDP" and info["model_wrapper"].startswith("FSDP"), info
    output = proc.stderr + proc.stdout
    assert "rank 0's weights broadcast into every FSDP shard" in output
    # kept for training: one unit per decoder layer (tiny has 2); precomputed: dropped after one pass, left whole
    assert ("sharded one FSDP unit per decoder layer (2 units + the root)" in output) is not precompute
    got = _log(out)
    assert sorted(got) == [1, 2, 3]
    assert got[1]["rewards/margins"] == 0.0  # step 1: policy == reference on every rank
    for step, values in every_rank_reads(precision).items():
        assert got[step] == pytest.approx(values, abs=1e-5), step


@pytest.mark.slow
def test_timer_sft_with_weights_read_once_equals_every_rank_reading(every_rank_reads, tmp_path):
    """TIMER SFT grows the embeddings for its tokens before sharding, on rank 1's never-written fp32 model too."""
    out = tmp_path / "run"
    _launch(REPO_ROOT / "recipes/accelerate/fsdp.yaml", *TRAIN_SFT, *PRECISIONS["bf16"], f"output_dir={out}")
    info = json.loads((out / "run_info.json").read_text())
    assert info["distributed_type"] == "DistributedType.FSDP" and info["model_wrapper"].startswith("FSDP"), info
    got = _log(out, SFT_KEYS)
    assert sorted(got) == [1, 2, 3]
    for step, values in every_rank_reads("bf16", task="sft").items():
        assert got[step] == pytest.approx(values, abs=1e-5), step


@pytest.mark.slow
def test_lora_with_precomputed_reference_is_refused_under_efficient_loading(tmp_path):
    out = tmp_path / "run"
    proc = _launch(
        REPO_ROOT / "recipes/accelerate/fsdp.yaml",
        *TRAIN,
        "lora.enabled=true",
        "training.precompute_ref_log_probs=true",
        f"output_dir={out}",
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith("error: training.precompute_ref_log_probs=true with lora.enabled=true under FSDP")
    assert "training.precompute_ref_log_probs=false" in errors[0]
