#!/usr/bin/env python
"""Throughput numbers for timealign: data prep on the real TicToc v1 release, and offset-DPO training steps/s
against stock `trl.DPOTrainer` on the same model, batch, data and config. Not a test: goals are printed with
whether they were met, nothing fails.

    HF_HUB_OFFLINE=1 python benchmarks/bench_dpo.py [steps=12] [repeats=2] [json=results/bench.json]

The parts live in benchmarks/dpo_data_prep.py, dpo_trainers.py and dpo_gpu.py; the timing and statistics they
share in benchmarks/harness.py and trainer_ab.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root, for benchmarks.*

from benchmarks.dpo_options import DpoBenchOptions  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Command,
    check_steps,
    finish,
    machine_info,
    offline_environment,
    options_record,
    print_header,
    quiet_libraries,
    run_benchmark,
    table,
    write_json,
)

PARTS = """Parts:
  1. data prep   `timealign.data.pairs.prepare` on the v1 release (load + pairs + save), best/median of N runs,
                 then rendering every pair into prompt strings (`render_split` + `PromptRenderer`, tiny tokenizer),
                 which happens at train time. Goal: data prep < 5 s on 2 cores.
  2. CPU train   the offset-DPO speed-ups one at a time against stock `trl.DPOTrainer` on real TicToc v1 pairs
                 (model=tiny: tiny model and tokenizer; model=smol: SmolLM2-135M and its 49k tokenizer, `make
                 bench-smol`): offset, + shared prompt, + precomputed reference, + length-grouped batches,
                 padding-free rows, with the precomputed reference and with the reference every step
                 (benchmarks/dpo_variants.py); steps/s, s/pair, tokens/s, padding share, peak
                 RSS, each as a ratio to stock TRL (JSON: dpo.ratio_vs_trl). Goals: shared prompt >= 1.8x, with the
                 precomputed reference >= 2.5x. Each run is a fresh process, the order rotates per round. Then
                 (ab_steps > 0) each variant's interleaved per-step A/B against stock TRL, robust to other load
                 (JSON: dpo.ratio_vs_trl_interleaved).
  2c. LM head  (head_ab_steps > 0) the shared prompt with the LM head on the labelled positions only (the default,
                 `timealign.train.compact_head`) against TRL's fused head on every position (compact_lm_head=False,
                 what TRL does on CPU): interleaved per-step A/B on the same real v1 pairs, policy forward + backward
                 and the reference forward (JSON: compact_head). `variants=` (empty) runs it alone.
  2b. sweep      shared prompt vs stock TRL over prompt lengths x completion lengths (synthetic pairs of exact
                 token counts), drawn to sweep_png (benchmarks/dpo_sweep.py).
  3. GPU train   (only when CUDA is available) the same comparison on a random-init Llama-3.2-1B-shaped model in
                 bf16 at ~1024 tokens per sequence, with MFU from a 6*N*T (+2*N*T reference) FLOP estimate.

