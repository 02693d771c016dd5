"""The options of benchmarks/bench_dpo.py (`key=value` on its command line), shared by its three parts."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.harness import REPO_ROOT
from timealign.config.schema import opt

MODELS = ("tiny", "smol")  # timealign.models.LOCAL_MODELS names with a recipe of the same name
DEFAULT_TICTOC = REPO_ROOT.parent / "shared" / "data" / "tictoc-v1"  # ../shared/data/tictoc-v1 beside the repo


@dataclass
class DpoBenchOptions:
    tictoc: str = opt(
        str(DEFAULT_TICTOC),
        "folder of the real TicToc v1 release (prefer{Tool,NoTool}_elapse_*.json) "
        "for part 1; part 1 is skipped if it is absent",
    )
    data_runs: int = opt(3, "data-prep repetitions (each into a fresh folder); best and median are reported")
    steps: int = opt(12, "max_steps of each training run; the first `warmup` steps are not timed")
    warmup: int = opt(2, "untimed warm-up steps at the start of each run")
    repeats: int = opt(
        2,
        "rounds of one run per variant, order rotating per round (GPU part: ODPO,TRL / "
        "TRL,ODPO) to cancel drift; medians, spread and per-round ratios are reported",
    )
    model: str = opt(
        "tiny",
        "part 2: the model of the CPU comparison and of its v1 pairs' rendering: tiny (random, 2k vocabulary) or "
        "smol (SmolLM2-135M-Instruct, 49k vocabulary; `make bench-smol`), fp32, its recipe's training section",
        choices=MODELS,
    )
    batch_size: int = opt(8, "per_device_train_batch_size, pairs per step")
    pairs: int = opt(
        96,
        "part 2: real TicToc v1 train pairs (seeded sample, rendered with the model's tokenizer); "
        "steps x batch_size of them are read once in order",
    )
    max_length: int = opt(1024, "DPOConfig.max_length of the CPU runs")
    seed: int = opt(0, "DPOConfig.seed, the same for every run")
    variants: str = opt(
        "trl,offset,shared_prompt,shared_prompt_precomputed_ref,length_grouped,padding_free,padding_free_ref",
        "part 2: comma list of the variants to time (benchmarks/dpo_variants.py); empty: none",
    )
    head_ab_steps: int = opt(
        0,
        "part 2c: steps per trainer of the interleaved A/B of the shared prompt's LM head on the labelled positions "
        "only (the default) against every position (TRL's CPU path); 0 skips it",
    )
    sweep_prompts: str = opt("256,512,1024,2048,4096", "part 2b: prompt lengths in tokens")
    sweep_completions: str = opt("16,64,256", "part 2b: completion lengths in tokens")
    sweep_steps: int = opt(3, "part 2b: steps per run (the first is a warm-up)")
    sweep_batch_size: int = opt(2, "part 2b: pairs per step")
    skip_sweep: bool = opt(False, "skip part 2b (the prompt/completion sweep)")
    sweep_png: str = opt(
        "results/bench/dpo_sweep.png",
        "part 2b: where the sweep's picture goes (docs/bench/dpo_sweep.png is a kept copy)",
    )
    worker: str | None = opt(None, "internal: run one variant of part 2 in this process and write its numbers to json")
    worker_data: str | None = opt(None, "internal: the saved pairs a worker trains on")
    ab_steps: int = opt(
        6,
        "steps per trainer of the interleaved per-step A/B run after each comparison (both "
        "trainers built once, single steps alternated; robust to other processes on the "
        "machine); 0 skips it",
    )
    no_precompute: bool = opt(False, "skip the second comparison with precompute_ref_log_probs=True")
    skip_data: bool = opt(False, "skip part 1 (data prep)")
    skip_train: bool = opt(False, "skip parts 2 and 3 (training throughput)")
    peak_tflops: float = opt(989.0, "accelerator peak bf16 dense TFLOP/s for MFU in part 3 (989: H100 SXM)")
    gpu_seq_len: int = opt(1024, "part 3: target tokens per sequence (prompt + completion)")
    gpu_steps: int = opt(12, "part 3: max_steps per run")
    gpu_batch_size: int = opt(8, "part 3: pairs per step")
    note: str = opt(
        "",
        "kept in the JSON (`note`) and printed: say `busy` (and what ran beside) when other processes share the "
        "cores, so the numbers are not read as a calm machine's",
    )
    json: str | None = opt(
        "results/bench/dpo.json",
        "also write every number to this JSON file (ratios to stock TRL under dpo.ratio_vs_trl)",
    )