Smallest run (smoke test): python benchmarks/bench_dpo.py data_runs=1 steps=3 warmup=1 repeats=1 batch_size=2 \\
    pairs=6 sweep_prompts=256 sweep_completions=16 json=/tmp/bench.json"""

COMMAND = Command(
    prog="python benchmarks/bench_dpo.py",
    summary=__doc__.split("\n\n")[0],
    options=DpoBenchOptions,
    recipe="none",
    examples=PARTS,
)


def run(opts: DpoBenchOptions) -> int:
    if opts.worker:
        from benchmarks.dpo_variants import worker_main

        return worker_main(opts)
    check_steps(opts.warmup, steps=opts.steps, gpu_steps=opts.gpu_steps)
    quiet_libraries()
    import torch

    from benchmarks.dpo_data_prep import bench_data_prep, report_data
    from benchmarks.dpo_gpu import bench_gpu_train, report_gpu
    from benchmarks.dpo_sweep import bench_sweep, plot_sweep, report_sweep
    from benchmarks.dpo_variants import bench_variants, report_variants

    started = time.perf_counter()
    results = {"env": machine_info(), "args": options_record(opts), "note": opts.note}
    if not opts.skip_data:
        results["data_prep"] = bench_data_prep(opts)
    if not opts.skip_train:
        if opts.variants:  # empty: part 2c alone
            results["dpo"] = bench_variants(opts)
        if opts.head_ab_steps > 0:
            results["compact_head"] = bench_compact_head(opts)
        if not opts.skip_sweep:
            results["sweep"] = bench_sweep(opts)
            plot_sweep(results["sweep"], Path(opts.sweep_png))
        if torch.cuda.is_available():
            results["gpu_train"] = bench_gpu_train(opts)
        else:
            results["gpu_train"] = {"skipped": "no GPU (torch.cuda.is_available() is False)"}
    finish(results, started)

    print_header(
        "timealign benchmark",
        results["env"],
        note="; ".join(
            filter(
                None,
                [
                    opts.note,
                    "other processes on these cores slow every number below, alternating runs keeps the ODPO/TRL "
                    "ratio fair",
                ],
            )
        ),
    )
    if "data_prep" in results:
        report_data(results["data_prep"])
    if "dpo" in results:
        report_variants(results["dpo"], opts)
    if "compact_head" in results:
        report_compact_head(results["compact_head"])
    if "sweep" in results:
        report_sweep(results["sweep"], Path(opts.sweep_png))
    if "gpu_train" in results:
        report_gpu(results["gpu_train"], opts)
    print(f"\ntotal wall time: {results['total_s']:.0f} s")
    write_json(opts.json, results)
    return 0


def bench_compact_head(opts: DpoBenchOptions) -> dict:
    """Part 2c: shared-prompt steps with the LM head on the labelled positions only ("compact") against TRL's head on
    every position ("full"), both trainers built once and stepped ABBA on the same pairs (`trainer_ab.interleaved_ab`:
    forward + backward, no optimizer step). ratio_paired_*: full's seconds over compact's (above 1: compact faster)."""
    import statistics
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig

    from benchmarks.dpo_variants import pair_tokens, v1_pairs, variant_config
    from benchmarks.harness import log
    from benchmarks.trainer_ab import interleaved_ab
    from timealign.models import resolve_model_path
    from timealign.train.odpo import OffsetDPOTrainer

    model_dir = resolve_model_path(opts.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = variant_config(opts)
    with tempfile.TemporaryDirectory(prefix="bench-head-") as tmp:
        dataset, too_long = v1_pairs(tokenizer, opts, Path(tmp), opts.model)
        tokens = pair_tokens(tokenizer, dataset)
        log(
            f"LM head A/B: {len(dataset)} v1 pairs, prompt median {statistics.median(tokens['prompt'])} tokens, "
            f"completions median {statistics.median(tokens['chosen'] + tokens['rejected'])}, "
            f"{torch.get_num_threads()} torch threads"
        )

        def build(kind: str, workdir: Path, callbacks: list):
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            return OffsetDPOTrainer(
                model=model,
                args=DPOConfig(output_dir=str(workdir), **config),
                train_dataset=dataset,
                processing_class=tokenizer,
                callbacks=callbacks,
                shared_prompt=True,
                compact_lm_head=kind == "compact",
            )

        res = interleaved_ab("LM head", ("compact", "full"), build, opts.head_ab_steps, Path(tmp) / "ab", lambda: None)
    res.pop("same_batches", None)  # shared rows carry no attention mask to compare; both read the pairs in order
    # Positions per pair through the head: full, every position of the tree row (prompt + chosen + bridge + rejected,
    # less the last); compact, the completion tokens only.
    rows = [p + c + 1 + r - 1 for p, c, r in zip(tokens["prompt"], tokens["chosen"], tokens["rejected"])]
    labelled = [c + r for c, r in zip(tokens["chosen"], tokens["rejected"])]
    return {
        "model": opts.model,
        "batch_size": opts.batch_size,
        "pairs": len(dataset),
        "left_out_over_max_length": too_long,
        "torch_threads": torch.get_num_threads(),
        "tokens": {k: {"median": statistics.median(v), "max": max(v)} for k, v in tokens.items()},
        "head_positions_per_pair": {"full": statistics.mean(rows), "compact": statistics.mean(labelled)},
        "compact_steps_per_s": 1 / res["compact_step_s_median"],
        "full_steps_per_s": 1 / res["full_step_s_median"],
        **res,
    }


def report_compact_head(res: dict) -> None:
    positions = res["head_positions_per_pair"]
    print(
        f"\n## 2c. LM head on the labelled positions only vs on every position (TRL's CPU path): {res['model']}, "
        f"{res['pairs']} real v1 pairs, batch {res['batch_size']}, {res['torch_threads']} torch threads, "
        f"{positions['compact']:.0f} of {positions['full']:.0f} positions per pair through the head"
    )
    print(
        table(
            ["head", "s/step (median)", "steps/s"],
            [
                [
                    "labelled positions (default)",
                    f"{res['compact_step_s_median']:.2f}",
                    f"{res['compact_steps_per_s']:.3f}",
                ],
                ["every position", f"{res['full_step_s_median']:.2f}", f"{res['full_steps_per_s']:.3f}"],
            ],
        )
    )
    print(
        "paired ratio (every position's s/step over labelled's; above 1: faster) median "
        f"{res['ratio_paired_median']:.3f}, range {res['ratio_paired_min']:.3f}..{res['ratio_paired_max']:.3f}, "
        f"{res['steps']} steps each, ABBA"
    )


def main(argv: list[str] | None = None) -> int:
    offline_environment()
    return run_benchmark(COMMAND, argv, run)


if __name__ == "__main__":
    sys.exit(main())
